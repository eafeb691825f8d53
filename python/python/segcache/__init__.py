"""segcache: a segment-structured in-process cache (Segcache, NSDI'21) for Python.

    >>> import segcache
    >>> c = segcache.Cache(heap_size="64MiB")
    >>> c["user:1"] = b"alice"
    >>> c.get("user:1")
    b'alice'

Items live in one pre-allocated heap of fixed-size segments rather than as Python objects, so a
cached entry costs little more than its bytes; with `path=` the heap lives in a file and comes
back after a restart. `Cache` is safe to share between threads.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from ._errors import (
    BadFile,
    Closed,
    EmptyKey,
    Error,
    Exists,
    ForkedError,
    InvalidConfig,
    KeyTooLong,
    Locked,
    MapError,
    NoMemory,
    NoSpace,
    NotFound,
    NotNumeric,
    NotStored,
    PersistenceError,
    TooLarge,
)
from ._memoize import CacheInfo, Serializer, UncacheableResultWarning, make_key, memoize
from ._segcache import (
    KEEP,
    MAX_KEY_LEN,
    MAX_SEGMENT_SIZE,
    MAX_TTL,
    MIN_SEGMENT_SIZE,
    REMOVE,
    Cache,
    Item,
    ManualClock,
    __version__,
)

# `Cache` implements every method of a MutableMapping natively (keys come back as bytes).
MutableMapping.register(Cache)

__all__ = [
    "Cache", "Item", "ManualClock", "Serializer", "memoize", "make_key", "CacheInfo", "UncacheableResultWarning",
    "MAX_KEY_LEN", "MAX_SEGMENT_SIZE", "MIN_SEGMENT_SIZE", "MAX_TTL", "__version__", "KEEP", "REMOVE",
    "Error", "Closed", "NotFound", "Exists", "NotStored", "TooLarge", "KeyTooLong", "EmptyKey",
    "NoMemory", "NotNumeric", "InvalidConfig", "PersistenceError", "BadFile", "Locked", "NoSpace", "MapError",
    "ForkedError",
]
