#!/usr/bin/env bash
# Runs the C API benchmark and its Rust twin in the same run, alternating, and prints a table of
# the medians with the overhead of the C API. Usage: compare.sh BENCH_C BENCH_RUST [items] [reps]
set -euo pipefail
c_bin=$1 rust_bin=$2 items=${3:-1000000} reps=${4:-5}
field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
c1=$("$c_bin" "$items" "$reps"); r1=$("$rust_bin" "$items" "$reps")
c2=$("$c_bin" "$items" "$reps"); r2=$("$rust_bin" "$items" "$reps")
echo "$c1"; echo "$r1"; echo "$c2"; echo "$r2"
best() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (a < b ? a : b) }'; }
c_set=$(best "$(field set_ns "$c1")" "$(field set_ns "$c2")")
c_get=$(best "$(field get_ns "$c1")" "$(field get_ns "$c2")")
r_set=$(best "$(field set_ns "$r1")" "$(field set_ns "$r2")")
r_get=$(best "$(field get_ns "$r1")" "$(field get_ns "$r2")")
r_own=$(best "$(field get_owned_ns "$r1")" "$(field get_owned_ns "$r2")")
row() { awk -v n="$1" -v c="$2" -v r="$3" 'BEGIN { d = c - r; printf "| %s | %.1f | %.1f | %+.1f ns (%+.1f%%) |\n", n, c, r, d, 100 * d / r }'; }
echo
echo "items=$items reps=$reps (median per run, better of 2 alternating runs)"
echo "| op | C API ns/op | Rust SharedCache ns/op | C API overhead |"
echo "|---|---|---|---|"
row "get hit (copy into buffer)" "$c_get" "$r_get"
row "set" "$c_set" "$r_set"
echo "| (Rust get() returning an owned copy) | | $r_own | |"
