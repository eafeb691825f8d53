#!/usr/bin/env bash
# The cost of TLS: server CPU per request and latency at a fixed rate, each server over its plain
# (notls:) listener and its TLS one, segcache-server -Z against memcached -Z (Debian's build has
# TLS). Rounds are interleaved so that a busy machine's noise shows as spread between them.
# Server on core 0 (SCHED_FIFO 50), client on core 1 (SCHED_FIFO 60): run as root.
# Usage: benches/load/tls_cost.sh [rate] [rounds]  (binaries from ${CARGO_TARGET_DIR:-target}/release)
# With TLS_RAMP=1 it also ramps each server and listener (momento workload, 16 connections, steps
# of RAMP_STEP req/s, 5 s each) to the highest rate inside the 1 ms p99.9 SLO.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR="$(realpath "${CARGO_TARGET_DIR:-target}/release")"
B="$BIN_DIR/segcache-bench"
S="$BIN_DIR/segcache-server"
MC="${MEMCACHED:-/usr/bin/memcached}"
RATE="${1:-10000}"
ROUNDS="${2:-3}"
PLAIN="${TLS_COST_PORT:-22170}"
TLS=$((PLAIN + 1))
OUT="$(mktemp -d /tmp/segcache-tls-cost.XXXXXX)"
PID=""
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$OUT"
}
trap cleanup EXIT

# A CA and a server certificate naming 127.0.0.1.
(
  cd "$OUT"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=bench-ca 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=localhost 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' > ext.cnf
  openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 \
    -extfile ext.cnf 2>/dev/null
)
LISTEN="notls:127.0.0.1:$PLAIN,127.0.0.1:$TLS"
SSL="ssl_chain_cert=$OUT/srv.crt,ssl_key=$OUT/srv.key"
# Starts segcache or memcached on core 0 with both listeners; its pid in PID.
start_server() {
  if [ "$1" = segcache ]; then
    chrt -f 50 taskset -c 0 "$S" -u root -Z -p "$TLS" -l "$LISTEN" -o "$SSL" -t 1 --no-pin -m 64 >/dev/null 2>&1 &
  else
    chrt -f 50 taskset -c 0 "$MC" -u root -Z -p "$TLS" -l "$LISTEN" -o "$SSL" -t 1 -U 0 -m 64 >/dev/null 2>&1 &
  fi
  PID=$!
  sleep 1
}
COMMON=(--rate "$RATE" --duration-s 10 --workload momento --connections 16 --pin-cores 1 --rt-priority 60)
for round in $(seq 1 "$ROUNDS"); do
  for server in segcache memcached; do
    start_server "$server"
    "$B" run --server "127.0.0.1:$PLAIN" --server-pid "$PID" --prefill "${COMMON[@]}" \
      --json "$OUT/$server-plain-$round.json" >/dev/null 2>&1
    "$B" run --server "127.0.0.1:$TLS" --server-pid "$PID" --tls-ca "$OUT/ca.crt" "${COMMON[@]}" \
      --json "$OUT/$server-tls-$round.json" >/dev/null 2>&1
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
  done
done
if [ "${TLS_RAMP:-0}" = 1 ]; then
  STEP="${RAMP_STEP:-10000}"
  for server in segcache memcached; do
    start_server "$server"
    RAMP=(--server-pid "$PID" --prefill --prefill-server "127.0.0.1:$PLAIN" --workload momento --connections 16
          --pin-cores 1 --rt-priority 60 --start "$STEP" --step "$STEP" --stop 300000)
    "$B" ramp --server "127.0.0.1:$PLAIN" --name "$server-plain" "${RAMP[@]}" --out "$OUT/ramp-$server-plain" \
      >/dev/null 2>&1
    "$B" ramp --server "127.0.0.1:$TLS" --tls-ca "$OUT/ca.crt" --name "$server-tls" "${RAMP[@]}" \
      --out "$OUT/ramp-$server-tls" >/dev/null 2>&1
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
  done
  python3 - "$OUT" <<'PY'
import glob, json, sys
print("| server | highest rate inside the 1 ms p99.9 SLO, req/s | CPU us/req at that step |")
print("|---|---|---|")
for f in sorted(glob.glob(f"{sys.argv[1]}/ramp-*/results.json")):
    s = json.load(open(f))["workloads"][0]["servers"][0]
    best = s.get("max_rate_within_slo")
    cpu = next((st.get("server_cpu_us_per_req") for st in s.get("steps", []) if st.get("target_rate") == best), None)
    name = f.split("/")[-2].removeprefix("ramp-")
    print(f"| {name} | {best if best is not None else 'none'} | {cpu if cpu is not None else '-'} |")
PY
fi
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
rows = {}
for f in sorted(glob.glob(f"{sys.argv[1]}/*-*-*.json")):
    d = json.load(open(f))
    rows.setdefault(f.split("/")[-1].rsplit("-", 1)[0], []).append(d)
print("| server | CPU us/req (median of rounds) | each round | p50 us | p99 us | p99.9 us | harness kept schedule |")
print("|---|---|---|---|---|---|---|")
for name, runs in rows.items():
    cpu = [r["server_cpu_us_per_req"] for r in runs]
    lat = lambda k: " / ".join(f"{r['latency'][k]:.0f}" for r in runs)
    kept = sum(bool(r["kept_schedule"]) for r in runs)
    print(f"| {name} | {statistics.median(cpu):.1f} | {' / '.join(f'{c:.1f}' for c in cpu)} | {lat('p50_us')} "
          f"| {lat('p99_us')} | {lat('p999_us')} | {kept}/{len(runs)} |")
PY
