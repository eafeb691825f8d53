"""`segcache.memoize`: cache a function's results (sync or async) in a `segcache.Cache`.

Cache keys follow `functools.lru_cache`: arguments must be hashable, positional and keyword
arguments both count, `f(3)` and `f(3.0)` share an entry unless `typed=True`. Unlike
lru_cache, keys must mean the same thing in another process (a persisted cache outlives the
process), so they are built from a canonical encoding of the arguments, never from `hash()`:
str, bytes, numbers, None, tuples and frozensets are encoded directly (frozensets in sorted
order); other hashable objects by their pickle. The encoding is hashed (BLAKE2b, 128 bits) and
prefixed with the function's qualified name, so keys stay under the 250-byte limit.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import pickle
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, Protocol, TypeVar, Union

from ._errors import NoMemory, TooLarge
from ._segcache import Cache

if TYPE_CHECKING:
    from typing_extensions import ParamSpec

    P = ParamSpec("P")
    R = TypeVar("R")

    class Memoized(Generic[P, R]):
        """What `memoize` returns: the function (same signature) plus its cache helpers."""

        cache: Cache

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...
        def cache_key(self, *args: P.args, **kwargs: P.kwargs) -> bytes: ...
        def invalidate(self, *args: P.args, **kwargs: P.kwargs) -> bool: ...

_MISS = object()


class Serializer(Protocol):
    def dumps(self, obj: Any) -> Union[bytes, str]: ...
    def loads(self, data: bytes) -> Any: ...


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
    out: list[bytes] = []
    _encode(args, typed, out)
    out.append(b"|")
    for name in sorted(kwargs):
        out.append(name.encode("utf-8", "surrogatepass") + b"=")
        _encode(kwargs[name], typed, out)
    digest = hashlib.blake2b(b"".join(out), digest_size=16).hexdigest().encode()
    return prefix + b":" + digest


def memoize(
    cache: Cache,
    ttl: Any = None,
    *,
    serializer: Serializer = pickle,
    typed: bool = False,
    key_prefix: Optional[str] = None,
) -> Callable[[Callable[P, R]], Memoized[P, R]]:
    """Decorator: keep results of the decorated function (or coroutine function) in `cache`.

    - `ttl`: as for `Cache.set` (seconds, timedelta, 0 for never, None for the cache default).
    - `serializer`: an object with `dumps(obj) -> bytes` and `loads(bytes) -> obj` (pickle by
      default; `json` works too for JSON-able results).
    - `typed`: as for `functools.lru_cache`.
    - `key_prefix`: the key prefix; the function's module and qualified name by default.

    Results too large for one segment, or refused for lack of memory, are returned uncached.
    A stored entry that no longer deserializes (for example after a class was renamed) is
    treated as a miss and overwritten. The wrapper has `cache_key(*args, **kwargs)` and
    `invalidate(*args, **kwargs)`.
    """
    if not isinstance(cache, Cache):
        raise TypeError(f"memoize: cache must be a segcache.Cache, not {type(cache).__name__}")
    if not (callable(getattr(serializer, "dumps", None)) and callable(getattr(serializer, "loads", None))):
        raise TypeError("memoize: serializer must have dumps() and loads()")

    def decorate(fn: Callable[P, R]) -> Memoized[P, R]:
        name = key_prefix if key_prefix is not None else f"{fn.__module__}.{fn.__qualname__}"
        prefix = name.encode("utf-8", "surrogatepass")
        if len(prefix) > 200:
            prefix = b"h-" + hashlib.blake2b(prefix, digest_size=16).hexdigest().encode()

        def cache_key(*args: Any, **kwargs: Any) -> bytes:
            return make_key(prefix, args, kwargs, typed)

        def lookup(key: bytes) -> Any:
            raw = cache.get(key)
            if raw is None:
                return _MISS
            try:
                return serializer.loads(raw)
            except Exception:
                return _MISS

        def store(key: bytes, result: Any) -> None:
            data = serializer.dumps(result)
            if isinstance(data, str):
                data = data.encode("utf-8")
            try:
                cache.set(key, data, ttl)
            except (TooLarge, NoMemory):
                pass

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                key = cache_key(*args, **kwargs)
                hit = lookup(key)
                if hit is not _MISS:
                    return hit
                result = await fn(*args, **kwargs)
                store(key, result)
                return result

            wrapper: Any = async_wrapper
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                key = cache_key(*args, **kwargs)
                hit = lookup(key)
                if hit is not _MISS:
                    return hit
                result = fn(*args, **kwargs)
                store(key, result)
                return result

            wrapper = sync_wrapper

        def invalidate(*args: Any, **kwargs: Any) -> bool:
            return cache.delete(cache_key(*args, **kwargs))

        wrapper.cache = cache
        wrapper.cache_key = cache_key
        wrapper.invalidate = invalidate
        return wrapper  # type: ignore[no-any-return]

    return decorate
