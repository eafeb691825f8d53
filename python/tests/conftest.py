import pytest

import segcache


@pytest.fixture
def clock():
    return segcache.ManualClock(1_700_000_000)


@pytest.fixture
def cache(clock):
    c = segcache.Cache(heap_size="16MiB", segment_size="256KiB", eviction="none", clock=clock)
    yield c
    c.close()
