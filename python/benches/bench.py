#!/usr/bin/env python3
"""segcache against Python in-process caches: set, get hit, get miss ns/op and RSS bytes per item.

Each library runs in processes of its own (one for memory, one for timing), so that one
library's heap never inflates another's figures:

- memory: RSS before and after storing N items (16-byte keys, 64-byte values, both created in
  the loop and kept only by the cache), divided by the items still retrievable (sampled).
- timing: N keys and values built first, shuffled; then `c[k] = v` (or `c.set(k, v)`) for each
  into an empty cache, `c.get(k)` for each stored key in another random order, and `c.get(k)`
  for N absent keys. ns/op is wall time over N, the Python loop included (the same loop for
  every library).
- first cache: before those, the timing process fills one cache of its own with the same keys
  ("set, first cache") and drops it; the sets above go into a second cache. The first cache in
  a process is the first to touch its memory: on a virtual machine whose host takes back the
  guest's free memory (free page reporting, as on Firecracker), each fresh page then costs a
  fault on the host too, which can add half again to its sets in one run and nothing in the
  next. The second cache reuses the pages the first gave back, so its figure is the cache's own.

- objects (`--objects`): the values are dicts of four fields (an int, a str, a float, a bool)
  instead of bytes; segcache stores them with `serializer="pickle"`, the other libraries hold
  the dict objects themselves. A get hit then includes unpickling a new dict.

    python python/benches/bench.py                     # every library, 1M items
    python python/benches/bench.py -n 100000 --only dict segcache
    python python/benches/bench.py --objects --only cachebox segcache

Prints a markdown table; the last column gives segcache's ratio where a peer is present.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import subprocess
import sys
import time

LIBS = ["dict", "cachebox", "lru-dict", "moka-py", "cachetools", "theine", "segcache"]
# The timings each run reports, in the table's order.
TIMES = ("set_ns", "first_set_ns", "hit_ns", "miss_ns")
# --objects: values are dicts, stored by segcache with serializer="pickle".
OBJECTS = False


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Ops:
    """A library's cache with uniform `put` and `get` callables (bound methods: no lookup cost)."""

    def __init__(self, name: str, n: int, segcache_opts: dict):
        self.name = name
        if name == "dict":
            c = {}
            self.put, self.get = c.__setitem__, c.get
        elif name == "cachebox":
            import cachebox

            c = cachebox.LRUCache(maxsize=n)
            self.put, self.get = c.__setitem__, c.get
        elif name == "lru-dict":
            from lru import LRU

            c = LRU(n)
            self.put, self.get = c.__setitem__, c.get
        elif name == "moka-py":
            from moka_py import Moka

            c = Moka(n)
            self.put, self.get = c.set, c.get
        elif name == "cachetools":
            import cachetools

            c = cachetools.LRUCache(maxsize=n)
            self.put, self.get = c.__setitem__, c.get
        elif name == "theine":
            from theine import Cache

            c = Cache(n)
            self.put = c.set
            tget = c.get
            self.get = lambda k: tget(k)[0]  # noqa: E731 - theine returns (value, found)
        elif name == "segcache":
            import segcache

            c = segcache.Cache(**segcache_opts, **({"serializer": "pickle"} if OBJECTS else {}))
            self.put, self.get = c.__setitem__, c.get
        else:
            raise SystemExit(f"unknown library {name}")
        self.cache = c


def key(i: int) -> bytes:
    return b"key:%012d" % i  # 16 bytes


def value(k: bytes):
    if OBJECTS:
        i = int(k[4:])
        return {"id": i, "name": k.decode(), "score": i / 4, "active": i % 2 == 0}
    return k * 4  # 64 bytes, distinct per key


def phase_memory(name: str, n: int, opts: dict) -> dict:
    gc.collect()
    before = rss_bytes()
    ops = Ops(name, n, opts)
    put = ops.put
    for i in range(n):
        k = key(i)
        put(k, value(k))
    gc.collect()
    after = rss_bytes()
    sample = random.Random(1).sample(range(n), min(n, 10_000))
    get = ops.get
    kept = sum(1 for i in sample if get(key(i)) == value(key(i))) / len(sample)
    # per retained item, as for the Rust peers: a cache that evicted must not look leaner
    return {"rss_per_item": (after - before) / max(1.0, n * kept), "kept": kept}


def phase_time(name: str, n: int, opts: dict) -> dict:
    rng = random.Random(42)
    keys = [key(i) for i in range(n)]
    rng.shuffle(keys)
    values = [value(k) for k in keys]
    hits = list(keys)
    rng.shuffle(hits)
    misses = [b"nil:%012d" % i for i in range(n)]
    rng.shuffle(misses)
    first_set_ns = time_sets(Ops(name, n, opts), keys, values) / n
    gc.collect()
    ops = Ops(name, n, opts)
    put, get = ops.put, ops.get
    gc.collect()
    gc.disable()
    t0 = time.perf_counter_ns()
    for k, v in zip(keys, values):
        put(k, v)
    t1 = time.perf_counter_ns()
    for k in hits:
        get(k)
    t2 = time.perf_counter_ns()
    for k in misses:
        get(k)
    t3 = time.perf_counter_ns()
    gc.enable()
    # a check outside the timed loops: every hit returned its value, every miss nothing
    bad = sum(1 for k, v in zip(keys[:1000], values[:1000]) if get(k) != v)
    bad += sum(1 for k in misses[:1000] if get(k) is not None)
    return {"set_ns": (t1 - t0) / n, "first_set_ns": first_set_ns, "hit_ns": (t2 - t1) / n, "miss_ns": (t3 - t2) / n,
            "wrong": bad}


def time_sets(ops: Ops, keys: list, values: list) -> int:
    """ns to store every key in `ops`'s cache, which is then dropped (closed, for segcache)."""
    put = ops.put
    gc.collect()
    gc.disable()
    t0 = time.perf_counter_ns()
    for k, v in zip(keys, values):
        put(k, v)
    elapsed = time.perf_counter_ns() - t0
    gc.enable()
    if ops.name == "segcache":
        ops.cache.close()
    return elapsed


def hash_power_for(n: int, shards: int) -> int:
    """log2 of the buckets per shard (7 slots each) that hold n items at most ~70% full."""
    buckets = n / shards / 7 / 0.7
    return max(4, min(32, math.ceil(math.log2(max(2.0, buckets)))))


def child(args) -> None:
    global OBJECTS
    OBJECTS = args.objects
    opts = json.loads(args.segcache_opts)
    fn = phase_memory if args.phase == "memory" else phase_time
    print(json.dumps(fn(args.lib, args.n, opts)))


def run_child(lib: str, phase: str, n: int, opts: str, objects: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", "--lib", lib, "--phase", phase, "-n", str(n),
           "--segcache-opts", opts] + (["--objects"] if objects else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=1_000_000, help="items (default 1M)")
    p.add_argument("--only", nargs="*", choices=LIBS, help="libraries to run (default: all)")
    p.add_argument("--repeat", type=int, default=2, help="timing rounds per library; the best is kept")
    p.add_argument("--segcache-opts", default=None,
                   help='JSON of segcache.Cache arguments (default: sized for N items)')
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--objects", action="store_true",
                   help='values are dicts of four fields; segcache stores them with serializer="pickle"')
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--lib", help=argparse.SUPPRESS)
    p.add_argument("--phase", choices=["memory", "time"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.segcache_opts is None:
        # room for the items (about 100 bytes each with headers) plus slack for partly filled
        # segments; the hash table sized for N items
        # Sized for the data as a user would size it: a heap with room for N items of ~100
        # bytes (untouched heap pages cost nothing), one shard (calls hold the GIL, so more
        # shards would only add partly filled segments), a hash table for N items.
        heap = max(64 << 20, int(args.n * 128 * 1.25))
        args.segcache_opts = json.dumps({"heap_size": heap, "segment_size": "1MiB", "eviction": "merge",
                                         "shards": 1, "hash_power": hash_power_for(args.n, 1)})
    if args.child:
        child(args)
        return

    libs = args.only or LIBS
    results = {}
    # Timing rounds go round-robin over the libraries, so that a change in machine load during
    # the run falls on every library alike; each library keeps its best round.
    mems = {lib: run_child(lib, "memory", args.n, args.segcache_opts, args.objects) for lib in libs}
    rounds = {lib: [] for lib in libs}
    for r in range(args.repeat):
        for lib in libs:
            rounds[lib].append(run_child(lib, "time", args.n, args.segcache_opts, args.objects))
        print(f"round {r + 1} of {args.repeat} done", file=sys.stderr)
    for lib in libs:
        mem, runs = mems[lib], rounds[lib]
        ok = [r for r in runs if "error" not in r]
        if "error" in mem or not ok:
            err = mem.get("error") or runs[0].get("error")
            print(f"{lib}: skipped ({err})", file=sys.stderr)
            continue
        best = {k: min(r[k] for r in ok) for k in TIMES}
        best["wrong"] = max(r["wrong"] for r in ok)
        results[lib] = {**mem, **best}

    values = ('dicts of 4 fields (segcache: serializer="pickle")' if args.objects else "64-byte values")
    print(f"\n{args.n:,} items, 16-byte keys, {values}, random order; "
          f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpus; "
          f"segcache {args.segcache_opts}\n")
    print("| library | set ns | set ns, first cache | get hit ns | get miss ns | RSS bytes/item | kept "
          "| segcache ratio (set / first set / hit / miss / RSS) |")
    print("|---|---|---|---|---|---|---|---|")
    sc = results.get("segcache")
    for lib, r in results.items():
        ratio = ""
        if sc and lib != "segcache":
            ratio = " / ".join(f"{sc[k] / r[k]:.2f}" for k in (*TIMES, "rss_per_item"))
        flag = "" if r["wrong"] == 0 else f" ({r['wrong']} WRONG)"
        print(f"| {lib}{flag} | {r['set_ns']:.0f} | {r['first_set_ns']:.0f} | {r['hit_ns']:.0f} | "
              f"{r['miss_ns']:.0f} | {r['rss_per_item']:.0f} | {r['kept']:.0%} | {ratio} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": args.n, "segcache_opts": args.segcache_opts, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
