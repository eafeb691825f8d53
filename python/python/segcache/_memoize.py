"""`segcache.memoize`: cache a function's results (sync or async) in a `segcache.Cache`.

Cache keys follow `functools.lru_cache`: arguments must be hashable, positional and keyword
arguments both count, `f(3)` and `f(3.0)` share an entry unless `typed=True`. Unlike
lru_cache, keys must mean the same thing in another process (a persisted cache outlives the
process), so they are built from a canonical encoding of the arguments, never from `hash()`:
str, bytes, numbers, None, tuples and frozensets are encoded directly (frozensets in sorted
order); other hashable objects by their pickle. The encoding is hashed (BLAKE2b, 128 bits) and
prefixed with the function's qualified name, so keys stay under the 250-byte limit.

Methods are keyed per instance, as lru_cache keys them by identity: a function defined in a class
body whose first parameter is named `self` gets, in place of `self`'s encoding, a token unique to
that object in this process (two equal but distinct instances do not share entries). The token is
held through a weak reference: when the instance dies its token is forgotten, and its entries
(which no later key can name) stay in the cache until their TTL, eviction or `cache_clear()`.
Instances that cannot be weakly referenced are keyed by their pickle, as other arguments are.
A method's `cache_key()` and `invalidate()` take the instance first: `Class.method.invalidate(obj,
2)` (the wrapper is a plain function: `obj.method.invalidate` would not pass `obj`).

Single flight (`lock=True`, the default): of the concurrent calls with one key, one runs the
function and the others wait for its result (threads block with the GIL released; coroutines on
one event loop await the same future). A call made while computing the same key on the same
thread (or in the same task) runs the function directly instead of waiting for itself; calls for
other keys nest freely (recursion such as fib). Two threads whose calls wait on each other's keys
deadlock, as with any per-key lock. If the computing call raises, the waiters try again, one of
them running the function.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import itertools
import os
import pickle
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Generic, NamedTuple, Optional, Protocol, TypeVar, Union, overload

from ._errors import Error, NoMemory, TooLarge
from ._segcache import Cache

if TYPE_CHECKING:
    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")
    P2 = ParamSpec("P2")
    R = TypeVar("R")
    S = TypeVar("S")

    class Memoized(Generic[P, R]):
        """What `memoize` returns: the function (same signature) plus its cache helpers."""

        cache: Cache[Any]

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...
        def cache_key(self, *args: P.args, **kwargs: P.kwargs) -> bytes: ...
        def invalidate(self, *args: P.args, **kwargs: P.kwargs) -> bool: ...
        def cache_info(self) -> CacheInfo: ...
        def cache_clear(self) -> None: ...
        # A method: through the class, the function itself; through an instance, bound to it.
        @overload
        def __get__(self, instance: None, owner: Any) -> Memoized[P, R]: ...
        @overload
        def __get__(self: Memoized[Concatenate[S, P2], R], instance: S, owner: Any) -> Callable[P2, R]: ...
        def __get__(self, instance: Any, owner: Any) -> Any: ...

_MISS = object()


class CacheInfo(NamedTuple):
    """What `cache_info()` of a memoized function returns (the fields of functools' CacheInfo).

    - `hits`: calls answered without running the function (from the cache, or from another
      caller's result computed at the same time).
    - `misses`: calls that ran the function.
    - `maxsize`: always None (the cache's memory bounds it, not an entry count).
    - `currsize`: entries of this function now in the cache (found by a scan of the cache's keys).
    """

    hits: int
    misses: int
    maxsize: Optional[int]
    currsize: int


class UncacheableResultWarning(UserWarning):
    """A memoized function's result could not be serialized: it was returned but not cached."""


# Per-instance keys of methods: `id(obj)` -> (weak reference, token). A token names one object of
# this process: a random nonce (renewed in a fork() child) and a counter.
_tokens: dict[int, tuple[weakref.ref[Any], bytes]] = {}
_tokens_lock = threading.Lock()
_token_counter = itertools.count()
_nonce = os.urandom(8).hex()


def _renew_nonce() -> None:
    global _nonce, _tokens_lock
    _nonce = os.urandom(8).hex()
    _tokens_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_nonce)


def _instance_token(obj: Any) -> Optional[bytes]:
    """The token of `obj` (made on first use), or None if it cannot be weakly referenced."""
    i = id(obj)
    entry = _tokens.get(i)
    if entry is not None and entry[0]() is obj:
        return entry[1]
    with _tokens_lock:
        entry = _tokens.get(i)
        if entry is not None and entry[0]() is obj:
            return entry[1]

        def forget(ref: weakref.ref[Any], i: int = i) -> None:
            # Runs when obj dies (maybe inside the lock above: no lock here). Leaves a newer
            # object that reused the id alone.
            if _tokens.get(i, (None,))[0] is ref:
                _tokens.pop(i, None)

        try:
            ref = weakref.ref(obj, forget)
        except TypeError:
            return None
        token = f"{_nonce}-{next(_token_counter)}".encode()
        _tokens[i] = (ref, token)
        return token


def _is_method(fn: Callable[..., Any]) -> bool:
    """Whether `fn` was defined in a class body with a first parameter named `self`."""
    parts = getattr(fn, "__qualname__", "").split(".")
    if len(parts) < 2 or parts[-2] == "<locals>":
        return False
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0].name == "self" and params[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


class _Flight:
    """One computation in progress (threads): waiters block on `done`."""

    __slots__ = ("owner", "done", "ok", "result")

    def __init__(self) -> None:
        self.owner = threading.get_ident()
        self.done = threading.Event()
        self.ok = False
        self.result: Any = None


T = TypeVar("T")


class Serializer(Protocol[T]):
    """What `Cache(serializer=...)` and `memoize(serializer=...)` take: an object (a module such as
    `json` or `pickle`, or your own) whose `dumps` turns a value into bytes (or a str, stored as
    UTF-8) and whose `loads` turns those bytes back into the value."""

    def dumps(self, obj: T, /) -> Union[bytes, str]: ...
    def loads(self, data: bytes, /) -> T: ...


def _encode(obj: Any, typed: bool, out: list[bytes]) -> None:
    """Appends a canonical, process-independent encoding of `obj` to `out`."""
    hash(obj)  # lru_cache semantics: unhashable arguments raise TypeError
    t = type(obj)
    if obj is None:
        out.append(b"N;")
    elif t is bool and typed:
        out.append(b"B1;" if obj else b"B0;")
    elif isinstance(obj, (bool, int)) and t in (bool, int):
        out.append(b"I%d;" % int(obj))
    elif t is float:
        if not typed and obj.is_integer():
            out.append(b"I%d;" % int(obj))
        else:
            out.append(b"F" + obj.hex().encode() + b";")
    elif t is str:
        data = obj.encode("utf-8", "surrogatepass")
        out.append(b"S%d:" % len(data) + data)
    elif t is bytes:
        out.append(b"Y%d:" % len(obj) + obj)
    elif t is tuple:
        out.append(b"T%d(" % len(obj))
        for x in obj:
            _encode(x, typed, out)
        out.append(b")")
    elif t is frozenset:
        parts = []
        for x in obj:
            sub: list[bytes] = []
            _encode(x, typed, sub)
            parts.append(b"".join(sub))
        parts.sort()
        out.append(b"Z%d(" % len(parts) + b"".join(parts) + b")")
    else:
        try:
            data = pickle.dumps(obj, protocol=4)
        except Exception as e:
            raise TypeError(
                f"memoize: cannot build a cache key from an argument of type {t.__qualname__}: "
                f"it neither is a basic type nor pickles ({e})"
            ) from e
        out.append(b"P%d:" % len(data) + data)
    if typed and t is not bool:
        name = f"{t.__module__}.{t.__qualname__}".encode()
        out.append(b"@" + name + b";")


def make_key(prefix: bytes, args: tuple[Any, ...], kwargs: dict[str, Any], typed: bool = False) -> bytes:
    """The cache key of one call: `prefix` + ':' + 32 hex digits."""
    return _make_key(prefix, args, kwargs, typed, None)


def _make_key(
    prefix: bytes, args: tuple[Any, ...], kwargs: dict[str, Any], typed: bool, instance: Optional[bytes]
) -> bytes:
    out: list[bytes] = []
    if instance is not None:
        # A method's `self`, by identity: its token in place of args[0].
        out.append(b"O" + instance + b";")
        args = args[1:]
    _encode(args, typed, out)
    out.append(b"|")
    for name in sorted(kwargs):
        out.append(name.encode("utf-8", "surrogatepass") + b"=")
        _encode(kwargs[name], typed, out)
    digest = hashlib.blake2b(b"".join(out), digest_size=16).hexdigest().encode()
    return prefix + b":" + digest


def memoize(
    cache: Cache[Any],
    ttl: Any = None,
    *,
    serializer: Optional[Serializer[Any]] = None,
    typed: bool = False,
    key_prefix: Optional[str] = None,
    lock: bool = True,
) -> Callable[[Callable[P, R]], Memoized[P, R]]:
    """Decorator: keep results of the decorated function (or coroutine function) in `cache`.

    - `ttl`: as for `Cache.set` (seconds, timedelta, 0 for never, None for the cache default).
    - `serializer`: an object with `dumps(obj) -> bytes` and `loads(bytes) -> obj` (`json` works
      for JSON-able results). By default, the cache's own serializer if it has one (results are
      then stored as any value of the cache is, and read back by `cache.get` as objects), else
      pickle. A cache with a serializer takes no second one here (`TypeError`): the results
      would be encoded twice.
    - `typed`: as for `functools.lru_cache`.
    - `key_prefix`: the key prefix; the function's module and qualified name by default.
    - `lock`: single flight (see the module's doc): concurrent calls with one key run the
      function once. False: each concurrent caller that misses runs it.

    Results too large for one segment, or refused for lack of memory, are returned uncached. A
    result the serializer cannot serialize is returned uncached with an
    `UncacheableResultWarning`. A stored entry that no longer deserializes (for example after a
    class was renamed) is treated as a miss and overwritten. Exceptions are not cached. Methods
    are keyed per instance. The wrapper has `cache_key(*args, **kwargs)`,
    `invalidate(*args, **kwargs)`, `cache_info()` and `cache_clear()` (which deletes every entry
    of this function from the cache, and resets the counts).
    """
    if not isinstance(cache, Cache):
        raise TypeError(f"memoize: cache must be a segcache.Cache, not {type(cache).__name__}")
    # The cache's serializer encodes results when it has one; else this one does, into bytes.
    own_codec = cache.serializer is None
    if serializer is None:
        serializer = pickle
    elif not own_codec:
        raise TypeError(
            "memoize: this cache already has a serializer, which encodes the results; leave memoize's "
            "serializer out (or memoize into a cache without one)"
        )
    if not (callable(getattr(serializer, "dumps", None)) and callable(getattr(serializer, "loads", None))):
        raise TypeError("memoize: serializer must have dumps() and loads()")
    codec: Serializer[Any] = serializer

    def decorate(fn: Callable[P, R]) -> Memoized[P, R]:
        name = key_prefix if key_prefix is not None else f"{fn.__module__}.{fn.__qualname__}"
        prefix = name.encode("utf-8", "surrogatepass")
        if len(prefix) > 200:
            prefix = b"h-" + hashlib.blake2b(prefix, digest_size=16).hexdigest().encode()
        method = _is_method(fn)
        counts = [0, 0]  # hits, misses
        counts_lock = threading.Lock()
        flights: dict[bytes, _Flight] = {}
        flights_lock = threading.Lock()
        # Computations that ended with a result. A caller notes it before its first lookup; if it
        # then computes and the count has not moved, no result arrived meanwhile and it need not
        # look again (each lookup of an absent key counts a miss in the cache's stats).
        completed = [0]
        # Coroutines: (event loop, key) -> (future of (ok, result), the computing task).
        aflights: dict[tuple[asyncio.AbstractEventLoop, bytes], tuple[asyncio.Future[Any], Any]] = {}

        def count(hit: bool) -> None:
            with counts_lock:
                counts[0 if hit else 1] += 1

        def cache_key(*args: Any, **kwargs: Any) -> bytes:
            token = _instance_token(args[0]) if method and args else None
            return _make_key(prefix, args, kwargs, typed, token)

        def lookup(key: bytes) -> Any:
            if not own_codec:
                # The cache decodes; an entry it cannot decode is a miss, as below (its own
                # errors, such as Closed, are not).
                try:
                    return cache.get(key, _MISS)
                except Error:
                    raise
                except Exception:
                    return _MISS
            raw = cache.get(key)
            if raw is None:
                return _MISS
            try:
                return codec.loads(raw)
            except Exception:
                return _MISS

        def store(key: bytes, result: Any) -> None:
            try:
                data = codec.dumps(result) if own_codec else cache._store_loaded(key, result, ttl)
            except (TooLarge, NoMemory):
                return
            except Error:
                raise
            except Exception as e:
                warnings.warn(
                    f"memoize: the result of {name} ({type(result).__qualname__}) cannot be serialized, "
                    f"so it was returned without being cached: {e}",
                    UncacheableResultWarning,
                    stacklevel=4,
                )
                return
            if not own_codec:
                return  # stored by the cache (`_store_loaded` keeps quiet on TooLarge, NoMemory)
            if isinstance(data, str):
                data = data.encode("utf-8")
            try:
                cache.set(key, data, ttl)
            except (TooLarge, NoMemory):
                pass

        if inspect.iscoroutinefunction(fn):

            async def compute_async(key: bytes, args: Any, kwargs: Any) -> Any:
                count(False)
                result = await fn(*args, **kwargs)
                store(key, result)
                return result

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                key = cache_key(*args, **kwargs)
                seen = completed[0]
                hit = lookup(key)
                if hit is not _MISS:
                    count(True)
                    return hit
                if not lock:
                    return await compute_async(key, args, kwargs)
                loop = asyncio.get_running_loop()
                me = asyncio.current_task()
                while True:
                    flight = aflights.get((loop, key))
                    if flight is None:
                        break
                    fut, owner = flight
                    if owner is me:  # this task already computes the key: no waiting for itself
                        return await compute_async(key, args, kwargs)
                    ok, result = await asyncio.shield(fut)
                    if ok:
                        count(True)
                        return result
                    seen = completed[0]
                    hit = lookup(key)  # the computing call failed: look again, then compute
                    if hit is not _MISS:
                        count(True)
                        return hit
                fut = loop.create_future()
                aflights[(loop, key)] = (fut, me)
                outcome: tuple[bool, Any] = (False, None)
                try:
                    if completed[0] != seen:  # a computation ended since the first lookup
                        hit = lookup(key)
                        if hit is not _MISS:
                            count(True)
                            outcome = (True, hit)
                            return hit
                    result = await compute_async(key, args, kwargs)
                    outcome = (True, result)
                    return result
                finally:
                    if outcome[0]:
                        completed[0] += 1
                    del aflights[(loop, key)]
                    fut.set_result(outcome)

            wrapper: Any = async_wrapper
        else:

            def compute(key: bytes, args: Any, kwargs: Any) -> Any:
                count(False)
                result = fn(*args, **kwargs)
                store(key, result)
                return result

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                key = cache_key(*args, **kwargs)
                seen = completed[0]
                hit = lookup(key)
                if hit is not _MISS:
                    count(True)
                    return hit
                if not lock:
                    return compute(key, args, kwargs)
                while True:
                    with flights_lock:
                        flight = flights.get(key)
                        if flight is None:
                            flight = flights[key] = _Flight()
                            break
                    if flight.owner == threading.get_ident():
                        return compute(key, args, kwargs)  # re-entrant: no waiting for itself
                    flight.done.wait()  # releases the GIL
                    if flight.ok:
                        count(True)
                        return flight.result
                    seen = completed[0]
                    hit = lookup(key)  # the computing call failed: look again, then compute
                    if hit is not _MISS:
                        count(True)
                        return hit
                try:
                    if completed[0] != seen:  # a computation ended since the first lookup
                        hit = lookup(key)
                        if hit is not _MISS:
                            count(True)
                            flight.ok, flight.result = True, hit
                            return hit
                    result = compute(key, args, kwargs)
                    flight.ok, flight.result = True, result
                    return result
                finally:
                    with flights_lock:
                        if flight.ok:
                            completed[0] += 1
                        del flights[key]
                    flight.done.set()

            wrapper = sync_wrapper

        def invalidate(*args: Any, **kwargs: Any) -> bool:
            return cache.delete(cache_key(*args, **kwargs))

        def own(k: bytes) -> bool:
            return len(k) == len(prefix) + 33 and k.startswith(prefix + b":")

        def cache_info() -> CacheInfo:
            with counts_lock:
                hits, misses = counts
            return CacheInfo(hits, misses, None, sum(1 for k in cache if own(k)))

        def cache_clear() -> None:
            for k in [k for k in cache if own(k)]:
                cache.delete(k)
            with counts_lock:
                counts[0] = counts[1] = 0

        wrapper.cache = cache
        wrapper.cache_key = cache_key
        wrapper.invalidate = invalidate
        wrapper.cache_info = cache_info
        wrapper.cache_clear = cache_clear
        return wrapper  # type: ignore[no-any-return]

    return decorate
