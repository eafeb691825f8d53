#!/usr/bin/env bash
# Counts the instructions of the timed loops (run_sets, run_gets) of the C API benchmark and its
# Rust twin under callgrind. Unlike wall time, the counts do not move with the load of a shared
# machine, so the difference per operation is what the C API adds in instructions.
# Usage: instructions.sh BENCH_C BENCH_RUST [items]
set -euo pipefail
c_bin=$1 rust_bin=$2 items=${3:-200000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # binary, function pattern -> total Ir of that function and its callees
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" --collect-atstart=no \
    --toggle-collect="$2" "$1" "$items" 1 >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$tmp/out"
}
c_set=$(count "$c_bin" run_sets); c_get=$(count "$c_bin" run_gets)
r_set=$(count "$rust_bin" '*run_sets*'); r_get=$(count "$rust_bin" '*run_gets*')
row() { awk -v n="$1" -v c="$2" -v r="$3" -v k="$items" 'BEGIN { printf "| %s | %.0f | %.0f | %+.0f (%+.1f%%) |\n", n, c / k, r / k, (c - r) / k, 100 * (c - r) / r }'; }
echo "items=$items, instructions per operation (callgrind, timed loop only)"
echo "| op | C API instr/op | Rust SharedCache instr/op | C API adds |"
echo "|---|---|---|---|"
row "get hit (copy into buffer)" "$c_get" "$r_get"
row "set" "$c_set" "$r_set"
