import os

import pytest

import segcache


def threads_named(name: str) -> int:
    """Threads of this process named `name` (Linux: /proc/self/task)."""
    tasks = "/proc/self/task"
    n = 0
    for t in os.listdir(tasks):
        try:
            with open(f"{tasks}/{t}/comm") as f:
                n += f.read().strip() == name
        except FileNotFoundError:  # the thread ended after the listing (what tests wait for)
            pass
    return n


@pytest.fixture
def clock():
    return segcache.ManualClock(1_700_000_000)


@pytest.fixture
def cache(clock):
    c = segcache.Cache(heap_size="16MiB", segment_size="256KiB", eviction="none", clock=clock)
    yield c
    c.close()
