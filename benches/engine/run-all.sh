#!/usr/bin/env bash
# Produces every table of docs/engine-bench.md: criterion (one thread), resident bytes per
# retained item, hit ratio at equal memory, and thread scaling. Run from anywhere; takes about
# 15-20 minutes on a 2-core machine. Writes the tables to stdout and to $OUT (default
# target/engine-bench/results.md).
#
#   benches/engine/run-all.sh            # everything, final sizes
#   QUICK=1 benches/engine/run-all.sh    # small sizes, a smoke test of the whole pipeline
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/engine-bench}"
OUT="${OUT:-$CARGO_TARGET_DIR/results.md}"
BIN="$CARGO_TARGET_DIR/release"
LIBS_ALL="ours ours-single pelikan quick-cache moka lru"

if [ -n "${QUICK:-}" ]; then
  ITEMS=20000; RSS_MIB=16; HR=(--budget-mib 4 --keys 200000 --ops 400000 --warmup 200000)
  THR=(--items 20000 --secs 0.2 --reps 1 --ops-per-thread 50000); CRIT=(--warm-up-time 0.1 --measurement-time 0.3 --sample-size 10)
else
  ITEMS=1000000; RSS_MIB=256; HR=(--budget-mib 64); THR=(--reps 3); CRIT=()
fi

# Build everything first and run the built executables, so that a change elsewhere in the tree
# during the run cannot trigger a rebuild between the tables.
cargo build --release -p segcache-engine-benches --bins
CRIT_EXE=$(cargo bench -p segcache-engine-benches --bench engine --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\))$/\1/p' | tail -1)
[ -x "$CRIT_EXE" ] || { echo "criterion executable not found" >&2; exit 1; }

{
  echo "# segcache-core engine benchmarks"
  echo
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%dT%H:%MZ);"
  echo "engine at $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo
  echo "## One thread, $ITEMS items (criterion, median)"
  echo
  echo '`BENCH_ITEMS='$ITEMS' cargo bench -p segcache-engine-benches -- '"${CRIT[*]}"'`'
  echo
} > "$OUT"

rm -rf "$CARGO_TARGET_DIR/criterion"
BENCH_ITEMS=$ITEMS "$CRIT_EXE" --bench "${CRIT[@]}" >&2
python3 benches/engine/summarize.py "$CARGO_TARGET_DIR/criterion" >> "$OUT"

{
  echo
  echo "## Resident bytes per retained item ($RSS_MIB MiB budget, 4x overfilled)"
  echo
  echo '`target/engine-bench/release/rss --lib LIB --budget-mib '$RSS_MIB'` (one process per library)'
  echo
  h=--header
  RSS_ROWS=""
  for l in $LIBS_ALL; do
    row=$("$BIN/rss" --lib "$l" --budget-mib "$RSS_MIB" $h); h=
    echo "$row"; RSS_ROWS+="$l ${row##*$'\n'}"$'\n'
  done
  echo
  echo "## Hit ratio, Zipf 0.99 over the key space, 90:10 get:set, cache-aside fill"
  echo
  echo '`target/engine-bench/release/hitratio --lib LIB '"${HR[*]}"'` (one process per library).'
  echo 'Rows marked "equal RSS" give the count-sized peers the `--capacity` whose RSS equals the larger'
  echo 'of our two RSS figures in this table: a first run at (our RSS) / (their RSS bytes per retained'
  echo 'item above), then the capacity interpolated linearly between that run and the 64 MiB-of-data'
  echo 'run, which is the row shown (its RSS column shows how close it came).'
  echo
  h=--header
  OURS_RSS=0
  declare -A CAP0 RSS0
  for l in $LIBS_ALL; do
    row=$("$BIN/hitratio" --lib "$l" "${HR[@]}" $h); h=
    echo "$row"
    last=${row##*$'\n'}
    rss=$(echo "$last" | awk -F'|' '{gsub(/ /, "", $5); print $5}')
    case $l in
      ours|ours-single) OURS_RSS=$(awk -v a="$OURS_RSS" -v b="$rss" 'BEGIN {print (b > a) ? b : a}') ;;
      *) CAP0[$l]=$(echo "$last" | awk -F'|' '{print $3 + 0}'); RSS0[$l]=$rss ;;
    esac
  done
  for l in quick-cache moka lru; do
    per=$(echo "$RSS_ROWS" | awk -F'|' -v l="$l" '$1 == l" " {print $8}')
    cap1=$(awk -v r="$OURS_RSS" -v p="$per" 'BEGIN {printf "%d", r * 1048576 / p}')
    rss1=$("$BIN/hitratio" --lib "$l" "${HR[@]}" --capacity "$cap1" | awk -F'|' '{gsub(/ /, "", $5); print $5}')
    cap=$(awk -v t="$OURS_RSS" -v c1="$cap1" -v r1="$rss1" -v c0="${CAP0[$l]}" -v r0="${RSS0[$l]}" \
      'BEGIN {c = (r0 != r1) ? c1 + (t - r1) * (c0 - c1) / (r0 - r1) : c1; printf "%d", (c < 1) ? 1 : c}')
    "$BIN/hitratio" --lib "$l" "${HR[@]}" --capacity "$cap" | sed 's/ items |/ items, equal RSS |/'
  done
  echo
  echo "## Threads (shared handles, $( [ -n "${QUICK:-}" ] && echo 20000 || echo 1000000 ) items, best of 3 runs of 1 s)"
  echo
  echo '`target/engine-bench/release/threads '"${THR[*]}"'`'
  echo
  "$BIN/threads" "${THR[@]}"
} | tee -a "$OUT" >/dev/null
cat "$OUT"
