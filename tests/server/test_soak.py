"""Soak: long differential streams (diffkit's generator: every storage, arithmetic, touch, cas,
delete, meta and flush command, with delays) against memcached 1.6, long enough that
segcache-server's heap fills with the dead copies its two dozen keys leave behind and every
later write makes room by merging or evicting segments. Any key segcache loses that memcached
keeps is a divergence, and run_stream checks that nothing was evicted.

Knobs (environment):
- SEGCACHE_SOAK_OPS: operations per configuration (default 200000; a soak takes 1000000);
- SEGCACHE_SOAK_SEED: run this seed (default: a fresh one, printed so that it can be replayed
  with `SEGCACHE_DIFF_SEED=N python tests/server/diffkit.py -- ARGS`).
"""

import os
import random
import shutil
import tempfile

import pytest

from diffkit import MEMCACHED, default_binary, run_stream

OPS = int(os.environ.get("SEGCACHE_SOAK_OPS", "200000"))

pytestmark = pytest.mark.skipif(shutil.which(MEMCACHED) is None and not os.path.exists(MEMCACHED),
                                reason="memcached 1.6 is the oracle: not installed")

CONFIGS = {
    "t1": ["-t", "1"],
    "default": [],
    "persist": ["--persist", "{tmp}/cache.seg"],
}


def seed() -> int:
    env = os.environ.get("SEGCACHE_SOAK_SEED")
    return int(env) if env else random.randrange(1 << 32)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_full_heap_loses_no_live_key(config, capsys):
    binary = default_binary()
    assert binary.exists(), f"{binary} missing: cargo build --release -p segcache-server"
    s = seed()
    with capsys.disabled():
        print(f"\n[soak] {config}: SEGCACHE_SOAK_SEED={s}, {OPS} ops", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.format(tmp=tmp) for a in CONFIGS[config]]
        res = run_stream(binary, args, s, OPS)
    with capsys.disabled():
        print(f"[soak] {config} seed {s}: replies identical: {res}")
    assert res["ops"] >= OPS and res["divergences"] == 0
