"""`python -m segcache`: the installed package's version and what this build of it can do.

Each feature is read from the extension module as installed, not from a list kept by hand: the
keyword arguments `Cache` accepts, the module's file name (an abi3 build runs on every CPython
from 3.10 on), and whether the GIL is off after the import (a build for a free-threaded CPython
declares it needs none)."""

from __future__ import annotations

import inspect
import sys
import sysconfig

import segcache
from segcache import _segcache


def _cache_parameters() -> frozenset[str]:
    try:
        return frozenset(inspect.signature(segcache.Cache).parameters)
    except (TypeError, ValueError):
        return frozenset()


def features() -> dict[str, bool]:
    """What this build can do, by name."""
    params = _cache_parameters()
    gil_enabled = getattr(sys, "_is_gil_enabled", lambda: True)()
    return {
        "persistence": "path" in params,
        "multi-process": "path" in params and "multi_process" in params,
        "abi3": ".abi3." in (_segcache.__file__ or ""),
        "free-threading": bool(sysconfig.get_config_var("Py_GIL_DISABLED")) and not gil_enabled,
    }


_MEANING = {
    "persistence": "the heap in a file, warm after a restart or a crash: Cache(path=...)",
    "multi-process": "processes share one cache through its file: Cache(path=..., multi_process=True)",
    "abi3": "one build for every CPython from 3.10 on, through the stable ABI",
    "free-threading": "the GIL stays off on a free-threaded CPython",
}


def main() -> int:
    print(f"segcache {segcache.__version__}")
    print(f"extension: {_segcache.__file__}")
    print(f"python: {sys.implementation.name} {sys.version.split()[0]}")
    print("features:")
    for name, on in features().items():
        print(f"  {name}: {'yes' if on else 'no'} ({_MEANING[name]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
