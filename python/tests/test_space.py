"""A persistence file on a filesystem too small for the heap: `Cache(...)` raises
`segcache.NoSpace` (an OSError) naming the path and the sizes, never a crash later in `set()`;
`sync()` writes the heap to the file. The small filesystem is a tmpfs mounted here (root only)."""

import os
import subprocess

import pytest

import segcache


@pytest.fixture
def small_fs(tmp_path):
    """A 20 MiB tmpfs, unmounted afterwards."""
    d = tmp_path / "small"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(d)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (root needed): {r.stderr.decode().strip()}")
    yield d
    subprocess.run(["umount", "-l", str(d)], check=True)


@pytest.mark.parametrize("multi_process", [False, True])
def test_a_heap_larger_than_the_filesystem_is_refused(small_fs, multi_process):
    path = small_fs / "heap"
    with pytest.raises(segcache.NoSpace) as e:
        segcache.Cache(heap_size="64MiB", path=path, multi_process=multi_process)
    assert isinstance(e.value, OSError) and isinstance(e.value, segcache.PersistenceError)
    msg = str(e.value)
    assert str(path) in msg and "free" in msg
    # A heap that fits opens over what the refused one left, and every page of it can be written.
    c = segcache.Cache(heap_size="8MiB", path=path, multi_process=multi_process)
    value = b"v" * 100_000
    for i in range(200):
        c.set(b"k%d" % i, value)
    assert c.get(b"k199") == value
    c.close()


def test_sync_writes_the_heap_to_the_file(tmp_path):
    path = tmp_path / "heap"
    c = segcache.Cache(heap_size="8MiB", path=path)
    c.set(b"k", b"a value only the heap holds")
    c.sync()
    assert b"a value only the heap holds" in path.read_bytes()
    c.close()
    with pytest.raises(segcache.Closed):
        c.sync()
    segcache.Cache(heap_size="8MiB").sync()  # nothing to write
