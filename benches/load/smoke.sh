#!/usr/bin/env bash
# Smoke run of the load harness (a few seconds): a short ramp against segcache-server when
# its binary serves, else against memcached; checks the JSON, the table and the plot.
# Usage: benches/load/smoke.sh  (binaries from ${CARGO_TARGET_DIR:-target}/release)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR="${CARGO_TARGET_DIR:-target}/release"
BENCH="$BIN_DIR/segcache-bench"
SERVER_BIN="$BIN_DIR/segcache-server"
PORT="${SMOKE_PORT:-22199}"
OUT="$(mktemp -d /tmp/segcache-bench-smoke.XXXXXX)"
PID=""
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$OUT"
}
trap cleanup EXIT

[ -x "$BENCH" ] || { echo "smoke: $BENCH not built" >&2; exit 1; }

serves() { # port -> 0 when something answers "version"
  python3 - "$1" <<'PY'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5)
    s.settimeout(1); s.sendall(b"version\r\n")
    sys.exit(0 if s.recv(64).startswith(b"VERSION") else 1)
except OSError:
    sys.exit(1)
PY
}

start() { # name cmd...
  local name="$1"; shift
  "$@" >"$OUT/$name.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 100); do
    if serves "$PORT"; then NAME="$name"; return 0; fi
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=""
  return 1
}

if serves "$PORT"; then echo "smoke: port $PORT is busy" >&2; exit 1; fi
NAME=""
# Both refuse to run as root without -u.
MC_USER=(); [ "$(id -u)" = 0 ] && MC_USER=(-u root)
if [ -x "$SERVER_BIN" ] && start segcache "$SERVER_BIN" "${MC_USER[@]}" -p "$PORT" -l 127.0.0.1 -m 64 -t 1; then
  :
else
  echo "smoke: segcache-server does not serve; running against memcached instead"
  start memcached memcached "${MC_USER[@]}" -U 0 -l 127.0.0.1 -p "$PORT" -m 64 -t 1 \
    || { echo "smoke: memcached did not start" >&2; cat "$OUT/memcached.log" >&2; exit 1; }
fi
echo "smoke: ramp against $NAME (pid $PID)"
"$BENCH" ramp --server "127.0.0.1:$PORT" --server-pid "$PID" --name "$NAME" \
  --workload momento --keys 10000 --prefill --connections 8 \
  --start 2000 --step 2000 --stop 4000 --step-duration-s 1.5 --slo-ms 50 \
  --out "$OUT" | tee "$OUT/summary.txt"

python3 - "$OUT" "$NAME" <<'PY'
import json, sys, os
out, name = sys.argv[1], sys.argv[2]
r = json.load(open(os.path.join(out, "results.json")))
run = r["workloads"][0]["servers"][0]
assert run["name"] == name
steps = run["steps"]
assert len(steps) == 2, f"expected 2 steps, got {len(steps)}"
for s in steps:
    c = s["counters"]
    # Behaviour, not speed: every request is answered or times out, none is answered wrongly.
    # How many finish in time depends on the machine (a stall on a shared 2-core CI host once
    # timed out 1294 of 3000); the ramp's numbers belong in the benchmark, not in this check.
    assert c["completed"] > 0 and c["errors"] == 0, c
    assert c["completed"] + c["timeouts"] <= c["sent"], c
    assert s["hit_ratio"] is not None and s["hit_ratio"] > 0.9, s["hit_ratio"]  # prefilled
    assert s["server_cpu_us_per_req"] is not None and s["server_cpu_us_per_req"] > 0
    assert 0 < s["latency"]["p50_us"] <= s["latency"]["p999_us"] <= s["latency"]["max_us"]
# The SLO search agrees with the steps (which steps pass depends on how busy the machine is).
slo = r["slo"]
def passes(s):
    c = s["counters"]
    return (c["completed"] > 0 and c["errors"] + c["timeouts"] <= slo["max_error_ratio"] * c["sent"]
            and s["achieved_rate"] >= slo["min_achieved"] * s["target_rate"]
            and s["latency"]["p999_us"] <= slo["p999_us"])
ok = [s["target_rate"] for s in steps if passes(s)]
assert run["max_rate_within_slo"] == (max(ok) if ok else None), (run["max_rate_within_slo"], ok)
png = open(os.path.join(out, "latency.png"), "rb").read()
assert png[1:4] == b"PNG" and len(png) > 5000
assert "| momento | " + name in open(os.path.join(out, "results.md")).read()
print(f"smoke: ok against {name}: 2 steps, p99.9 "
      + ", ".join(f"{s['latency']['p999_us']/1000:.3f} ms" for s in steps)
      + f", server CPU {steps[-1]['server_cpu_us_per_req']:.1f} us/req")
PY

# The connection sweep (compare --conns): 16 and 200 connections, 1 s steps, memcached beside
# segcache-server when it builds; checks the table, the generator verdicts, RSS and the plot.
SWEEP_SERVERS=memcached
[ "$NAME" = segcache ] && SWEEP_SERVERS=memcached,segcache
kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=""
echo "smoke: connection sweep against $SWEEP_SERVERS"
"$BENCH" compare --conns 16,200 --rate 2000 --step-duration-s 1 --idle-conns 500 \
  --servers "$SWEEP_SERVERS" --segcache "$SERVER_BIN" --base-port "$PORT" \
  --out "$OUT/sweep" | tee "$OUT/sweep.txt"
python3 - "$OUT/sweep" "$SWEEP_SERVERS" <<'PY'
import json, sys, os
out, servers = sys.argv[1], sys.argv[2].split(",")
r = json.load(open(os.path.join(out, "sweep.json")))
pts = r["points"]
assert sorted((p["connections"], p["server"]) for p in pts) == sorted((n, s) for n in (16, 200) for s in servers), pts
for p in pts:
    s, g = p["step"], p["generator"]
    c = s["counters"]
    # Behaviour, not speed (see above): answered or timed out, never answered wrongly.
    assert c["completed"] > 0 and c["errors"] == 0, c
    assert s["server_rss_kb"] and s["server_cpu_us_per_req"] > 0, s
    assert g["kept"] == (g["late_fraction"] <= 0.001 and g["sent"] + r["threads"] >= g["scheduled"]), g
    assert 0 < s["latency"]["p999_us"] <= s["latency"]["p9999_us"] <= s["latency"]["max_us"]
assert [i["server"] for i in r["idle"]] == servers and all(i["connections"] == 500 for i in r["idle"])
md = open(os.path.join(out, "sweep.md")).read()
assert "| 200 | " + servers[-1] + " |" in md and "p99.99 ms" in md
png = open(os.path.join(out, "sweep.png"), "rb").read()
assert png[1:4] == b"PNG" and len(png) > 5000
print("smoke: sweep ok: " + ", ".join(
    f"{p['server']}@{p['connections']} p99.9 {p['step']['latency']['p999_us']/1000:.3f} ms"
    + ("" if p["generator"]["kept"] else " (generator late)") for p in pts))
PY
