"""`Cache.aget_or_set`: get-or-load for asyncio, one loader per missing key.

Within one event loop, the first task that misses on a key awaits its loader; the tasks that
miss on that key meanwhile await the same `asyncio.Future` (no thread is blocked, the loop runs
on). The flights live in a dict of the cache, keyed by `(event loop, key as bytes)`:

- the loader's value is encoded once (the cache's serializer, or checked as bytes-like), stored,
  and every caller gets it decoded from those bytes, as a read of the key would return it;
- an exception from the loader (or from encoding its value) is raised in the loading task and
  in every task that waited for it; nothing is stored;
- a loading task that is cancelled stores nothing and hands the key over: the first waiter to
  run calls its own loader, and the others wait for that one. A cancelled waiter leaves the
  load alone;
- a value too large to store, or refused for lack of memory, is still returned.

Across event loops (and so across threads) nothing is shared but the cache: each loop runs its
own loader for a key that misses there, and the last store wins. Within one loop and one key,
the loaders never overlap.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ._segcache import Cache

_MISS = object()
# What a flight's future holds: (outcome, payload).
_LOADED = "loaded"  # payload: the stored bytes
_FAILED = "failed"  # payload: the loader's exception
_HANDED_OVER = "handed over"  # the loader was cancelled: the next waiter loads


def _flight_key(key: Any) -> bytes:
    """`key` as the engine holds it (str as UTF-8), so that "k" and b"k" share a flight."""
    return key.encode() if isinstance(key, str) else bytes(key)


async def get_or_set(cache: Cache[Any], key: Any, loader: Callable[[], Any], ttl: Any) -> Any:
    """See the module's doc; `Cache.aget_or_set` calls this."""
    value = cache.get(key, _MISS)  # also refuses a bad key, or a closed cache
    if value is not _MISS:
        return value
    loop = asyncio.get_running_loop()
    flights: dict[tuple[asyncio.AbstractEventLoop, bytes], asyncio.Future[tuple[str, Any]]] = cache._flights
    slot = (loop, _flight_key(key))
    while True:
        flight = flights.get(slot)
        if flight is None:
            break
        # shield: a waiter that is cancelled must not cancel the load the others wait for.
        outcome, payload = await asyncio.shield(flight)
        if outcome == _LOADED:
            return cache._decode(payload)
        if outcome == _FAILED:
            raise payload
        # Handed over: the first waiter to get here finds no flight and loads.
    flight = loop.create_future()
    flights[slot] = flight
    result: tuple[str, Any] = (_HANDED_OVER, None)
    try:
        pending = loader()
        if not inspect.isawaitable(pending):
            raise TypeError(
                f"aget_or_set: loader() returned {type(pending).__name__}, not an awaitable; "
                "pass a coroutine function (async def) or a function that returns an awaitable"
            )
        raw = cache._store_loaded(key, await pending, ttl)
        result = (_LOADED, raw)
    except Exception as e:
        result = (_FAILED, e)
        raise
    finally:
        # Cancellation (and GeneratorExit, KeyboardInterrupt) leaves `result` handed over.
        del flights[slot]
        flight.set_result(result)
    return cache._decode(raw)
