//! Processes sharing one cache file (`Builder::multi_process`): workers forked after the open (a
//! pre-fork server) and processes started afresh that open the file by path write and read
//! checksummed values over one key space; workers killed at any instant (mid-write, holding a
//! shard's lock mid-eviction or mid-read, mid-close) cost the others nothing but their own write
//! in flight; the last process to leave closes the file for a warm restart.
//!
//! Every value names its key, writer and version and carries a checksum, so a torn or foreign
//! value is caught wherever it is read. A watchdog fails the test (and kills the workers) if
//! anything hangs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use segcache_core::{Builder, Error, Policy, SharedCache};

/// One test at a time: they fork, and each watches its own children.
static SERIAL: Mutex<()> = Mutex::new(());
/// Children alive, for the watchdog to kill.
static CHILDREN: Mutex<Vec<i32>> = Mutex::new(Vec::new());

const NO_TTL: Duration = Duration::ZERO;

fn tmp(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("segcache-procs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn builder(path: &Path, heap: usize) -> Builder {
    Builder::new().heap_size(heap).segment_size(64 << 10).shards(4).path(path).multi_process(true)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// `[writer u32][version u32][filler][key][checksum u64]`, `len` bytes before the key.
fn value(key: &[u8], writer: u32, version: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + key.len() + 8);
    v.extend_from_slice(&writer.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend((8..len.max(8)).map(|i| (i as u32 ^ version ^ writer) as u8));
    v.extend_from_slice(key);
    let sum = fnv(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

/// (writer, version) of an intact value of `key`; `None` for a torn or foreign one.
fn check(key: &[u8], v: &[u8]) -> Option<(u32, u32)> {
    if v.len() < 16 + key.len() {
        return None;
    }
    let (body, sum) = v.split_at(v.len() - 8);
    if fnv(body) != u64::from_le_bytes(sum.try_into().unwrap()) || !body.ends_with(key) {
        return None;
    }
    Some((u32::from_le_bytes(v[..4].try_into().unwrap()), u32::from_le_bytes(v[4..8].try_into().unwrap())))
}

/// A small deterministic generator (no shared state between processes).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs `child` in a forked child, which ends with `_exit` (0 when `child` returned `true`).
fn fork(child: impl FnOnce() -> bool) -> i32 {
    // SAFETY: the child uses the cache, the allocator and files only, then `_exit`s; the test
    // binary's other threads hold none of their locks (tests here run one at a time).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(false);
        // SAFETY: ends the child at once, without the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    CHILDREN.lock().unwrap().push(pid);
    pid
}

/// Waits for the child; its exit code, or `None` if a signal ended it.
fn wait(pid: i32) -> Option<i32> {
    let mut status = 0;
    // SAFETY: `pid` is this process's child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    CHILDREN.lock().unwrap().retain(|&p| p != pid);
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

fn kill(pid: i32) {
    // SAFETY: `pid` is this process's child, not yet waited for.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Fails the test, killing the workers, if it is not over within `limit`: nobody may wait
/// unboundedly on a process that died.
struct Watchdog(std::sync::Arc<std::sync::atomic::AtomicBool>);
impl Watchdog {
    fn start(limit: Duration) -> Watchdog {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < limit {
                if d.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("watchdog: the test hung for {limit:?}; killing the workers");
            for &pid in CHILDREN.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                kill(pid);
            }
            std::process::abort();
        });
        Watchdog(done)
    }
}
impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What one worker did: the versions it stored (acknowledged), per key, in order.
type Log = HashMap<Vec<u8>, Vec<u32>>;

fn log_path(dir: &Path, writer: u32) -> PathBuf {
    dir.with_extension(format!("log{writer}"))
}

fn save_log(path: &Path, log: &Log) {
    let mut out = String::new();
    for (k, versions) in log {
        for v in versions {
            out.push_str(&format!("{} {v}\n", String::from_utf8_lossy(k)));
        }
    }
    std::fs::write(path, out).unwrap();
}

fn load_log(path: &Path) -> Log {
    let mut log = Log::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let (k, v) = line.split_once(' ').unwrap();
        log.entry(k.as_bytes().to_vec()).or_default().push(v.parse().unwrap());
    }
    log
}

fn private_key(writer: u32, i: u64) -> Vec<u8> {
    format!("w{writer}-{i}").into_bytes()
}
fn shared_key(i: u64) -> Vec<u8> {
    format!("s{i}").into_bytes()
}
fn parent_key(i: u64) -> Vec<u8> {
    format!("p{i}").into_bytes()
}
const PARENT_KEYS: u64 = 300;

/// A worker's stream: sets of private and shared keys (small and large values, so reads both
/// with and without the lock), reads of every kind checked, and the parent's keys read back
/// exactly. Returns `false` at the first wrong value.
fn work(cache: &SharedCache, writer: u32, ops: u32, log: &mut Log) -> bool {
    let mut rng = Rng(0x9e37_79b9 ^ u64::from(writer) << 32 | 1);
    for version in 1..=ops {
        let key = match rng.below(3) {
            0 => private_key(writer, rng.below(40)),
            _ => shared_key(rng.below(80)),
        };
        // Half the stores keep the key's length, so that they rewrite the old record in place.
        let len = match rng.below(8) {
            0 => 700 + rng.below(1500) as usize,
            1..=4 => 48,
            _ => 16 + rng.below(200) as usize,
        };
        match cache.set(&key, &value(&key, writer, version, len), writer, NO_TTL) {
            Ok(_) => log.entry(key).or_default().push(version),
            Err(e) => panic!("worker {writer}: set failed: {e}"),
        }
        let probe = shared_key(rng.below(80));
        if let Some(item) = cache.get(&probe) {
            if check(&probe, &item.value).is_none() {
                eprintln!("worker {writer}: torn or foreign value under {probe:?}");
                return false;
            }
        }
        let p = parent_key(rng.below(PARENT_KEYS));
        if cache.get(&p).map(|i| i.value) != Some(value(&p, 0, 1, 64)) {
            eprintln!("worker {writer}: the parent's key {p:?} is wrong or gone");
            return false;
        }
        let batch: Vec<Vec<u8>> = (0..4).map(|_| shared_key(rng.below(80))).collect();
        let refs: Vec<&[u8]> = batch.iter().map(|k| k.as_slice()).collect();
        for (k, got) in refs.iter().zip(cache.get_many(&refs)) {
            if got.is_some_and(|i| check(k, &i.value).is_none()) {
                eprintln!("worker {writer}: get_many gave a torn or foreign value under {k:?}");
                return false;
            }
        }
    }
    true
}

fn fill_parent_keys(cache: &SharedCache) {
    for i in 0..PARENT_KEYS {
        let k = parent_key(i);
        cache.set(&k, &value(&k, 0, 1, 64), 0, NO_TTL).unwrap();
    }
}

/// After the workers: each one's private keys hold its last acknowledged version, each shared
/// key an intact version that some worker acknowledged, and the parent's keys their values.
fn verify(cache: &SharedCache, logs: &[Log]) {
    for (w, log) in logs.iter().enumerate() {
        for (k, versions) in log {
            let item = cache.get(k).unwrap_or_else(|| panic!("acknowledged key {k:?} is gone"));
            let (writer, version) = check(k, &item.value).unwrap_or_else(|| panic!("torn value under {k:?}"));
            if k.starts_with(b"w") {
                assert_eq!((writer, version), (w as u32, *versions.last().unwrap()), "{k:?}: not the last write");
            } else {
                let acked = logs[writer as usize].get(k).is_some_and(|v| v.contains(&version));
                assert!(acked, "{k:?} holds version {version} of writer {writer}, which was never acknowledged");
            }
        }
    }
    for i in 0..PARENT_KEYS {
        let k = parent_key(i);
        assert_eq!(cache.get(&k).map(|i| i.value), Some(value(&k, 0, 1, 64)), "parent key {k:?}");
    }
}

#[test]
fn workers_forked_after_the_open_share_the_parents_cache() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _watchdog = Watchdog::start(Duration::from_secs(120));
    let path = tmp("prefork");
    let cache = builder(&path, 32 << 20).build_shared().unwrap();
    fill_parent_keys(&cache);
    let before = cache.stats();
    const WORKERS: u32 = 4;
    const OPS: u32 = 3_000;
    let pids: Vec<i32> = (1..=WORKERS)
        .map(|w| {
            let (cache, path) = (&cache, &path);
            fork(move || {
                cache.check_fork().unwrap(); // joins the file as this process
                let mut log = Log::new();
                let ok = work(cache, w, OPS, &mut log);
                save_log(&log_path(path, w), &log);
                ok
            })
        })
        .collect();
    // The parent keeps working beside them.
    let mut own = Log::new();
    assert!(work(&cache, 0, OPS, &mut own));
    for pid in pids {
        assert_eq!(wait(pid), Some(0), "a worker saw a wrong value");
    }
    let mut logs = vec![own];
    logs.extend((1..=WORKERS).map(|w| load_log(&log_path(&path, w))));
    verify(&cache, &logs);
    // The counters live in the file: the parent's stats count every worker's sets and reads.
    let stats = cache.stats();
    let sets: u64 = logs.iter().map(|l| l.values().map(|v| v.len() as u64).sum::<u64>()).sum();
    assert_eq!(stats.sets - before.sets, sets);
    assert!(stats.get_hits - before.get_hits >= u64::from(WORKERS + 1) * u64::from(OPS));
    assert_eq!(stats.evicted_items, 0, "the heap was meant to hold everything");
    cache.close().unwrap();
    // The last to leave closed the file cleanly: a single process reopens it warm.
    let reopened = Builder::new().heap_size(32 << 20).segment_size(64 << 10).shards(4).path(&path).build_shared();
    verify(&reopened.unwrap(), &logs);
    for w in 1..=WORKERS {
        let _ = std::fs::remove_file(log_path(&path, w));
    }
    let _ = std::fs::remove_file(&path);
}

/// A process started afresh (this test binary again) that opens the file by path.
#[test]
fn spawned_worker() {
    let (Ok(path), Ok(w)) = (std::env::var("SEGCACHE_PROCS_PATH"), std::env::var("SEGCACHE_PROCS_WRITER")) else {
        return; // run as a plain test: nothing to do
    };
    let w: u32 = w.parse().unwrap();
    let path = PathBuf::from(path);
    let cache = builder(&path, 32 << 20).build_shared().unwrap();
    let mut log = Log::new();
    let ok = work(&cache, w, 2_000, &mut log);
    save_log(&log_path(&path, w), &log);
    assert!(ok, "worker {w} saw a wrong value");
}

#[test]
fn processes_started_afresh_open_the_file_by_path() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _watchdog = Watchdog::start(Duration::from_secs(120));
    let path = tmp("spawn");
    let cache = builder(&path, 32 << 20).build_shared().unwrap();
    fill_parent_keys(&cache);
    // A single-process cache is kept out while processes share the file, and vice versa.
    let single = Builder::new().heap_size(32 << 20).segment_size(64 << 10).shards(4).path(&path).build_shared();
    assert!(matches!(single, Err(Error::Locked { .. })), "{single:?}");
    // A process with other settings is refused by name.
    let other = builder(&path, 32 << 20).eviction(Policy::Fifo).build_shared();
    assert!(matches!(&other, Err(Error::BadFile { reason, .. }) if reason.contains("policy")), "{other:?}");
    let other = builder(&path, 16 << 20).build_shared();
    assert!(matches!(&other, Err(Error::BadFile { reason, .. }) if reason.contains("heap size")), "{other:?}");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<std::process::Child> = (1..=3)
        .map(|w| {
            std::process::Command::new(&exe)
                .args(["spawned_worker", "--exact", "--nocapture", "--test-threads=1"])
                .env("SEGCACHE_PROCS_PATH", &path)
                .env("SEGCACHE_PROCS_WRITER", w.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a spawned worker failed");
    }
    let mut logs = vec![Log::new()];
    logs.extend((1..=3).map(|w| load_log(&log_path(&path, w))));
    verify(&cache, &logs);
    drop(cache);
    // The last process closed the file cleanly (the header's `clean` word, offset 44).
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(u32::from_le_bytes(bytes[44..48].try_into().unwrap()), 1, "not closed cleanly");
    for w in 1..=3 {
        let _ = std::fs::remove_file(log_path(&path, w));
    }
    let _ = std::fs::remove_file(&path);
}

/// Rounds of workers killed at random instants while they write, read and leave; the parent's
/// keys survive every repair, nothing read is ever wrong, nobody hangs, and the file opens
/// afterwards in a fresh handle.
#[test]
fn workers_killed_at_random_cost_nothing_but_their_write_in_flight() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _watchdog = Watchdog::start(Duration::from_secs(240));
    let path = tmp("kill");
    let cache = builder(&path, 128 << 20).build_shared().unwrap();
    fill_parent_keys(&cache);
    let mut rng = Rng(0x5eed);
    for round in 0..24u32 {
        let pids: Vec<i32> = (0..3u32)
            .map(|i| {
                let (cache, path) = (&cache, &path);
                let writer = 1 + round * 3 + i;
                let leave = i == 2;
                fork(move || {
                    if leave {
                        // Opens its own handle and leaves again and again: killed mid-open or
                        // mid-close too.
                        for n in 0..1_000 {
                            let c = builder(path, 128 << 20).build_shared().unwrap();
                            let k = shared_key(u64::from(n % 80));
                            c.set(&k, &value(&k, writer, n + 1, 32), 0, NO_TTL).unwrap();
                        }
                        return true;
                    }
                    let mut log = Log::new();
                    work(cache, writer, 3_000, &mut log)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(5 + rng.below(40)));
        for &pid in &pids {
            kill(pid);
        }
        for pid in pids {
            // Killed (None), or done with every value right (0).
            let code = wait(pid);
            assert!(matches!(code, None | Some(0)), "round {round}: a worker saw a wrong value");
        }
        // The survivor goes on: every read intact, every one of its own keys there.
        for i in 0..80 {
            let k = shared_key(i);
            if let Some(item) = cache.get(&k) {
                assert!(check(&k, &item.value).is_some(), "round {round}: torn value under {k:?}");
            }
        }
        for i in 0..PARENT_KEYS {
            let k = parent_key(i);
            assert_eq!(cache.get(&k).map(|i| i.value), Some(value(&k, 0, 1, 64)), "round {round}: {k:?}");
        }
        let k = parent_key(round.into());
        cache.set(&k, &value(&k, 0, 1, 64), 0, NO_TTL).unwrap();
    }
    assert_eq!(cache.stats().evicted_items, 0, "the heap was meant to hold everything");
    drop(cache);
    // A fresh process's handle opens what the killed ones left.
    let fresh = builder(&path, 128 << 20).build_shared().unwrap();
    for i in 0..PARENT_KEYS {
        let k = parent_key(i);
        assert_eq!(fresh.get(&k).map(|i| i.value), Some(value(&k, 0, 1, 64)));
    }
    drop(fresh);
    let _ = std::fs::remove_file(&path);
}

/// A worker dies holding a shard's lock: mid-eviction (in the eviction listener, which runs
/// under the lock in the middle of a merge) and mid-read (in a `get_with` closure over a large
/// value, which runs under the lock). The next process to take that lock repairs the shard and
/// goes on; nothing read is wrong.
#[test]
fn a_worker_killed_holding_a_shard_lock_is_recovered_from() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _watchdog = Watchdog::start(Duration::from_secs(120));
    let path = tmp("holder");
    // A small heap, so that writes soon evict (merge) and call the listener.
    let cache = builder(&path, 1 << 20).segment_size(32 << 10).shards(1).build_shared().unwrap();
    let pid = fork(|| {
        cache.check_fork().unwrap();
        cache.set_eviction_listener(Some(segcache_core::RemovalListener::new(|_, _| {
            // SAFETY: ends this process at once, holding the shard's lock, as a SIGKILL would.
            unsafe { libc::raise(libc::SIGKILL) };
        })));
        for n in 0..100_000u32 {
            let k = shared_key(u64::from(n % 5_000));
            cache.set(&k, &value(&k, 1, n + 1, 200), 0, NO_TTL).unwrap();
        }
        false // the listener should have ended it
    });
    assert_eq!(wait(pid), None, "the worker was meant to die in its eviction listener");
    // The parent takes the lock the dead worker held: the shard is rebuilt, the cache goes on.
    for n in 0..20_000u32 {
        let k = shared_key(u64::from(n % 5_000));
        if let Some(item) = cache.get(&k) {
            assert!(check(&k, &item.value).is_some(), "torn value under {k:?}");
        }
        cache.set(&k, &value(&k, 0, n + 1, 200), 0, NO_TTL).unwrap();
    }
    let big = b"big".to_vec();
    cache.set(&big, &value(&big, 0, 1, 4_000), 0, NO_TTL).unwrap();
    let pid = fork(|| {
        cache.get_with(b"big", |_| {
            // SAFETY: as above, holding the shard's lock (a large value is read under it).
            unsafe { libc::raise(libc::SIGKILL) };
        });
        false
    });
    assert_eq!(wait(pid), None, "the worker was meant to die reading");
    assert_eq!(cache.get(&big).map(|i| i.value), Some(value(&big, 0, 1, 4_000)));
    let last = shared_key(4_999);
    assert_eq!(check(&last, &cache.get(&last).unwrap().value), Some((0, 20_000)));
    drop(cache);
    let fresh = builder(&path, 1 << 20).segment_size(32 << 10).shards(1).build_shared().unwrap();
    assert_eq!(fresh.get(&big).map(|i| i.value), Some(value(&big, 0, 1, 4_000)));
    drop(fresh);
    let _ = std::fs::remove_file(&path);
}

/// Outside the mode a fork child still refuses (see `fork.rs`); in it, a child that joins after
/// its parent has left finds the file as the parent left it and carries on alone.
#[test]
fn a_child_outlives_its_parents_handle() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _watchdog = Watchdog::start(Duration::from_secs(60));
    let path = tmp("outlive");
    let cache = builder(&path, 8 << 20).build_shared().unwrap();
    cache.set(b"k", b"parent", 0, NO_TTL).unwrap();
    let (r, w) = {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid out-array of two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        (fds[0], fds[1])
    };
    let pid = fork(|| {
        // Waits until the parent has closed its handle, then uses the inherited one.
        let mut b = [0u8; 1];
        // SAFETY: `r` is the pipe's read end, `b` a valid one-byte buffer.
        unsafe { libc::read(r, b.as_mut_ptr().cast(), 1) };
        let ok = cache.get(b"k").is_some_and(|i| i.value == b"parent")
            && cache.set(b"k", b"child", 0, NO_TTL).is_ok()
            && cache.get(b"k").is_some_and(|i| i.value == b"child");
        // SAFETY: the child's only copy of the handle, dropped once (the child then `_exit`s):
        // it leaves the file last.
        drop(unsafe { std::ptr::read(&cache) });
        ok
    });
    cache.close().unwrap();
    // SAFETY: `w` is the pipe's write end.
    unsafe { libc::write(w, b"x".as_ptr().cast(), 1) };
    assert_eq!(wait(pid), Some(0));
    let reopened = builder(&path, 8 << 20).build_shared().unwrap();
    assert_eq!(reopened.get(b"k").unwrap().value, b"child");
    drop(reopened);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(u32::from_le_bytes(bytes[44..48].try_into().unwrap()), 1, "the child closed it cleanly");
    let _ = std::fs::remove_file(&path);
}

/// Every process sharing the file is killed: the next open finds it as after one process's
/// crash, rebuilds it, and every write acknowledged before the kills is there.
#[test]
fn a_crash_of_every_process_leaves_the_file_recoverable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _watchdog = Watchdog::start(Duration::from_secs(60));
    let path = tmp("all");
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array of two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (r, w) = (fds[0], fds[1]);
    let pids: Vec<i32> = (1..=2u32)
        .map(|writer| {
            let path = &path;
            fork(move || {
                let cache = builder(path, 8 << 20).build_shared().unwrap();
                for i in 0..500 {
                    let k = private_key(writer, i);
                    cache.set(&k, &value(&k, writer, 1, 100), 0, NO_TTL).unwrap();
                }
                // Acknowledged: tell the test, then keep writing other keys until killed.
                // SAFETY: `w` is the pipe's write end.
                unsafe { libc::write(w, b"x".as_ptr().cast(), 1) };
                for n in 0u32.. {
                    let k = shared_key(u64::from(n % 100));
                    cache.set(&k, &value(&k, writer, n + 1, 100), 0, NO_TTL).unwrap();
                }
                false
            })
        })
        .collect();
    for _ in &pids {
        let mut b = [0u8; 1];
        // SAFETY: `r` is the pipe's read end, `b` a valid one-byte buffer.
        assert_eq!(unsafe { libc::read(r, b.as_mut_ptr().cast(), 1) }, 1);
    }
    for &pid in &pids {
        kill(pid);
    }
    for pid in pids {
        assert_eq!(wait(pid), None);
    }
    let cache = builder(&path, 8 << 20).build_shared().unwrap();
    for writer in 1..=2 {
        for i in 0..500 {
            let k = private_key(writer, i);
            assert_eq!(cache.get(&k).map(|i| i.value), Some(value(&k, writer, 1, 100)), "{k:?}");
        }
    }
    for i in 0..100 {
        let k = shared_key(i);
        if let Some(item) = cache.get(&k) {
            assert!(check(&k, &item.value).is_some(), "torn value under {k:?}");
        }
    }
    drop(cache);
    let _ = std::fs::remove_file(&path);
}

/// The kill loop on a heap that writes keep full, so that workers die in the middle of merges
/// and evictions too: every value read stays intact and the survivor's own writes are read back.
#[test]
fn workers_killed_while_the_heap_merges_leave_nothing_wrong() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _watchdog = Watchdog::start(Duration::from_secs(240));
    let path = tmp("merge");
    let open = |path: &Path| builder(path, 2 << 20).segment_size(32 << 10).shards(2).build_shared();
    let cache = open(&path).unwrap();
    let mut rng = Rng(0xfeed);
    for round in 0..60u32 {
        let pids: Vec<i32> = (0..2u32)
            .map(|i| {
                let cache = &cache;
                let writer = 1 + round * 2 + i;
                fork(move || {
                    let mut rng = Rng(u64::from(writer) * 7919 + 1);
                    for version in 1.. {
                        let k = shared_key(rng.below(2_000));
                        cache.set(&k, &value(&k, writer, version, 100 + rng.below(900) as usize), 0, NO_TTL).unwrap();
                        let probe = shared_key(rng.below(2_000));
                        if cache.get(&probe).is_some_and(|item| check(&probe, &item.value).is_none()) {
                            return false;
                        }
                    }
                    true
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(10 + rng.below(60)));
        for &pid in &pids {
            kill(pid);
        }
        for pid in pids {
            assert_eq!(wait(pid), None, "round {round}: a worker saw a wrong value");
        }
        for i in 0..2_000 {
            let k = shared_key(i);
            if let Some(item) = cache.get(&k) {
                assert!(check(&k, &item.value).is_some(), "round {round}: torn value under {k:?}");
            }
        }
        let k = parent_key(u64::from(round));
        cache.set(&k, &value(&k, 0, round + 1, 64), 0, NO_TTL).unwrap();
        assert_eq!(cache.get(&k).map(|i| i.value), Some(value(&k, 0, round + 1, 64)));
    }
    let stats = cache.stats();
    assert!(stats.evicted_items + stats.merged_items > 0, "the heap never filled: {stats:?}");
    drop(cache);
    let fresh = open(&path).unwrap();
    for i in 0..2_000 {
        let k = shared_key(i);
        if let Some(item) = fresh.get(&k) {
            assert!(check(&k, &item.value).is_some(), "torn value under {k:?} after reopening");
        }
    }
    drop(fresh);
    let _ = std::fs::remove_file(&path);
}
