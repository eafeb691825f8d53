#!/usr/bin/env bash
# Short load comparison with libmemcached's memcslap: memcached (Debian, -u root -U 0) and
# segcache-server with the same thread count and memory, alternated in the same run; each figure
# is the median of ROUNDS runs. Prints a markdown table.
#
#   segcache-server/bench/memcslap.sh [ops per client, default 5000] [threads, default 2] [rounds, default 3]
#
# memcaslap is not used: its generated keys start with 8 bytes of 0x10, control characters that
# this server refuses (CLIENT_ERROR), so it would measure error replies.
# Needs: memcached and libmemcached-tools (make deps), a release build of segcache-server.
set -euo pipefail
OPS=${1:-5000}
THREADS=${2:-2}
ROUNDS=${3:-3}
CONC=16
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${SEGCACHE_SERVER_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/segcache-server}
[ -x "$BIN" ] || { echo "build first: cargo build --release -p segcache-server" >&2; exit 1; }
PORT_MC=$((20000 + RANDOM % 5000))
PORT_SC=$((PORT_MC + 1))
PORT_NP=$((PORT_MC + 2))
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT

memcached -u root -U 0 -l 127.0.0.1 -p "$PORT_MC" -t "$THREADS" -m 64 &
PIDS+=($!)
# As memcached, segcache-server refuses to run as root without -u.
ROOT_USER=(); [ "$(id -u)" = 0 ] && ROOT_USER=(-u root)
"$BIN" "${ROOT_USER[@]}" -l 127.0.0.1 -p "$PORT_SC" -t "$THREADS" -m 64 2>/dev/null &
PIDS+=($!)
# The same without core pinning: on a machine shared with the load generator (and other work),
# pinned workers cannot move away from a busy core.
"$BIN" "${ROOT_USER[@]}" -l 127.0.0.1 -p "$PORT_NP" -t "$THREADS" -m 64 --no-pin 2>/dev/null &
PIDS+=($!)
sleep 1

# ops/s of one memcslap run: CONC clients x OPS operations over the wall time.
run() { # port test
  local t
  t=$( { /usr/bin/time -f %e memcslap --servers="127.0.0.1:$1" --concurrency=$CONC --execute-number="$OPS" --test="$2" >/dev/null; } 2>&1 | tail -1)
  awk -v t="$t" -v n=$((CONC * OPS)) 'BEGIN { printf "%.0f\n", n / t }'
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

declare -A R
for _ in $(seq "$ROUNDS"); do
  for name in memcached segcache nopin; do
    port=$PORT_MC
    [ $name = segcache ] && port=$PORT_SC
    [ $name = nopin ] && port=$PORT_NP
    R[$name.set]+="$(run "$port" set) "
    R[$name.get]+="$(run "$port" get) "
  done
done

engine="segment engine"
grep -q PLACEHOLDER "$ROOT/segcache-core/src/engine.rs" && engine="PLACEHOLDER engine"
ms=$(tr ' ' '\n' <<<"${R[memcached.set]}" | grep . | median)
mg=$(tr ' ' '\n' <<<"${R[memcached.get]}" | grep . | median)
ss=$(tr ' ' '\n' <<<"${R[segcache.set]}" | grep . | median)
sg=$(tr ' ' '\n' <<<"${R[segcache.get]}" | grep . | median)
ns=$(tr ' ' '\n' <<<"${R[nopin.set]}" | grep . | median)
ng=$(tr ' ' '\n' <<<"${R[nopin.get]}" | grep . | median)
echo "| server ($THREADS threads) | memcslap set ops/s | memcslap get ops/s | set vs memcached | get vs memcached |"
echo "|---|---|---|---|---|"
echo "| memcached $(memcached -V | cut -d' ' -f2) | $ms | $mg | 1.00 | 1.00 |"
awk -v ss="$ss" -v sg="$sg" -v ms="$ms" -v mg="$mg" -v e="$engine" \
  'BEGIN { printf "| segcache-server (%s, pinned) | %d | %d | %.2f | %.2f |\n", e, ss, sg, ss / ms, sg / mg }'
awk -v ss="$ns" -v sg="$ng" -v ms="$ms" -v mg="$mg" -v e="$engine" \
  'BEGIN { printf "| segcache-server (%s, --no-pin) | %d | %d | %.2f | %.2f |\n", e, ss, sg, ss / ms, sg / mg }'
echo
echo "memcslap --concurrency=$CONC --execute-number=$OPS (1536-byte values), median of $ROUNDS alternated rounds;"
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load generator on the same cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
