"""Single flight: `Cache.get_or_set` and `memoize(lock=True)`; memoize's per-instance method keys,
uncacheable results, `cache_info()` and `cache_clear()`."""

import asyncio
import gc
import threading
import time
import warnings

import pytest

import segcache

THREADS = 16


@pytest.fixture
def c():
    cache = segcache.Cache(heap_size="8MiB", segment_size="64KiB", eviction="none")
    yield cache
    cache.close()


def wait_for_all(started, n=THREADS):
    """A slow body: waits until `n` callers have started (at most ~2 s), then a little more, so
    that without single flight every one of them would run it."""
    for _ in range(400):
        if started[0] >= n:
            break
        time.sleep(0.005)
    time.sleep(0.05)


def run_threads(target, n=THREADS):
    """Runs `target(i)` on `n` threads at once; returns their results (or exceptions)."""
    out = [None] * n
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait()
        try:
            out[i] = target(i)
        except Exception as e:  # noqa: BLE001 - returned for the test to check
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a caller is stuck"
    return out


# ---- Cache.get_or_set ----


def test_get_or_set_loads_on_a_miss_only(c):
    calls = []

    def load():
        calls.append(1)
        return bytearray(b"made")

    assert c.get_or_set("k", load, ttl=60) == b"made"
    assert c.get_or_set(b"k", load) == b"made"
    assert calls == [1]
    assert c.get_item("k")[3] is not None  # stored with the ttl
    c.set("there", b"already")
    assert c.get_or_set("there", lambda: pytest.fail("loader ran on a hit")) == b"already"


def test_get_or_set_many_threads_one_slow_loader(c):
    calls = []
    started = [0]
    lock = threading.Lock()

    def load():
        calls.append(1)
        wait_for_all(started)  # sleeps with the GIL released: waiters must not hold it
        return b"once"

    def call(_):
        with lock:
            started[0] += 1
        return c.get_or_set("slow", load)

    assert run_threads(call) == [b"once"] * THREADS
    assert len(calls) == 1
    assert c.get("slow") == b"once"


def test_get_or_set_loader_error_reaches_its_caller_and_a_waiter_retries(c):
    calls = []
    started = [0]
    lock = threading.Lock()

    def load():
        calls.append(1)
        n = len(calls)
        wait_for_all(started)
        if n == 1:
            raise RuntimeError("backend down")
        return b"second"

    def call(_):
        with lock:
            started[0] += 1
        return c.get_or_set("flaky", load)

    out = run_threads(call)
    errors = [r for r in out if isinstance(r, Exception)]
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert out.count(b"second") == THREADS - 1
    assert len(calls) == 2


def test_get_or_set_error_is_not_cached(c):
    with pytest.raises(ZeroDivisionError):
        c.get_or_set("k", lambda: 1 // 0)
    assert "k" not in c
    assert c.get_or_set("k", lambda: b"v") == b"v"


def test_get_or_set_reentrant_loader_does_not_deadlock(c):
    def outer():
        assert c.get_or_set("self", lambda: b"inner") == b"inner"
        return b"outer"

    assert c.get_or_set("self", outer) == b"outer"
    assert c.get("self") == b"outer"


def test_get_or_set_too_large_is_returned_unstored(c):
    big = b"x" * (200 << 10)
    assert c.get_or_set("big", lambda: big) == big
    assert "big" not in c


def test_get_or_set_bad_arguments(c):
    with pytest.raises(TypeError):
        c.get_or_set("k", b"not callable")
    with pytest.raises(TypeError):
        c.get_or_set("k", lambda: "a str is not bytes")
    assert "k" not in c
    with pytest.raises(segcache.EmptyKey):
        c.get_or_set("", lambda: b"v")


# ---- memoize: single flight ----


def test_memoize_many_threads_run_once(c):
    calls = []
    started = [0]
    lock = threading.Lock()

    @segcache.memoize(c, ttl=60)
    def slow(x):
        calls.append(x)
        wait_for_all(started)
        return {"x": x}

    def call(_):
        with lock:
            started[0] += 1
        return slow(7)

    assert run_threads(call) == [{"x": 7}] * THREADS
    assert calls == [7]
    info = slow.cache_info()
    assert (info.hits, info.misses) == (THREADS - 1, 1)


def test_memoize_error_reaches_its_caller_and_a_waiter_retries(c):
    calls = []
    started = [0]
    lock = threading.Lock()

    @segcache.memoize(c)
    def flaky():
        calls.append(1)
        n = len(calls)
        wait_for_all(started)
        if n == 1:
            raise RuntimeError("first fails")
        return "ok"

    def call(_):
        with lock:
            started[0] += 1
        return flaky()

    out = run_threads(call)
    assert sum(isinstance(r, RuntimeError) for r in out) == 1
    assert out.count("ok") == THREADS - 1
    assert len(calls) == 2


def test_memoize_recursion_does_not_deadlock(c):
    calls = []

    @segcache.memoize(c)
    def fib(n):
        calls.append(n)
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    assert fib(60) == 1548008755920
    assert sorted(calls) == list(range(61))

    depth = []

    @segcache.memoize(c)
    def again(x):  # asks for its own key while computing it
        depth.append(x)
        return x if len(depth) > 1 else again(x) + 1

    assert again(1) == 2


def test_memoize_async_tasks_await_one_computation(c):
    calls = []

    @segcache.memoize(c, ttl=60)
    async def fetch(x):
        calls.append(x)
        await asyncio.sleep(0.05)
        return x * 2

    async def main():
        return await asyncio.gather(*(fetch(21) for _ in range(50)))

    assert asyncio.run(main()) == [42] * 50
    assert calls == [21]
    assert fetch.cache_info()[:2] == (49, 1)


def test_memoize_async_error_then_retry(c):
    calls = []

    @segcache.memoize(c)
    async def flaky():
        calls.append(1)
        n = len(calls)
        await asyncio.sleep(0.02)
        if n == 1:
            raise ValueError("first fails")
        return "ok"

    async def main():
        return await asyncio.gather(*(flaky() for _ in range(10)), return_exceptions=True)

    out = asyncio.run(main())
    assert sum(isinstance(r, ValueError) for r in out) == 1
    assert out.count("ok") == 9
    assert len(calls) == 2


def test_memoize_async_recursion(c):
    @segcache.memoize(c)
    async def afib(n):
        return n if n < 2 else await afib(n - 1) + await afib(n - 2)

    assert asyncio.run(afib(50)) == 12586269025


def test_memoize_without_lock_runs_each_concurrent_miss(c):
    calls = []
    started = [0]
    lock = threading.Lock()

    @segcache.memoize(c, lock=False)
    def slow():
        calls.append(1)
        wait_for_all(started, 4)
        return 1

    def call(_):
        with lock:
            started[0] += 1
        return slow()

    assert run_threads(call, 4) == [1] * 4
    assert len(calls) >= 1


# ---- memoize: methods per instance ----


class Account:
    def __init__(self, n):
        self.n = n
        self.calls = 0

    def __eq__(self, other):
        return isinstance(other, Account) and self.n == other.n

    def __hash__(self):
        return hash(self.n)

    def __getstate__(self):
        return {"n": self.n}  # equal instances pickle alike


# Module-level classes (so that the old pickle-of-self keys would work, and share entries).
METHOD_CACHE = segcache.Cache(heap_size="8MiB", segment_size="64KiB")
THING_CALLS = []


class Service(Account):
    @segcache.memoize(METHOD_CACHE)
    def balance(self, day):
        self.calls += 1
        return self.n * 100 + day


class Thing:
    @segcache.memoize(METHOD_CACHE)
    def value(self):
        THING_CALLS.append(1)
        return len(THING_CALLS)


def test_methods_are_keyed_per_instance():
    METHOD_CACHE.clear()
    a, b = Service(1), Service(1)  # equal, distinct
    assert a.balance(2) == 102 and a.balance(2) == 102
    assert b.balance(2) == 102
    assert (a.calls, b.calls) == (1, 1)
    assert Service.balance.cache_key(a, 2) != Service.balance.cache_key(b, 2)
    assert Service.balance.cache_key(a, 2) == Service.balance.cache_key(a, 2)


def test_a_dead_instance_key_is_not_reused():
    METHOD_CACHE.clear()
    THING_CALLS.clear()
    for i in range(20):
        t = Thing()  # often at the address of the previous one, always equal in state
        assert t.value() == i + 1
        assert t.value() == i + 1
        del t
        gc.collect()
    assert len(THING_CALLS) == 20


def test_plain_first_argument_named_self_outside_a_class_is_pickled(c):
    calls = []

    @segcache.memoize(c)
    def f(self):
        calls.append(self)
        return self

    assert f(Account(3)) is not None and f(Account(3)) is not None
    assert len(calls) == 1  # equal arguments share an entry, as before


# ---- memoize: uncacheable results, cache_info, cache_clear ----


def test_unpicklable_result_warns_and_is_returned_uncached(c):
    calls = []

    @segcache.memoize(c)
    def make():
        calls.append(1)
        return lambda: 42  # a lambda does not pickle

    with pytest.warns(segcache.UncacheableResultWarning, match="cannot be serialized"):
        fn = make()
    assert fn() == 42
    assert len(c) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", segcache.UncacheableResultWarning)
        make()
    assert len(calls) == 2
    assert make.cache_info().currsize == 0


def test_cache_info_and_cache_clear(c):
    @segcache.memoize(c)
    def square(x):
        return x * x

    @segcache.memoize(c)
    def other(x):
        return x

    assert square.cache_info() == segcache.CacheInfo(0, 0, None, 0)
    square(2), square(2), square(3), other(1)
    info = square.cache_info()
    assert info == (1, 2, None, 2)
    assert (info.hits, info.misses, info.maxsize, info.currsize) == (1, 2, None, 2)
    square.cache_clear()
    assert square.cache_info() == (0, 0, None, 0)
    assert other.cache_info().currsize == 1  # other functions' entries stay
    square(2)
    assert square.cache_info().misses == 1


def test_get_or_set_counts_one_miss_per_load(c):
    before = c.stats()
    c.get_or_set("counted", lambda: b"v")
    c.get_or_set("counted", lambda: b"w")
    after = c.stats()
    assert after["get_misses"] - before["get_misses"] == 1
    assert after["get_hits"] - before["get_hits"] == 1


def test_memoize_counts_one_cache_miss_per_computation(c):
    @segcache.memoize(c)
    def f(x):
        return x

    before = c.stats()["get_misses"]
    f(1)
    assert c.stats()["get_misses"] - before == 1


def test_method_entries_are_invalidated_through_the_class():
    METHOD_CACHE.clear()
    a = Service(5)
    assert a.balance(1) == 501
    assert Service.balance.invalidate(a, 1) is True
    assert a.balance(1) == 501
    assert a.calls == 2
