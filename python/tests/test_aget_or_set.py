"""`await cache.aget_or_set(key, loader, ttl=...)`: one loader per missing key within an event
loop, the others await it; cancellation hands the key over; an exception reaches every waiter;
the serializer applies. And `@cache.memoize()` on coroutine functions."""

import asyncio

import pytest

import segcache


@pytest.fixture
def pc(clock):
    c = segcache.Cache(heap_size="16MiB", segment_size="256KiB", eviction="none", clock=clock, serializer="pickle")
    yield c
    c.close()


def test_a_hit_does_not_call_the_loader(cache):
    cache["k"] = b"v"

    async def loader():
        raise AssertionError("called")

    assert asyncio.run(cache.aget_or_set("k", loader)) == b"v"


def test_a_thousand_waiters_one_load(pc):
    loads = 0

    async def loader():
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.01)
        return {"value": loads}

    async def main():
        results = await asyncio.gather(*(pc.aget_or_set("k", loader, ttl=60) for _ in range(1000)))
        return results

    results = asyncio.run(main())
    assert loads == 1
    assert all(r == {"value": 1} for r in results)
    # each caller gets its own copy, as a read of the key would
    assert len({id(r) for r in results}) == 1000
    assert pc["k"] == {"value": 1} and pc.get_item("k")[3] == 60
    assert pc._flights == {}


def test_str_and_bytes_keys_share_a_flight(cache):
    loads = 0

    async def loader():
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.01)
        return bytearray(b"v")

    async def main():
        return await asyncio.gather(cache.aget_or_set("k", loader), cache.aget_or_set(b"k", loader))

    assert asyncio.run(main()) == [b"v", b"v"] and loads == 1


def test_an_exception_reaches_every_waiter(pc):
    loads = 0

    class Boom(Exception):
        pass

    async def loader():
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.01)
        raise Boom("no value")

    async def main():
        return await asyncio.gather(*(pc.aget_or_set("k", loader) for _ in range(50)), return_exceptions=True)

    results = asyncio.run(main())
    assert loads == 1
    assert all(isinstance(r, Boom) for r in results) and "k" not in pc
    assert pc._flights == {}

    async def ok():
        return 7

    assert asyncio.run(pc.aget_or_set("k", ok)) == 7  # the next call loads again


def test_a_cancelled_loader_hands_the_key_to_the_next_waiter(pc):
    started = []

    def make_loader(name):
        async def loader():
            started.append(name)
            await asyncio.sleep(0.05)
            return name
        return loader

    async def main():
        first = asyncio.create_task(pc.aget_or_set("k", make_loader("first")))
        await asyncio.sleep(0.01)  # first is loading
        waiters = [asyncio.create_task(pc.aget_or_set("k", make_loader(f"w{i}"))) for i in range(5)]
        await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return await asyncio.gather(*waiters)

    results = asyncio.run(main())
    assert started == ["first", "w0"]
    assert results == ["w0"] * 5 and pc["k"] == "w0"


def test_a_cancelled_waiter_leaves_the_load_alone(pc):
    loads = 0

    async def loader():
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.03)
        return "v"

    async def main():
        loading = asyncio.create_task(pc.aget_or_set("k", loader))
        await asyncio.sleep(0.005)
        waiter = asyncio.create_task(pc.aget_or_set("k", loader))
        await asyncio.sleep(0.005)
        waiter.cancel()
        return await loading, waiter

    value, waiter = asyncio.run(main())
    assert value == "v" and loads == 1 and waiter.cancelled()


def test_bad_loaders_get_clear_errors(pc):
    with pytest.raises(TypeError, match="loader must be a coroutine function"):
        pc.aget_or_set("k", b"not callable")

    with pytest.raises(TypeError, match=r"loader\(\) returned int, not an awaitable"):
        asyncio.run(pc.aget_or_set("k", lambda: 5))
    assert pc._flights == {}


def test_a_value_the_cache_refuses_reaches_every_waiter(cache):
    async def loader():
        await asyncio.sleep(0.01)
        return "a str is not bytes"

    async def main():
        return await asyncio.gather(*(cache.aget_or_set("k", loader) for _ in range(3)), return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, TypeError) for r in results) and "k" not in cache


def test_a_value_too_large_to_store_is_still_returned(cache):
    big = b"x" * (1 << 20)

    async def loader():
        return big

    assert asyncio.run(cache.aget_or_set("k", loader)) == big and "k" not in cache


def test_separate_event_loops_load_separately(pc):
    loads = 0

    async def loader():
        nonlocal loads
        loads += 1
        return loads

    assert asyncio.run(pc.aget_or_set("k", loader)) == 1
    pc.delete("k")
    assert asyncio.run(pc.aget_or_set("k", loader)) == 2


def test_async_memoize_single_flight(pc):
    calls = 0

    @pc.memoize(ttl=30)
    async def fetch(n):
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return {"n": n}

    async def main():
        return await asyncio.gather(*(fetch(3) for _ in range(100)))

    assert asyncio.run(main()) == [{"n": 3}] * 100 and calls == 1
    assert pc[fetch.cache_key(3)] == {"n": 3}
    assert asyncio.run(fetch(3)) == {"n": 3} and calls == 1
