"""`Cache(path=..., multi_process=True)`: processes share one cache through its file.

A pre-fork pool (the parent opens, `os.fork()`ed workers use the inherited cache), processes
started with multiprocessing's "spawn" method that open the path themselves, workers SIGKILLed
at random while they write, and what may not share a file. Every value is checksummed and names
its key, writer and version, so a torn or foreign value is caught wherever it is read."""

import faulthandler
import hashlib
import multiprocessing
import os
import random
import signal
import time
import traceback

import pytest

import segcache

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

KEYS = 128
# Seconds a worker process may run before SIGALRM ends it (a hang fails the test), and a whole
# test before faulthandler ends the test process (a hang in the parent, whose spin in the
# engine would never return to run a Python signal handler).
WORKER_ALARM = 120
TEST_DEADLINE = 400


def settings(path, **kw):
    """Cache arguments: one set for every process of a test, changed by `kw`."""
    return {**dict(path=path, heap_size="8MiB", segment_size="256KiB", shards=4, multi_process=True), **kw}


def make_value(key, writer, version):
    """`key|writer|version|`, a payload of 16 to 1515 bytes (both sides of the engine's 512-byte
    lock-free read) that follows from those three, then the BLAKE2b of all that in hex."""
    head = f"{key}|{writer}|{version}|".encode()
    seed = hashlib.blake2b(head, digest_size=8).digest()
    payload = hashlib.shake_128(head).digest(16 + int.from_bytes(seed, "little") % 1500)
    body = head + payload
    return body + hashlib.blake2b(body, digest_size=8).hexdigest().encode()


def parse(key, value):
    """(writer, version) of a whole value made by `make_value` for `key`; None otherwise."""
    try:
        k, writer, version, _ = value.split(b"|", 3)
        writer, version = int(writer), int(version)
    except ValueError:
        return None
    if k.decode() != key or make_value(key, writer, version) != value:
        return None
    return writer, version


class Log:
    """A worker's reference log: `started KEY VERSION` before each set, `acked KEY VERSION` once
    it returned, flushed at once (a SIGKILL loses nothing written)."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, what, key, version):
        os.write(self.fd, f"{what} {key} {version}\n".encode())


def read_logs(log_dir, workers):
    """{(kind, key, writer): {versions}} from the workers' logs."""
    seen = {}
    for w in workers:
        p = log_dir / f"{w}.log"
        if not p.exists():
            continue
        for line in p.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:  # a SIGKILL may cut the last line short
                seen.setdefault((parts[0], parts[1], w), set()).add(int(parts[2]))
    return seen


def work(c, writer, log_dir, ops, seed):
    """A stream of gets and sets of checksummed values over keys mp-0..mp-127 through `c`;
    `ops` None: until killed. Returns the wrong results seen (a value not whole, not for its key,
    or an error)."""
    rng = random.Random(seed)
    log = Log(log_dir / f"{writer}.log")
    versions = [0] * KEYS
    bad = []
    n = 0
    while (ops is None or n < ops) and len(bad) < 10:
        n += 1
        k = rng.randrange(KEYS)
        key = f"mp-{k}"
        try:
            if rng.random() < 0.35:
                versions[k] += 1
                log.write("started", key, versions[k])
                c.set(key, make_value(key, writer, versions[k]), flags=writer)
                log.write("acked", key, versions[k])
            else:
                got = c.get_item(key)
                if got is not None and (parse(key, got[0]) is None or parse(key, got[0])[0] != got[1]):
                    bad.append(f"{key}: wrong value {got[0][:40]!r}, flags {got[1]}")
        except Exception as e:  # noqa: BLE001 - every error is a wrong result here
            bad.append(f"{key}: {type(e).__name__}: {e}")
    return bad


def fork_worker(fn):
    """Runs `fn()` in an os.fork() child, which exits 0 when it returns an empty list (what it
    returns otherwise is printed) and is ended by SIGALRM if it hangs. Returns the pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(WORKER_ALARM)
            bad = fn()
            for b in bad:
                print("worker:", b, flush=True)
            code = 0 if not bad else 1
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def wait_exit(pid, deadline):
    """The child's wait status; fails (after killing it) if it is not over by `deadline`."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"worker {pid} hangs")
        time.sleep(0.005)


def check_all(c, seen, versions_of):
    """Every key's value in `c`: whole, for its key, with its writer's flags, and a version in
    that writer's log (`versions_of`: "acked" or "started"). Returns how many keys hold one."""
    present = 0
    for k in range(KEYS):
        key = f"mp-{k}"
        got = c.get_item(key)
        if got is None:
            continue
        wv = parse(key, got[0])
        assert wv is not None, f"{key}: not a whole value: {got[0][:60]!r}"
        writer, version = wv
        assert got[1] == writer, f"{key}: flags {got[1]}, written by {writer}"
        assert version in seen.get((versions_of, key, writer), ()), f"{key}: {wv} was never {versions_of}"
        present += 1
    return present


@pytest.fixture
def deadline():
    """Ends the test process (a failure) if the test hangs, even inside the engine."""
    faulthandler.dump_traceback_later(TEST_DEADLINE, exit=True)
    yield time.monotonic() + TEST_DEADLINE - 30
    faulthandler.cancel_dump_traceback_later()


def test_pre_fork_pool_shares_one_cache(tmp_path, deadline):
    path = tmp_path / "cache.dat"
    c = segcache.Cache(**settings(path))
    assert c.multi_process
    def worker(w):
        bad = work(c, w, tmp_path, 2000, w)
        c.close()  # leaves the cache; the parent and the other workers go on
        return bad

    pids = {w: fork_worker(lambda w=w: worker(w)) for w in range(4)}
    for w, pid in pids.items():
        status = wait_exit(pid, deadline)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (w, status)
    seen = read_logs(tmp_path, pids)
    assert sum(len(v) for (kind, _, _), v in seen.items() if kind == "acked") > 1000
    present = check_all(c, seen, "acked")
    assert present > KEYS // 2, "the workers' writes reach the parent's cache"
    # the parent writes on, then leaves last: a single-process open finds the file clean
    c.set("parent", b"after the pool")
    c.close()
    with segcache.Cache(**settings(path, multi_process=False)) as again:
        assert check_all(again, seen, "acked") == present
        assert again.get("parent") == b"after the pool"


def spawned_worker(path, wid):
    """In a process started with the "spawn" method: opens `path` itself, reads the parent's
    value, stores sp-WID-0..199 and reads the other workers' keys. Returns the wrong results."""
    bad = []
    with segcache.Cache(**settings(path)) as c:
        if c.get("from-parent") != make_value("from-parent", 99, 1):
            bad.append("the parent's value is not there")
        for i in range(200):
            c.set(f"sp-{wid}-{i}", make_value(f"sp-{wid}-{i}", wid, 1))
        for i in range(200):
            for j in range(3):
                key = f"sp-{j}-{i}"
                v = c.get(key)
                if (v is None and j != wid) or (v is not None and parse(key, v) == (j, 1)):
                    continue
                bad.append(f"{key}: {v if v is None else v[:40]!r}")
    return bad


def test_spawned_processes_open_the_file_by_path(tmp_path, deadline):
    path = tmp_path / "cache.dat"
    c = segcache.Cache(**settings(path))
    c.set("from-parent", make_value("from-parent", 99, 1))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        results = pool.starmap_async(spawned_worker, [(str(path), w) for w in range(3)]).get(timeout=300)
    assert results == [[], [], []]
    for j in range(3):
        for i in range(200):
            assert parse(f"sp-{j}-{i}", c[f"sp-{j}-{i}"]) == (j, 1)
    c.close()
    with segcache.Cache(**settings(path, multi_process=False)) as again:
        assert all(parse(f"sp-{j}-{i}", again[f"sp-{j}-{i}"]) == (j, 1) for j in range(3) for i in range(200))


def test_workers_killed_while_writing_cost_the_others_nothing(tmp_path, deadline):
    path = tmp_path / "cache.dat"
    c = segcache.Cache(**settings(path))
    rng = random.Random(os.getpid())
    rounds, per_round = 12, 3
    writers = []
    present = 0
    for r in range(rounds):
        ws = [r * per_round + j for j in range(per_round)]
        writers += ws
        # the last of each round lives on: it stops after 1500 operations
        pids = [fork_worker(lambda w=w, last=(j == per_round - 1): work(c, w, tmp_path, 1500 if last else None, w))
                for j, w in enumerate(ws)]
        for pid in pids[:-1]:
            time.sleep(rng.uniform(0, 0.03))
            os.kill(pid, signal.SIGKILL)
        for pid in pids[:-1]:
            status = wait_exit(pid, deadline)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
        status = wait_exit(pids[-1], deadline)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        # a killed writer's last set may or may not have landed: "started" is what it may be
        present = check_all(c, read_logs(tmp_path, writers), "started")
    assert present > 0
    c.set("after", b"kills", flags=7)
    assert c.get_item("after")[:2] == (b"kills", 7)
    c.close()
    # a fresh process opens the file: nobody is left holding it
    def fresh():
        with segcache.Cache(**settings(path, multi_process=False)) as again:
            assert again.get("after") == b"kills"
            check_all(again, read_logs(tmp_path, writers), "started")
        return []

    status = wait_exit(fork_worker(fresh), deadline)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    with segcache.Cache(**settings(path)) as shared_again:
        assert shared_again.get("after") == b"kills"


def test_wrong_types_and_settings_are_refused_clearly(tmp_path):
    path = tmp_path / "cache.dat"
    with pytest.raises(TypeError, match="multi_process"):
        segcache.Cache(path=path, multi_process="yes")
    with pytest.raises(TypeError, match="multi_process"):
        segcache.Cache(path=path, multi_process=1)
    with pytest.raises(segcache.InvalidConfig, match="path"):
        segcache.Cache(heap_size="8MiB", multi_process=True)
    with pytest.raises(segcache.InvalidConfig, match="lazy_verify"):
        segcache.Cache(**settings(path, lazy_verify=True))
    c = segcache.Cache(**settings(path))
    c.set("k", b"shared")
    with pytest.raises(segcache.BadFile, match="settings"):
        segcache.Cache(**settings(path, eviction="fifo"))
    with pytest.raises(segcache.BadFile):
        segcache.Cache(**settings(path, heap_size="16MiB"))
    with pytest.raises(segcache.Locked):
        segcache.Cache(**settings(path, multi_process=False))
    # a second opener with the same settings joins, as another process would
    with segcache.Cache(**settings(path)) as other:
        assert other.get("k") == b"shared"
    c.close()
    # the reverse: a single-process cache keeps shared openers out
    with segcache.Cache(**settings(path, multi_process=False)) as single:
        assert not single.multi_process
        with pytest.raises(segcache.Locked):
            segcache.Cache(**settings(path))


def test_only_a_multi_process_cache_works_in_a_fork_child(tmp_path):
    for multi in (False, True):
        path = tmp_path / f"cache-{multi}.dat"
        c = segcache.Cache(**settings(path, multi_process=multi))

        def child(c=c, multi=multi):
            try:
                c.set("child", b"wrote")
            except segcache.ForkedError:
                return [] if not multi else ["ForkedError in a multi_process child"]
            c.close()
            return [] if multi else ["no ForkedError without multi_process"]

        status = wait_exit(fork_worker(child), time.monotonic() + 120)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert (c.get("child") == b"wrote") is multi
        c.close()
