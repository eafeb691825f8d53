#!/usr/bin/env python3
"""Turns criterion's results (target/criterion/*/*/new/) into the markdown tables of
docs/engine-bench.md: ns/op per library and each target ratio against the fastest peer."""
import json, os, sys

root = sys.argv[1] if len(sys.argv) > 1 else "target/criterion"
res = {}  # (group, function) -> median ns per iteration
for dirpath, _, files in os.walk(root):
    if os.path.basename(dirpath) != "new" or "benchmark.json" not in files:
        continue
    with open(os.path.join(dirpath, "benchmark.json")) as f:
        b = json.load(f)
    with open(os.path.join(dirpath, "estimates.json")) as f:
        e = json.load(f)
    res[(b["group_id"], b["function_id"])] = e["median"]["point_estimate"]

if not res:
    sys.exit(f"no criterion results under {root}")

PEERS = {"pelikan": "segcache 0.4.4 (Pelikan)", "quick-cache": "quick_cache 0.7 sync",
         "moka": "moka 0.12 sync", "lru": "lru 0.19 + Mutex"}
OURS = {"ours-single": "segcache-core Segcache", "ours": "segcache-core SharedCache"}
NAMES = {**OURS, **PEERS}

def get(g, f, per=1):
    v = res.get((g, f))
    return None if v is None else v / per

def fmt(v):
    return "-" if v is None else f"{v:.0f}"

if ("dram_miss", "pointer chase") in res:
    print(f"One dependent DRAM miss (pointer chase over {os.environ.get('BENCH_CHASE_MIB', '512')} MiB, 4 KiB pages), same run: "
          f"**{res[('dram_miss', 'pointer chase')]:.0f} ns**\n")

print("| library | get hit ns | get miss ns | set ns (incl. key formatting) | 16-key batch, ns per key |")
print("|---|---|---|---|---|")
for k, name in NAMES.items():
    batch = get("get_many16", f"{k} get_many_with", 16) if k in OURS else None
    single = get("get_many16", k, 16)
    bcell = fmt(single) if batch is None else f"{fmt(batch)} (`get_many_with`); {fmt(single)} as 16 gets"
    print(f"| {name} | {fmt(get('get_hit', k))} | {fmt(get('get_miss', k))} | {fmt(get('set', k))} | {bcell} |")
copy = get("get_hit", "ours get (copy)")
if copy is not None:
    print(f"| segcache-core SharedCache, `get` copying the value out | {fmt(copy)} | | | |")

def fastest(g, per=1):
    c = [(get(g, k, per), n) for k, n in PEERS.items() if get(g, k, per) is not None]
    return min(c) if c else (None, None)

print("\n| measure | ours | ns | fastest peer | its ns | ratio | target |")
print("|---|---|---|---|---|---|---|")
rows = [("get hit", "get_hit", 1, "get_hit", 1, "<= 1.0"),
        ("get miss", "get_miss", 1, "get_miss", 1, "<= 1.0"),
        ("set", "set", 1, "set", 1, "<= 0.7")]
for label, g, per, pg, pper, target in rows:
    p, pn = fastest(pg, pper)
    for k in OURS:
        o = get(g, k, per)
        if o is not None and p:
            print(f"| {label} | {OURS[k]} | {o:.0f} | {pn} | {p:.0f} | {o / p:.2f} | {target} |")
p, pn = fastest("get_hit")
for k in OURS:
    o = get("get_many16", f"{k} get_many_with", 16)
    if o is not None and p:
        print(f"| get_many of 16, per key, vs a single get | {OURS[k]} | {o:.0f} | {pn} | {p:.0f} | {o / p:.2f} | <= 0.5 |")
d = res.get(("dram_miss", "pointer chase"))
if d:
    for k in OURS:
        o = get("get_hit", k)
        if o is not None:
            print(f"| get hit vs one DRAM miss | {OURS[k]} | {o:.0f} | (pointer chase) | {d:.0f} | {o / d:.2f} | <= 1.3 |")
