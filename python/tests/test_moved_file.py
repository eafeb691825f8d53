"""Moving a cache: a heap file copied to another directory (what another machine with the same
settings is given) opens there with every item, whether it was closed or left open by a process
killed with SIGKILL; a copy opened with another heap size is refused and left as it was."""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

import segcache

ITEMS = {b"moved-%d" % i: b"value %d " % i * (i % 20 + 1) for i in range(3000)}


def open_cache(path, **kw):
    kw.setdefault("heap_size", "8MiB")
    kw.setdefault("segment_size", "64KiB")
    return segcache.Cache(path=path, **kw)


def holds_every_item(c) -> None:
    assert len(c) == len(ITEMS) + 1
    assert c.get_many(list(ITEMS)) == ITEMS
    value, flags, _cas, ttl = c.get_item(b"flagged")
    assert (value, flags) == (b"v", 77) and 3500 < ttl <= 3600


def test_a_closed_file_copied_elsewhere_opens_warm(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    with open_cache(here / "heap") as c:
        c.set_many(ITEMS)
        c.set(b"flagged", b"v", flags=77, ttl=3600)
    shutil.copyfile(here / "heap", there / "moved")
    shutil.rmtree(here)
    with open_cache(there / "moved") as c:
        holds_every_item(c)


def test_a_file_left_by_a_killed_process_copied_elsewhere_is_recovered(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    # A child fills the cache, says so, and waits to be killed: it never closes the file.
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        import segcache
        c = segcache.Cache(path={str(here / "heap")!r}, heap_size="8MiB", segment_size="64KiB")
        c.set_many({{b"moved-%d" % i: b"value %d " % i * (i % 20 + 1) for i in range(3000)}})
        c.set(b"flagged", b"v", flags=77, ttl=3600)
        print("filled", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "filled\n"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    shutil.copyfile(here / "heap", there / "moved")
    with open_cache(there / "moved") as c:
        holds_every_item(c)


def test_a_copy_opened_with_another_heap_size_is_refused_and_left_as_it_was(tmp_path):
    with open_cache(tmp_path / "heap") as c:
        c.set_many(ITEMS)
        c.set(b"flagged", b"v", flags=77, ttl=3600)
    copy = tmp_path / "copy"
    shutil.copyfile(tmp_path / "heap", copy)
    before = hashlib.sha256(copy.read_bytes()).digest()
    with pytest.raises(segcache.BadFile, match="heap size is 8388608 bytes in the file, 16777216 in this cache"):
        open_cache(copy, heap_size="16MiB")
    assert hashlib.sha256(copy.read_bytes()).digest() == before
    with open_cache(copy) as c:
        holds_every_item(c)
