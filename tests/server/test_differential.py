"""Differential test: the same random command stream to segcache-server and to memcached 1.6,
replies compared exactly (after the normalisations listed in diffkit.normalise: CAS numbers,
TTL seconds, `me` details, the version string, memcached's `Z` flag and base64 key bit; and
two memcached bugs stepped around after checking them, see diffkit). The generator is in
diffkit.py; a divergence is reduced with `diffkit.py replay` (see there).

Knobs (environment):
- SEGCACHE_DIFF_SEED: run this seed only (replay a reported divergence);
- SEGCACHE_DIFF_OPS: operations per seed and configuration (default 20000; a soak takes a big
  value, e.g. 500000);
- SEGCACHE_DIFF_TRACE=FILE: write each op's wire bytes and replies (last run wins).
"""

import os
import random
import shutil
import tempfile

import pytest

from diffkit import MEMCACHED, default_binary, run_stream

OPS = int(os.environ.get("SEGCACHE_DIFF_OPS", "20000"))
FIXED_SEED = 20240611

pytestmark = pytest.mark.skipif(shutil.which(MEMCACHED) is None and not os.path.exists(MEMCACHED),
                                reason="memcached 1.6 is the oracle: not installed")


def seeds():
    env = os.environ.get("SEGCACHE_DIFF_SEED")
    if env:
        return [int(env)]
    # A fixed seed (the same stream every run) and a fresh one (printed, to replay).
    return [FIXED_SEED, random.randrange(1 << 32)]


CONFIGS = {
    "default-t2": ["-t", "2"],
    "t1": ["-t", "1"],
    # With a file, rewrites in place are off: every write takes the append path.
    "persist": ["-t", "2", "--persist", "{tmp}/cache.seg"],
    # Small segments (so the item limit shrinks too: memcached gets the same -I).
    "small-segments-fifo": ["-t", "2", "--segment-size", "128k", "-I", "64k", "--eviction", "fifo"],
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", seeds())
def test_same_replies_as_memcached(config, seed, capsys):
    binary = default_binary()
    assert binary.exists(), f"{binary} missing: cargo build --release -p segcache-server"
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.format(tmp=tmp) for a in CONFIGS[config]]
        res = run_stream(binary, args, seed, OPS)
    with capsys.disabled():
        print(f"\n[differential] {config} seed {seed}: replies identical: {res}")
    assert res["ops"] >= OPS
