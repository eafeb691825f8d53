#!/usr/bin/env python3
"""Rolling restarts of a three-node pool behind consistent hashing, segcache-server (with a
persistence file) beside memcached, as the clients see them: the hit ratio before, during and
after restarting every node in turn, gracefully (SIGTERM) and by SIGKILL. See docs/cluster.md.

    python3 benches/cluster/run.py                      # every client, both servers, both stops
    python3 benches/cluster/run.py --keys 100000 --clients pylibmc --how kill

Needs the release server (cargo build --release -p segcache-server), memcached, nutcracker,
pylibmc and pymemcache, and for spymemcached a JDK and Maven (build_java.sh builds its driver).
Prints a Markdown table."""

import argparse
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clients  # noqa: E402
import rolling  # noqa: E402


def main() -> int:
    d = rolling.Settings()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=d.keys, help="items filled, then read uniformly at random [%(default)s]")
    p.add_argument("--value-bytes", type=int, default=d.value_bytes, help="value length [%(default)s]")
    p.add_argument("--memory-mb", type=int, default=d.memory_mb, help="each node's -m [%(default)s]")
    p.add_argument("--slice", type=float, default=d.slice_s, help="seconds per counting slice [%(default)s]")
    p.add_argument("--before", type=float, default=d.before_s, help="seconds of reads before the first restart [%(default)s]")
    p.add_argument("--settle", type=float, default=d.settle_s, help="seconds of reads after each node is back [%(default)s]")
    p.add_argument("--after", type=float, default=d.after_s, help="seconds of reads after the last restart [%(default)s]")
    p.add_argument("--clients", default=",".join(clients.KINDS), help="comma separated, of %(default)s")
    p.add_argument("--servers", default="segcache,memcached", help="comma separated, of %(default)s")
    p.add_argument("--how", default="term,kill", help="term (SIGTERM), kill (SIGKILL), or both [%(default)s]")
    p.add_argument("--workdir", type=Path, help="where the nodes' files go [a temporary directory]")
    a = p.parse_args()
    s = rolling.Settings(keys=a.keys, value_bytes=a.value_bytes, memory_mb=a.memory_mb, slice_s=a.slice,
                         before_s=a.before, settle_s=a.settle, after_s=a.after)

    print(f"`{shlex.join(['python3', 'benches/cluster/run.py', *sys.argv[1:]])}` on {platform.node()} "
          f"({os.cpu_count()} cores, {platform.machine()}), {time.strftime('%Y-%m-%d', time.gmtime())}: "
          f"{s.keys} keys of {s.value_bytes} bytes, read uniformly at random, each miss refilled; "
          f"{s.slice_s * 1000:.0f} ms slices, {s.settle_s} s between restarts.\n")
    print("| client | nodes | stop | hit ratio before | lowest slice during | during | after | "
          "reads failed (node down) | longest node down (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="segcache-cluster-") as tmp:
        base = a.workdir or Path(tmp)
        for how in a.how.split(","):
            for client in a.clients.split(","):
                for server in a.servers.split(","):
                    r = rolling.run(client, server, how, base / f"{client}-{server}-{how}", s)
                    failed = sum(r.totals[ph].errors for ph in r.totals)
                    wrong = sum(r.totals[ph].wrong for ph in r.totals)
                    print(f"| {client} | {server} | {'SIGTERM' if how == 'term' else 'SIGKILL'} | "
                          f"{r.ratio('before'):.3f} | {r.lowest('during'):.3f} | {r.ratio('during'):.3f} | "
                          f"{r.ratio('after'):.3f} | {failed} | {max(r.downtimes) * 1000:.0f} |", flush=True)
                    if wrong or r.fill_errors:
                        print(f"{client}/{server}/{how}: {wrong} wrong values, {r.fill_errors} failed fills",
                              file=sys.stderr)
                        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
