import pathlib

import pytest

import segcache

ROOT = pathlib.Path(__file__).resolve().parents[2]


def engine_is_placeholder() -> bool:
    """True while segcache-core still has the placeholder (HashMap) engine, which has no
    persistence and no real eviction. Tests that need them skip until the segment engine lands."""
    engine = ROOT / "segcache-core" / "src" / "engine.rs"
    return engine.exists() and "PLACEHOLDER" in engine.read_text()


needs_real_engine = pytest.mark.skipif(
    engine_is_placeholder(), reason="segcache-core/src/engine.rs is still the PLACEHOLDER engine"
)


@pytest.fixture
def clock():
    return segcache.ManualClock(1_700_000_000)


@pytest.fixture
def cache(clock):
    c = segcache.Cache(heap_size="16MiB", segment_size="256KiB", eviction="none", clock=clock)
    yield c
    c.close()
