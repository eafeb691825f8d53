"""On a free-threaded CPython the module declares it needs no GIL: importing it leaves the GIL off.

Skipped on GIL builds, where the abi3 wheel runs. `make test-python` runs this file and
test_threads.py under a free-threaded interpreter (with its own wheel) where one is on PATH.
"""

import os
import subprocess
import sys
import sysconfig
import threading

import pytest

import segcache

pytestmark = pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"), reason="needs a free-threaded CPython (3.13t or later)"
)


def test_import_leaves_the_gil_disabled():
    # A fresh interpreter without PYTHON_GIL: a module that did not declare gil_used = false
    # would turn the GIL back on at import (and warn, which is an error here).
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    code = (
        "import sys, warnings\n"
        "warnings.simplefilter('error')\n"
        "import segcache\n"
        "c = segcache.Cache(heap_size='8MiB')\n"
        "c[b'k'] = b'v'\n"
        "print(sys._is_gil_enabled(), c[b'k'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "b'v'"]


def test_threads_share_one_cache_without_the_gil():
    assert not sys._is_gil_enabled()
    c = segcache.Cache(heap_size="8MiB", eviction="none")
    c.set(b"n", b"0")
    errors = []

    def worker(i):
        try:
            for j in range(500):
                c.set(f"{i}:{j}".encode(), bytes([i]) * (j % 100))
                c.incr(b"n")
                assert c.get(f"{i}:{j}".encode()) == bytes([i]) * (j % 100)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert c.get(b"n") == b"4000"
