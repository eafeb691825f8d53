"""A Cache inherited across os.fork() refuses every method in the child with ForkedError (reads
included, never a silent miss), leaves the parent's cache and file as they were, and a cache
opened in the child works."""

import os
import time
import traceback

import pytest

import segcache
from conftest import threads_named

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

N = 1000


def in_child(fn):
    """Runs `fn()` in a fork child and returns the child's exit status: 0 when `fn` returned
    True, 1 otherwise (a traceback goes to stderr). The child ends with os._exit, so nothing of
    the parent's (pytest, the cache objects) is torn down there."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if fn() is True else 1
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), status
    return os.WEXITSTATUS(status)


def fill(c):
    for i in range(N):
        c.set(f"p{i}", f"value-{i}".encode(), flags=i)
    c.set("k", b"parent", flags=1)
    c.set("n", b"1")


def intact(c):
    for i in range(N):
        value, flags, _, _ = c.get_item(f"p{i}")
        assert (value, flags) == (f"value-{i}".encode(), i)
    assert c.get_item("k")[:2] == (b"parent", 1)


def every_method(c):
    """Each method of `c` once, as (name, call)."""
    return [
        ("get", lambda: c.get("k")),
        ("get absent", lambda: c.get("absent", b"default")),
        ("gets", lambda: c.gets("k")),
        ("get_item", lambda: c.get_item("k")),
        ("get_and_touch", lambda: c.get_and_touch("k", 10)),
        ("get_many", lambda: c.get_many(["k", "n"])),
        ("getitem", lambda: c["k"]),
        ("contains", lambda: "k" in c),
        ("len", lambda: len(c)),
        ("stats", lambda: c.stats()),
        ("now", lambda: c.now()),
        ("set", lambda: c.set("k", b"child")),
        ("set new", lambda: c.set("new", b"child")),
        ("setitem", lambda: c.__setitem__("k", b"child")),
        ("add", lambda: c.add("added", b"child")),
        ("replace", lambda: c.replace("k", b"child")),
        ("cas", lambda: c.cas("k", b"child", 1)),
        ("append", lambda: c.append("k", b"x")),
        ("prepend", lambda: c.prepend("k", b"x")),
        ("incr", lambda: c.incr("n")),
        ("decr", lambda: c.decr("n")),
        ("touch", lambda: c.touch("k", 10)),
        ("delete", lambda: c.delete("k")),
        ("delitem", lambda: c.__delitem__("k")),
        ("set_many", lambda: c.set_many({"k": b"child"})),
        ("set_many empty", lambda: c.set_many({})),
        ("delete_many", lambda: c.delete_many(["k"])),
        ("delete_many empty", lambda: c.delete_many([])),
        ("flush", lambda: c.flush()),
        ("flush later", lambda: c.flush(delay=5)),
        ("expire", lambda: c.expire()),
        ("enter", lambda: c.__enter__()),
        ("contains non-key", lambda: 1 in c),
        ("iter", lambda: iter(c)),
        ("keys", lambda: list(c.keys())),
        ("values", lambda: list(c.values())),
        ("items", lambda: list(c.items())),
        ("pop", lambda: c.pop("k")),
        ("pop default", lambda: c.pop("absent", None)),
        ("popitem", lambda: c.popitem()),
        ("setdefault", lambda: c.setdefault("k", b"child")),
        ("update", lambda: c.update({"k": b"child"})),
        ("update empty", lambda: c.update()),
        ("clear", lambda: c.clear()),
    ]


def child_is_refused(c):
    for name, call in every_method(c):
        try:
            call()
        except segcache.ForkedError as e:
            assert isinstance(e, segcache.Error) and "fork" in str(e), (name, e)
        else:
            raise AssertionError(f"{name} worked on an inherited cache")
    assert "forked" in repr(c)
    # close() lets the child's copy go (the parent's file is left alone) and says why
    with pytest.raises(segcache.ForkedError):
        c.close()
    assert c.closed
    with pytest.raises(segcache.Closed):
        c.get("k")
    c.close()  # idempotent now
    # a cache opened in the child works
    with segcache.Cache(heap_size="4MiB", segment_size="256KiB") as mine:
        mine["k"] = b"mine"
        assert mine["k"] == b"mine" and len(mine) == 1
    return True


@pytest.mark.parametrize("use_file", [False, True], ids=["anonymous", "file"])
def test_inherited_cache_refuses_every_method_in_the_child(tmp_path, use_file):
    path = tmp_path / "cache.dat" if use_file else None
    kw = dict(heap_size="4MiB", segment_size="256KiB", shards=2)
    c = segcache.Cache(path=path, **kw)
    fill(c)
    assert in_child(lambda: child_is_refused(c)) == 0
    # the parent's cache is as it was, and works
    intact(c)
    assert c.incr("n") == 2
    assert len(c) == N + 2
    c.set("after", b"fork")
    c.close()
    if path is not None:  # the child did not seal or change the file: it reopens warm
        with segcache.Cache(path=path, **kw) as c:
            intact(c)
            assert c["after"] == b"fork" and c["n"] == b"2"


def test_dropping_the_inherited_cache_in_the_child_is_silent(tmp_path):
    path = tmp_path / "cache.dat"
    kw = dict(heap_size="4MiB", segment_size="256KiB", shards=2)
    c = segcache.Cache(path=path, **kw)
    fill(c)

    def child():
        nonlocal c
        del c  # the child's copy goes with no error and no write to the file
        import gc

        gc.collect()
        return True

    assert in_child(child) == 0
    intact(c)
    c.close()
    with segcache.Cache(path=path, **kw) as c:
        intact(c)


def test_forked_error_is_exported():
    assert segcache.ForkedError is segcache._errors.ForkedError
    assert "ForkedError" in segcache.__all__
    assert issubclass(segcache.ForkedError, segcache.Error)
    assert issubclass(segcache.ForkedError, RuntimeError)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc/self/task")
def test_the_touch_ahead_thread_stays_the_parents():
    """A fork() child has the parent's cache but not the thread that faults its heap in: the
    child's close() and drop neither wait for that thread nor stop the parent's; a cache the
    child opens has a thread of its own."""

    def toucher_threads():
        return threads_named("segcache-ahead")

    def eventually(predicate):
        """A new thread names itself once it runs: poll for up to ten seconds."""
        deadline = time.monotonic() + 10
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.005)
        return predicate()

    c = segcache.Cache(heap_size="64MiB", segment_size="1MiB", shards=2)
    if c.touch_ahead() is None:
        pytest.skip("this kernel cannot populate memory (Linux before 5.14)")
    fill(c)
    assert eventually(lambda: toucher_threads() >= 1)  # (other tests' caches may have theirs)

    def child():
        # The child has only the thread that forked: counts here are exact.
        assert toucher_threads() == 0
        with pytest.raises(segcache.ForkedError):
            c.close()
        with segcache.Cache(heap_size="8MiB", segment_size="1MiB", shards=1) as mine:
            assert eventually(lambda: toucher_threads() == 1)
            mine["k"] = b"mine"
            assert mine["k"] == b"mine"
        return toucher_threads() == 0

    assert in_child(child) == 0
    intact(c)
    c.close()  # joins the parent's thread, which the child left alone
