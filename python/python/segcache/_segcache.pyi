"""Type stubs of the native module `segcache._segcache`."""

import os
import pathlib
from collections.abc import (
    Awaitable,
    Callable,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    ValuesView,
)
from datetime import timedelta
from typing import Any, Dict, Generic, Literal, Optional, Tuple, Union, final, overload

from _typeshed import SupportsKeysAndGetItem
from typing_extensions import Buffer, ParamSpec, Self, TypeVar

from ._memoize import Memoized, Serializer

Key = Union[str, Buffer]
"""str (UTF-8, 1 to 250 bytes) or any bytes-like object (bytes, bytearray, memoryview, ...).
Keys come back (from iteration, `keys()`, `items()`, `popitem()`) as `bytes`."""
Value = Buffer
"""A value of a cache without a serializer: any object with the buffer protocol (bytes, bytearray,
memoryview, a NumPy array); not str. It comes back as `bytes`."""
TTL = Union[int, float, timedelta, None]
"""Seconds (a fraction rounds up), a timedelta, 0 for never, None for the cache's default."""
Size = Union[int, str]
"""Bytes, or a string such as "256MiB", "64KiB", "1GB"; every unit is a power of 1024 ("1GB" is "1GiB")."""

_D = TypeVar("_D")
_T = TypeVar("_T")
_K = TypeVar("_K", bound=Key)
_V = TypeVar("_V", default=bytes)
_P = ParamSpec("_P")
_R = TypeVar("_R")

MAX_KEY_LEN: int
MIN_SEGMENT_SIZE: int
MAX_SEGMENT_SIZE: int

RemovalCause = Literal["expired", "evicted", "removed", "replaced"]
"""Why an item left: its TTL ran out, eviction made room, a delete removed it, or a store
replaced it with a new version (the listener gets the old one)."""

@final
class _ComputeOp: ...

KEEP: _ComputeOp
"""A `Cache.compute` function's answer that leaves the key as it is."""
REMOVE: _ComputeOp
"""A `Cache.compute` function's answer that removes the key."""
MAX_TTL: int
__version__: str

class ManualClock:
    """A clock that moves only when told to (Unix seconds); pass it as `Cache(clock=...)`."""

    def __init__(self, now: Optional[int] = None) -> None: ...
    def advance(self, seconds: int) -> None: ...
    def set(self, now: int) -> None: ...
    @property
    def now(self) -> int: ...

@final
class Item(Generic[_V]):
    """An item as `Cache.get_state` read it: value, metadata, and state (before the read)."""

    @property
    def value(self) -> _V: ...
    @property
    def flags(self) -> int: ...
    @property
    def cas(self) -> int: ...
    @property
    def ttl(self) -> Optional[int]: ...
    @property
    def fetched(self) -> bool: ...
    @property
    def last_access(self) -> int: ...
    @property
    def stale(self) -> bool: ...
    @property
    def won(self) -> bool: ...
    @property
    def token_sent(self) -> bool: ...

class Cache(MutableMapping[Key, _V], Generic[_V]):
    """A thread-safe segment-structured cache, a MutableMapping of keys to values of type `_V`.

    `Cache()` stores bytes-like values and returns `bytes` (`Cache[bytes]`). With
    `serializer="pickle"` it takes any picklable value (`Cache[Any]`); with a `Serializer[T]` (an
    object with `dumps` and `loads`), values of type `T` (`Cache[T]`). Keys come back as `bytes`.

    A cache belongs to the process that opened it: in an `os.fork()` child every method of an
    inherited one raises `segcache.ForkedError` (reads included); open a new one there. With
    `multi_process=True` (and a `path`) processes share the cache through its file instead: an
    inherited one works in the child, and other processes may open the same path.

    Unless told, the heap is 64 MiB in 1 MiB segments: the engine's defaults, as the C library's.
    The largest value is what a segment holds unless `max_item_size` (up to 1 GiB) allows more:
    a larger item is stored as chunks and read back whole, or not at all."""

    @overload
    def __init__(
        self: Cache[bytes],
        heap_size: Optional[Size] = None,
        segment_size: Optional[Size] = None,
        eviction: Optional[str] = None,
        ttl: TTL = None,
        path: Union[str, "os.PathLike[str]", None] = None,
        hash_power: Optional[int] = None,
        shards: Optional[int] = None,
        clock: Optional[ManualClock] = None,
        reset_bad_file: bool = False,
        lazy_verify: bool = False,
        multi_process: bool = False,
        prefault: bool = False,
        touch_ahead: bool = True,
        *,
        eviction_listener: Optional[Callable[[bytes, bytes, RemovalCause], object]] = None,
        resize_file: bool = False,
        max_heap_size: Optional[Size] = None,
        tier_path: Union[str, "os.PathLike[str]", None] = None,
        tier_size: Optional[Size] = None,
        max_item_size: Optional[Size] = None,
        tier_promote_after: Optional[int] = None,
        tier_write_queue: Optional[Size] = None,
        serializer: None = None,
    ) -> None: ...
    @overload
    def __init__(
        self: Cache[Any],
        heap_size: Optional[Size] = None,
        segment_size: Optional[Size] = None,
        eviction: Optional[str] = None,
        ttl: TTL = None,
        path: Union[str, "os.PathLike[str]", None] = None,
        hash_power: Optional[int] = None,
        shards: Optional[int] = None,
        clock: Optional[ManualClock] = None,
        reset_bad_file: bool = False,
        lazy_verify: bool = False,
        multi_process: bool = False,
        prefault: bool = False,
        touch_ahead: bool = True,
        *,
        eviction_listener: Optional[Callable[[bytes, bytes, RemovalCause], object]] = None,
        resize_file: bool = False,
        max_heap_size: Optional[Size] = None,
        tier_path: Union[str, "os.PathLike[str]", None] = None,
        tier_size: Optional[Size] = None,
        max_item_size: Optional[Size] = None,
        tier_promote_after: Optional[int] = None,
        tier_write_queue: Optional[Size] = None,
        serializer: Literal["pickle"],
    ) -> None: ...
    @overload
    def __init__(
        self: Cache[_T],
        heap_size: Optional[Size] = None,
        segment_size: Optional[Size] = None,
        eviction: Optional[str] = None,
        ttl: TTL = None,
        path: Union[str, "os.PathLike[str]", None] = None,
        hash_power: Optional[int] = None,
        shards: Optional[int] = None,
        clock: Optional[ManualClock] = None,
        reset_bad_file: bool = False,
        lazy_verify: bool = False,
        multi_process: bool = False,
        prefault: bool = False,
        touch_ahead: bool = True,
        *,
        eviction_listener: Optional[Callable[[bytes, bytes, RemovalCause], object]] = None,
        resize_file: bool = False,
        max_heap_size: Optional[Size] = None,
        tier_path: Union[str, "os.PathLike[str]", None] = None,
        tier_size: Optional[Size] = None,
        max_item_size: Optional[Size] = None,
        tier_promote_after: Optional[int] = None,
        tier_write_queue: Optional[Size] = None,
        serializer: Serializer[_T],
    ) -> None: ...
    @overload
    def get(self, key: Key, default: None = None) -> Optional[_V]: ...
    @overload
    def get(self, key: Key, default: Union[_V, _D]) -> Union[_V, _D]: ...
    def gets(self, key: Key, default: _D = ...) -> Union[Tuple[_V, int], _D]: ...
    def get_item(self, key: Key, default: _D = ...) -> Union[Tuple[_V, int, int, Optional[int]], _D]: ...
    def get_and_touch(self, key: Key, ttl: TTL, default: _D = ...) -> Union[_V, _D]: ...
    def get_state(
        self,
        key: Key,
        *,
        claim: bool = False,
        recache_below: Union[int, float, timedelta, None] = None,
        update: bool = True,
    ) -> Optional[Item[_V]]: ...
    @overload
    def set(
        self: Cache[bytes],
        key: Key,
        value: Value,
        ttl: TTL = None,
        flags: Optional[int] = None,
        *,
        new_cas: Optional[int] = None,
    ) -> None: ...
    @overload
    def set(
        self, key: Key, value: _V, ttl: TTL = None, flags: Optional[int] = None, *, new_cas: Optional[int] = None
    ) -> None: ...
    @overload
    def add(
        self: Cache[bytes],
        key: Key,
        value: Value,
        ttl: TTL = None,
        flags: Optional[int] = None,
        *,
        new_cas: Optional[int] = None,
    ) -> bool: ...
    @overload
    def add(
        self, key: Key, value: _V, ttl: TTL = None, flags: Optional[int] = None, *, new_cas: Optional[int] = None
    ) -> bool: ...
    @overload
    def replace(
        self: Cache[bytes],
        key: Key,
        value: Value,
        ttl: TTL = None,
        flags: Optional[int] = None,
        *,
        new_cas: Optional[int] = None,
    ) -> bool: ...
    @overload
    def replace(
        self, key: Key, value: _V, ttl: TTL = None, flags: Optional[int] = None, *, new_cas: Optional[int] = None
    ) -> bool: ...
    @overload
    def cas(
        self: Cache[bytes],
        key: Key,
        value: Value,
        cas: int,
        ttl: TTL = None,
        flags: Optional[int] = None,
        *,
        new_cas: Optional[int] = None,
    ) -> Optional[bool]: ...
    @overload
    def cas(
        self,
        key: Key,
        value: _V,
        cas: int,
        ttl: TTL = None,
        flags: Optional[int] = None,
        *,
        new_cas: Optional[int] = None,
    ) -> Optional[bool]: ...
    # append, prepend, incr and decr work on the stored bytes: a cache with a serializer raises
    # TypeError, so they are typed for `Cache[bytes]` only.
    def append(self: Cache[bytes], key: Key, value: Value) -> bool: ...
    def prepend(self: Cache[bytes], key: Key, value: Value) -> bool: ...
    def incr(self: Cache[bytes], key: Key, delta: Optional[int] = None) -> Optional[int]: ...
    def decr(self: Cache[bytes], key: Key, delta: Optional[int] = None) -> Optional[int]: ...
    def delete(self, key: Key, *, cas: Optional[int] = None) -> bool: ...
    def invalidate(
        self,
        key: Key,
        *,
        ttl: Union[int, float, timedelta, None] = None,
        cas: Optional[int] = None,
        new_cas: Optional[int] = None,
    ) -> Optional[int]: ...
    def touch(self, key: Key, ttl: TTL) -> bool: ...
    def flush(self, delay: TTL = None) -> None: ...
    def expire(self) -> int: ...
    def set_memory_limit(self, bytes: Size) -> None: ...
    def memory_limit(self) -> int: ...
    def touch_ahead(self, per_shard: Optional[int] = None) -> Optional[int]: ...
    def get_many(self, keys: Iterable[_K]) -> Dict[_K, _V]: ...
    @overload
    def set_many(
        self: Cache[bytes],
        items: Union[Mapping[_K, Value], Iterable[Tuple[Key, Value]]],
        ttl: TTL = None,
        flags: Optional[int] = None,
    ) -> None: ...
    @overload
    def set_many(
        self,
        items: Union[Mapping[_K, _V], Iterable[Tuple[Key, _V]]],
        ttl: TTL = None,
        flags: Optional[int] = None,
    ) -> None: ...
    def delete_many(self, keys: Iterable[Key]) -> int: ...
    def stats(self) -> Dict[str, Union[int, str]]: ...
    def now(self) -> int: ...
    def sync(self) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> Optional[pathlib.Path]: ...
    @property
    def ttl(self) -> int: ...
    @property
    def heap_size(self) -> int: ...
    @property
    def segment_size(self) -> int: ...
    @property
    def eviction(self) -> str: ...
    @property
    def multi_process(self) -> bool: ...
    @property
    def serializer(self) -> Union[str, Serializer[_V], None]: ...
    @property
    def _flights(self) -> Dict[Any, Any]: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *args: object) -> bool: ...
    def __getitem__(self, key: Key) -> _V: ...
    @overload
    def __setitem__(self: Cache[bytes], key: Key, value: Value) -> None: ...
    @overload
    def __setitem__(self, key: Key, value: _V) -> None: ...
    def __delitem__(self, key: Key) -> None: ...
    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def keys(self) -> KeysView[bytes]: ...
    def values(self) -> ValuesView[_V]: ...
    def items(self) -> ItemsView[bytes, _V]: ...
    def _iter_values(self) -> Iterator[_V]: ...
    def _iter_items(self) -> Iterator[Tuple[bytes, _V]]: ...
    @overload
    def pop(self, key: Key, /) -> _V: ...
    @overload
    def pop(self, key: Key, default: _V, /) -> _V: ...
    @overload
    def pop(self, key: Key, default: _T, /) -> Union[_V, _T]: ...
    def popitem(self) -> Tuple[bytes, _V]: ...
    def setdefault(self, key: Key, default: _V) -> _V: ...
    @overload
    def compute(
        self: Cache[bytes],
        key: Key,
        func: Callable[[Optional[bytes]], Union[Value, Tuple[Value, TTL], _ComputeOp]],
        ttl: TTL = None,
        flags: Optional[int] = None,
    ) -> Optional[bytes]: ...
    @overload
    def compute(
        self,
        key: Key,
        func: Callable[[Optional[_V]], Union[_V, Tuple[_V, TTL], _ComputeOp]],
        ttl: TTL = None,
        flags: Optional[int] = None,
    ) -> Optional[_V]: ...
    @overload
    def get_or_set(self: Cache[bytes], key: Key, loader: Callable[[], Value], ttl: TTL = None) -> bytes: ...
    @overload
    def get_or_set(self, key: Key, loader: Callable[[], _V], ttl: TTL = None) -> _V: ...
    @overload
    async def aget_or_set(
        self: Cache[bytes], key: Key, loader: Callable[[], Awaitable[Value]], ttl: TTL = None
    ) -> bytes: ...
    @overload
    async def aget_or_set(self, key: Key, loader: Callable[[], Awaitable[_V]], ttl: TTL = None) -> _V: ...
    def _store_loaded(self, key: Key, value: _V, ttl: TTL = None) -> bytes: ...
    def _decode(self, raw: bytes) -> _V: ...
    def memoize(
        self,
        ttl: TTL = None,
        *,
        serializer: Optional[Serializer[Any]] = None,
        typed: bool = False,
        key_prefix: Optional[str] = None,
        lock: bool = True,
    ) -> Callable[[Callable[_P, _R]], Memoized[_P, _R]]: ...
    @overload
    def update(self: Cache[bytes], other: SupportsKeysAndGetItem[_K, Value], /, **kwargs: Value) -> None: ...
    @overload
    def update(self: Cache[bytes], other: Iterable[Tuple[Key, Value]], /, **kwargs: Value) -> None: ...
    @overload
    def update(self: Cache[bytes], **kwargs: Value) -> None: ...
    @overload
    def update(self, other: SupportsKeysAndGetItem[_K, _V], /, **kwargs: _V) -> None: ...
    @overload
    def update(self, other: Iterable[Tuple[Key, _V]], /, **kwargs: _V) -> None: ...
    @overload
    def update(self, **kwargs: _V) -> None: ...
    def clear(self) -> None: ...
