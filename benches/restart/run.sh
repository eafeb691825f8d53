#!/usr/bin/env bash
# Warm-restart benchmarks of issue 4 (docs/restart.md):
#  1. segcache graceful stop + reopen and kill -9 + reopen, beside memcached 1.6 -e (SIGUSR1 /
#     kill -9), at each heap size, alternating, in one run (restart-bench compare);
#  2. steady-state get/set on a file-backed heap vs anonymous memory, alternating, twice each.
# Knobs (environment): SIZES (default 256MiB,1GiB), REPS (1), DIR (/dev/shm, or /tmp when
# /dev/shm cannot hold the largest heap twice), STEADY_ITEMS (1000000), PORT (21987).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The workspace target folder unless told otherwise: reuses the release build of `make test`.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
SIZES="${SIZES:-256MiB,1GiB}"
REPS="${REPS:-1}"
STEADY_ITEMS="${STEADY_ITEMS:-1000000}"
PORT="${PORT:-21987}"

if ! command -v memcached >/dev/null; then
  echo "memcached missing: installing the Debian package"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq memcached >/dev/null
fi

# Both engines' files for the largest size must fit (memcached's -e file and segcache's heap).
need_kib=$((2 * 1024 * 1024 + 65536))
DIR="${DIR:-/dev/shm}"
avail_kib=$(df -Pk "$DIR" | awk 'NR==2 {print $4}')
if [ "$avail_kib" -lt "$need_kib" ]; then
  echo "$DIR has ${avail_kib} KiB free, less than ${need_kib}: using /tmp (a regular file system)"
  DIR=/tmp
fi

cargo build --release -q -p segcache-restart-bench
BIN="$CARGO_TARGET_DIR/release/restart-bench"

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $(memcached -V)"
echo "== restart: sizes $SIZES, reps $REPS, files in $DIR"
"$BIN" compare --sizes "$SIZES" --reps "$REPS" --dir "$DIR" --port "$PORT"

echo "== steady state, $STEADY_ITEMS items, 16-byte keys, 64-byte values (anon / file alternating)"
# A tmpfs mounted with huge=advise gives the file mapping the 2 MiB pages that anonymous memory
# gets (the engine advises them on both); a default tmpfs (huge=never) has 4 KiB pages only.
# Mounting needs root: without it, that column is skipped.
HUGE_DIR=$(mktemp -d)
if mount -t tmpfs -o size=1G,huge=advise segcache-huge "$HUGE_DIR" 2>/dev/null; then
  HUGE_MOUNTED=1
else
  HUGE_MOUNTED=
  echo "(cannot mount a huge=advise tmpfs here: the huge-page file column is skipped)"
fi
steady_file="$DIR/segcache-steady-$$.heap"
cleanup() {
  rm -f "$steady_file"
  [ -n "$HUGE_MOUNTED" ] && umount "$HUGE_DIR"
  rmdir "$HUGE_DIR"
}
trap cleanup EXIT
for round in 1 2; do
  "$BIN" steady --items "$STEADY_ITEMS"
  "$BIN" steady --items "$STEADY_ITEMS" --path "$steady_file"
  [ -n "$HUGE_MOUNTED" ] && "$BIN" steady --items "$STEADY_ITEMS" --path "$HUGE_DIR/steady.heap"
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
