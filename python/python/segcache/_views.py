"""The views `Cache.keys()`, `Cache.values()` and `Cache.items()` return.

They are the `collections.abc` views (set operations on keys and items included) over a cache,
with iteration that tolerates a cache changing underneath: keys come from the engine's key scan
(`iter(cache)`), and a key removed (deleted, evicted, expired) between being listed and being read
is skipped rather than raising `KeyError`.
"""

from __future__ import annotations

from collections.abc import ItemsView, KeysView, ValuesView
from typing import TYPE_CHECKING, Any, Iterator, Tuple

if TYPE_CHECKING:
    from ._segcache import Cache


class CacheKeysView(KeysView):  # type: ignore[type-arg]
    """`Cache.keys()`: the keys as `bytes`."""

    __slots__ = ()
    _mapping: Cache[Any]

    def __repr__(self) -> str:
        return f"CacheKeysView({self._mapping!r})"


class CacheValuesView(ValuesView):  # type: ignore[type-arg]
    """`Cache.values()`: the values of the keys present as they are reached (decoded, with a serializer)."""

    __slots__ = ()
    _mapping: Cache[Any]

    def __iter__(self) -> Iterator[Any]:
        return self._mapping._iter_values()

    def __contains__(self, value: object) -> bool:
        return any(v is value or v == value for v in self)

    def __repr__(self) -> str:
        return f"CacheValuesView({self._mapping!r})"


class CacheItemsView(ItemsView):  # type: ignore[type-arg]
    """`Cache.items()`: `(key, value)` pairs, keys as `bytes`."""

    __slots__ = ()
    _mapping: Cache[Any]

    def __iter__(self) -> Iterator[Tuple[bytes, Any]]:
        return self._mapping._iter_items()

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        key, value = item
        if key not in self._mapping:
            return False
        v = self._mapping.get(key)
        return v is not None and (v is value or v == value)

    def __repr__(self) -> str:
        return f"CacheItemsView({self._mapping!r})"
