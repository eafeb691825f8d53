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
  the dict objects themselves. A get hit then includes unpickling a new dict. Two more rows
  split that time between the codec and the cache: "segcache-bytes" is a cache without a
  serializer holding the same pickles, with the pickling in the Python loop
  (`c.set(k, pickle.dumps(v, HIGHEST_PROTOCOL))`, `pickle.loads(c.get(k))`): the floor for
  segcache with `serializer="pickle"`. "pickle" is the codec alone on the same values (the set
  column `pickle.dumps(v, HIGHEST_PROTOCOL)`, the hit column `pickle.loads(p)` of the pickles in
  the hits' order); it has no miss or memory figures.

    python python/benches/bench.py                     # every library, 1M items
    python python/benches/bench.py -n 100000 --only dict segcache
    python python/benches/bench.py --objects --only cachebox segcache
    python python/benches/bench.py --objects --only cachebox segcache segcache-bytes pickle --median

Prints a markdown table; the last column gives segcache's ratio where a peer is present.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import pickle
import platform
import random
import statistics
import subprocess
import sys
import time

LIBS = ["dict", "cachebox", "lru-dict", "moka-py", "cachetools", "theine", "segcache"]
# Rows of --objects only: a bytes cache with the pickling in the loop, and the codec alone.
CODEC_ROWS = ["segcache-bytes", "pickle"]
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
        elif name == "segcache-bytes":
            # Stores and returns bytes: the loops pickle and unpickle around put and get.
            import segcache

            c = segcache.Cache(**segcache_opts)
            self.put, self.get = c.__setitem__, c.get
        elif name == "pickle":
            # No cache: the loops time the codec alone.
            c = None
            self.put = self.get = None
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
    if name == "pickle":
        return {"rss_per_item": None, "kept": None}
    gc.collect()
    before = rss_bytes()
    ops = Ops(name, n, opts)
    put, get = ops.put, ops.get
    if name == "segcache-bytes":
        dumps, loads, proto = pickle.dumps, pickle.loads, pickle.HIGHEST_PROTOCOL
        put = lambda k, v: ops.put(k, dumps(v, proto))  # noqa: E731
        get = lambda k: loads(ops.get(k))  # noqa: E731
    for i in range(n):
        k = key(i)
        put(k, value(k))
    gc.collect()
    after = rss_bytes()
    sample = random.Random(1).sample(range(n), min(n, 10_000))
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
    if name in CODEC_ROWS:
        return phase_time_codec(name, n, opts, keys, values, hits, misses)
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


def phase_time_codec(name: str, n: int, opts: dict, keys: list, values: list, hits: list, misses: list) -> dict:
    """phase_time for the CODEC_ROWS: pickle.dumps and pickle.loads written out in each loop, as
    a caller of a bytes cache would, so that no Python-level wrapper call is timed."""
    dumps, loads, proto = pickle.dumps, pickle.loads, pickle.HIGHEST_PROTOCOL
    if name == "pickle":
        by_key = {k: dumps(v, proto) for k, v in zip(keys, values)}
        pickles = [by_key[k] for k in hits]
        del by_key
        gc.collect()
        gc.disable()
        t0 = time.perf_counter_ns()
        for v in values:
            dumps(v, proto)
        t1 = time.perf_counter_ns()
        for p in pickles:
            loads(p)
        t2 = time.perf_counter_ns()
        gc.enable()
        bad = sum(1 for v in values[:1000] if loads(dumps(v, proto)) != v)
        t = (t1 - t0) / n
        return {"set_ns": t, "first_set_ns": t, "hit_ns": (t2 - t1) / n, "miss_ns": None, "wrong": bad}
    first = Ops(name, n, opts)
    fput = first.put
    gc.collect()
    gc.disable()
    t0 = time.perf_counter_ns()
    for k, v in zip(keys, values):
        fput(k, dumps(v, proto))
    first_set_ns = (time.perf_counter_ns() - t0) / n
    gc.enable()
    first.cache.close()
    del first, fput
    gc.collect()
    ops = Ops(name, n, opts)
    put, get = ops.put, ops.get
    gc.collect()
    gc.disable()
    t0 = time.perf_counter_ns()
    for k, v in zip(keys, values):
        put(k, dumps(v, proto))
    t1 = time.perf_counter_ns()
    for k in hits:
        loads(get(k))
    t2 = time.perf_counter_ns()
    for k in misses:
        get(k)
    t3 = time.perf_counter_ns()
    gc.enable()
    bad = sum(1 for k, v in zip(keys[:1000], values[:1000]) if loads(get(k)) != v)
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
    p.add_argument("--only", nargs="*", choices=LIBS + CODEC_ROWS,
                   help="libraries to run (default: all); with --objects also segcache-bytes and pickle")
    p.add_argument("--repeat", type=int, default=2, help="timing rounds per library; the best is kept")
    p.add_argument("--median", action="store_true",
                   help="keep each timing's median round instead of its best")
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
    if not args.objects and any(lib in CODEC_ROWS for lib in libs):
        p.error(f"{' and '.join(CODEC_ROWS)} are rows of --objects only")
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
        keep = statistics.median if args.median else min
        best = {k: None if ok[0][k] is None else keep(r[k] for r in ok) for k in TIMES}
        best["wrong"] = max(r["wrong"] for r in ok)
        results[lib] = {**mem, **best}

    values = ('dicts of 4 fields (segcache: serializer="pickle")' if args.objects else "64-byte values")
    kept = f"median of {args.repeat}" if args.median else f"best of {args.repeat}"
    print(f"\n{args.n:,} items, 16-byte keys, {values}, random order, {kept} rounds; "
          f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpus; "
          f"segcache {args.segcache_opts}\n")
    print("| library | set ns | set ns, first cache | get hit ns | get miss ns | RSS bytes/item | kept "
          "| segcache ratio (set / first set / hit / miss / RSS) |")
    print("|---|---|---|---|---|---|---|---|")
    sc = results.get("segcache")
    def fig(x, fmt=".0f"):
        return "-" if x is None else format(x, fmt)

    for lib, r in results.items():
        ratio = ""
        if sc and lib != "segcache":
            ratio = " / ".join("-" if r[k] is None else f"{sc[k] / r[k]:.2f}" for k in (*TIMES, "rss_per_item"))
        flag = "" if r["wrong"] == 0 else f" ({r['wrong']} WRONG)"
        print(f"| {lib}{flag} | {fig(r['set_ns'])} | {fig(r['first_set_ns'])} | {fig(r['hit_ns'])} | "
              f"{fig(r['miss_ns'])} | {fig(r['rss_per_item'])} | {fig(r['kept'], '.0%')} | {ratio} |")
    floor, codec, peer = results.get("segcache-bytes"), results.get("pickle"), results.get("cachebox")
    if floor and peer:
        line = (f"\nget hit against cachebox: segcache {sc['hit_ns'] / peer['hit_ns']:.2f}x, "
                if sc else "\nget hit against cachebox: ")
        print(line + f"segcache-bytes + pickle.loads (the floor) {floor['hit_ns'] / peer['hit_ns']:.2f}x")
    if sc and floor and codec:
        print(f"segcache get hit: {sc['hit_ns']:.0f} ns = pickle.loads {codec['hit_ns']:.0f} ns "
              f"+ the rest {sc['hit_ns'] - codec['hit_ns']:.0f} ns; over the floor: "
              f"{sc['hit_ns'] - floor['hit_ns']:+.0f} ns on hit, {sc['set_ns'] - floor['set_ns']:+.0f} ns on set")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": args.n, "segcache_opts": args.segcache_opts, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
