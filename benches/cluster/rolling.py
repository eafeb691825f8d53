"""A rolling restart of a pool, measured by its client: fill the pool, read for a while, restart
every node in turn (each followed by a settling time while the reads go on), read a while more,
then split the client's per-slice counts into before, during and after the restarts."""

import time
from dataclasses import dataclass, field
from pathlib import Path

import clients
from clients import Counts, slice_of
from nodes import Pool


@dataclass
class Settings:
    keys: int = 20000
    value_bytes: int = 100
    memory_mb: int = 32
    slice_s: float = 0.2
    before_s: float = 2.0
    settle_s: float = 1.5
    after_s: float = 2.0
    # A slice with fewer reads answered is left out of the ratios (too few to say anything).
    min_reads: int = 20
    seed: int = 1


@dataclass
class Result:
    client: str
    server: str
    how: str
    filled: int
    fill_errors: int
    # Per phase: every slice's counts summed, and the hit ratio of each slice with enough reads.
    totals: dict[str, Counts] = field(default_factory=dict)
    ratios: dict[str, list[float]] = field(default_factory=dict)
    # Seconds each node took from the stop signal to answering again.
    downtimes: list[float] = field(default_factory=list)
    node_logs: list[str] = field(default_factory=list)

    def ratio(self, phase: str) -> float:
        """The hit ratio over the whole phase."""
        c = self.totals[phase]
        return c.hits / c.answered if c.answered else float("nan")

    def lowest(self, phase: str) -> float:
        """The lowest hit ratio of any slice of the phase."""
        return min(self.ratios[phase], default=float("nan"))


def run(client: str, server: str, how: str, workdir: Path, s: Settings = Settings()) -> Result:
    """Three `server` nodes ("segcache" or "memcached") behind `client` (one of clients.KINDS),
    restarted one after the other, `how` = "term" (SIGTERM) or "kill" (SIGKILL)."""
    workdir.mkdir(parents=True, exist_ok=True)
    with Pool(server, workdir, memory_mb=s.memory_mb) as pool:
        c = clients.make(client, pool.addresses, workdir, keys=s.keys, value_bytes=s.value_bytes,
                         slice_s=s.slice_s, seed=s.seed)
        filled, fill_errors = c.fill()
        c.start()
        started = time.time()
        time.sleep(s.before_s)
        windows = []
        for node in pool.nodes:
            windows.append(node.restart(how))
            time.sleep(s.settle_s)
        restarts_end = time.time()
        time.sleep(s.after_s)
        slices = c.stop()
    # Each node's log, every run of it, complete once the pool has stopped.
    logs = [n.log for n in pool.nodes]
    result = Result(client, server, how, filled, fill_errors, downtimes=[up - down for down, up in windows],
                    node_logs=logs)
    # A slice belongs to a phase when it lies wholly inside it; those that straddle a boundary
    # are left out. The first slice after the reads started is partial, so it is left out too.
    first_stop = windows[0][0]
    phases = {
        "before": (slice_of(started, s.slice_s) + 1, slice_of(first_stop, s.slice_s) - 1),
        "during": (slice_of(first_stop, s.slice_s), slice_of(restarts_end, s.slice_s)),
        "after": (slice_of(restarts_end, s.slice_s) + 1, max(slices, default=0) - 1),
    }
    for phase, (lo, hi) in phases.items():
        total, ratios = Counts(), []
        for i in range(lo, hi + 1):
            n = slices.get(i)
            if n is None:
                continue
            total.add(n)
            if n.answered >= s.min_reads:
                ratios.append(n.hits / n.answered)
        result.totals[phase], result.ratios[phase] = total, ratios
    return result
