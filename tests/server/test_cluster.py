"""A pool of three nodes behind consistent hashing (pylibmc's ketama_weighted, spymemcached's
KETAMA, twemproxy's ketama: one ring, so each client finds what another stored) through a rolling
restart, as its client sees it (benches/cluster, short
form): segcache-server nodes with a persistence file come back warm, after SIGTERM and after
SIGKILL, so the clients' hit ratio holds; memcached nodes restarted the same way come back empty
and the ratio drops, which shows the measurement sees the restarts at all."""

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benches" / "cluster"))

import clients  # noqa: E402
import rolling  # noqa: E402
from nodes import Pool  # noqa: E402

# Short: 10,000 keys, a second between restarts. The ratios hold at any length (run.py's
# defaults are longer); the clients' reconnection delays (about a second for pylibmc and
# spymemcached) only turn more of the reads into failures, which the ratio leaves out.
SHORT = rolling.Settings(keys=10000, before_s=0.8, settle_s=1.0, after_s=0.8)


@pytest.mark.parametrize("how", ["term", "kill"])
@pytest.mark.parametrize("client", clients.KINDS)
def test_rolling_restart_keeps_segcache_warm_and_empties_memcached(tmp_path, client, how):
    warm = rolling.run(client, "segcache", how, tmp_path / "segcache", SHORT)
    cold = rolling.run(client, "memcached", how, tmp_path / "memcached", SHORT)
    for r in (warm, cold):
        assert (r.filled, r.fill_errors) == (SHORT.keys, 0), r
        assert sum(t.wrong for t in r.totals.values()) == 0, f"{r.server}: a read got another key's value"
        # The pool held everything before the restarts, and each phase had slices enough to judge.
        assert r.ratio("before") > 0.99, r
        assert len(r.ratios["during"]) >= 3 and r.ratios["after"], r.ratios

    # Every segcache node came back from its file: warm after SIGTERM, recovered after SIGKILL.
    came_back = "warm start from" if how == "term" else "recovered after a crash from"
    for log in warm.node_logs:
        assert came_back in log, log
    floor = 0.95 * warm.ratio("before")
    assert warm.lowest("during") >= floor, warm.ratios
    assert warm.lowest("after") >= floor, warm.ratios

    # memcached's restarted node answers misses until the reads refill it.
    assert cold.lowest("during") < 0.9 * cold.ratio("before"), cold.ratios


def test_the_three_clients_place_every_key_on_the_same_node(tmp_path):
    """Filled through pylibmc, the pool is read through spymemcached and twemproxy: not one miss."""
    with Pool("segcache", tmp_path) as pool:
        kw = dict(keys=5000, value_bytes=SHORT.value_bytes, slice_s=SHORT.slice_s, seed=SHORT.seed)
        assert clients.make("pylibmc", pool.addresses, tmp_path, **kw).fill() == (5000, 0)
        spy = clients.Spymemcached(pool.addresses, tmp_path, **kw, fill=False)
        assert spy.fill() == (0, 0)  # told not to fill, it only reads
        readers = [spy, clients.make("twemproxy", pool.addresses, tmp_path, **kw)]
        for r in readers:
            r.start()
        time.sleep(1.0)
        for r in readers:
            seen = clients.Counts()
            for n in r.stop().values():
                seen.add(n)
            assert seen.hits > 100 and (seen.misses, seen.errors, seen.wrong) == (0, 0, 0), (r, seen)
