//! The crash test of `crash.rs` with a flash tier: a child process writes, overwrites and deletes
//! into a heap small enough that eviction sends most items to the tier, logging every acknowledged
//! operation; the parent kills it with SIGKILL at random moments, reopens the heap file and the
//! tier file (crash recovery) and checks them against the log: no value older than the latest
//! acknowledged one, no deleted key back, and many items served from flash.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use segcache_core::{Builder, Policy, Segcache, SharedCache, Stats};

#[path = "common/ack_log.rs"]
mod ack_log;

use ack_log::{replay, State};

const KEYS: u64 = 6000;
const CHILD_ENV: &str = "SEGCACHE_TIER_CRASH_CHILD";

/// The cache under test: the sharded handle, or the single-owner engine.
enum Cache {
    Shared(SharedCache),
    Single(Box<Segcache>),
}

impl Cache {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        match self {
            Cache::Shared(c) => c.get(key).map(|it| it.value),
            Cache::Single(c) => c.get(key).map(|it| it.value().to_vec()),
        }
    }

    fn set(&mut self, key: &[u8], value: &[u8], ttl: Duration) -> segcache_core::Result<()> {
        match self {
            Cache::Shared(c) => c.set(key, value, 0, ttl),
            Cache::Single(c) => c.set(key, value, 0, ttl),
        }
    }

    fn delete(&mut self, key: &[u8]) {
        let _ = match self {
            Cache::Shared(c) => c.delete(key),
            Cache::Single(c) => c.delete(key),
        };
    }

    fn stats(&self) -> Stats {
        match self {
            Cache::Shared(c) => c.stats(),
            Cache::Single(c) => c.stats(),
        }
    }
}

/// A heap of 256 KiB per shard over a tier of 1 MiB per shard: the sharded handle evicting by
/// merges, the single owner by whole segments. Without a write queue (`lossless`) the tier is
/// large enough never to reclaim a segment and the table to hold every key, so that nothing
/// acknowledged leaves the cache: each eviction writes its items to the tier itself.
fn open(path: &PathBuf, shared: bool, lossless: bool) -> Cache {
    let tier = PathBuf::from(format!("{}.tier", path.display()));
    let mut b = Builder::new().segment_size(32 << 10).path(path);
    if lossless {
        b = b.tier_write_queue(0).hash_power(if shared { 11 } else { 13 });
    }
    let flash = if lossless { 64 << 20 } else { 1 << 20 };
    if shared {
        let b = b.shards(4).heap_size(1 << 20).eviction(Policy::Merge).tier(tier, 4 * flash);
        Cache::Shared(b.build_shared().expect("open"))
    } else {
        Cache::Single(Box::new(b.heap_size(256 << 10).eviction(Policy::Fifo).tier(tier, flash).build().expect("open")))
    }
}

/// A value of `key`'s `version`, of one of 200 lengths.
fn value(key: u64, version: u64) -> Vec<u8> {
    let mut v = format!("{key}:{version}:").into_bytes();
    v.resize(60 + (version % 200) as usize, b'a' + (version % 26) as u8);
    v
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// The child: runs until killed. Log lines: `B <op>` before an operation, `A` after it returns.
#[test]
fn tier_crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let mut parts = spec.split(',');
    let path = PathBuf::from(parts.next().unwrap());
    let log_path = PathBuf::from(parts.next().unwrap());
    let mut version: u64 = parts.next().unwrap().parse().unwrap();
    let shared = parts.next().unwrap() == "1";
    let lossless = parts.next().unwrap() == "1";
    let mut cache = open(&path, shared, lossless);
    let mut log = std::fs::OpenOptions::new().append(true).create(true).open(&log_path).unwrap();
    let mut rng = version.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    loop {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = rng % KEYS;
        version += 1;
        let k = format!("key{key}");
        match rng >> 60 {
            0 => {
                log.write_all(format!("B D {key}\n").as_bytes()).unwrap();
                cache.delete(k.as_bytes());
            }
            1 => {
                // Expires in 1-2 s: must not be served once its time has passed.
                let at = now() + 2;
                log.write_all(format!("B T {key} {version} {at}\n").as_bytes()).unwrap();
                cache.set(k.as_bytes(), &value(key, version), Duration::from_secs(2)).unwrap();
            }
            _ => {
                log.write_all(format!("B S {key} {version}\n").as_bytes()).unwrap();
                if let Err(e) = cache.set(k.as_bytes(), &value(key, version), Duration::ZERO) {
                    panic!("set failed: {e}");
                }
            }
        }
        log.write_all(b"A\n").unwrap();
    }
}

#[test]
fn kill9_with_a_tier_serves_no_stale_value_resurrects_nothing_and_comes_back_warm() {
    crash_rounds(false);
}

#[test]
fn kill9_without_a_write_queue_loses_nothing_acknowledged() {
    crash_rounds(true);
}

/// Kills a child writing to the cache ten times, for the sharded handle and the single owner, and
/// checks what each reopen serves against the log. `lossless`: see `open`; every acknowledged
/// item not expired must then be served.
fn crash_rounds(lossless: bool) {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let dir = std::env::temp_dir().join(format!("segcache-tier-crash-{}-{lossless}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = 0x0123_4567_89ab_cdefu64 ^ u64::from(std::process::id());
    for shared in [true, false] {
        let path = dir.join(format!("heap-{shared}"));
        let log_path = dir.join(format!("log-{shared}"));
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&log_path);
        let mut next_version = 0;
        let mut checked = 0;
        let mut from_flash = 0;
        for _round in 0..10 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut child = Command::new(&exe)
                .args(["tier_crash_child", "--exact", "--nocapture", "--test-threads=1"])
                .env(
                    CHILD_ENV,
                    format!(
                        "{},{},{},{},{}",
                        path.display(),
                        log_path.display(),
                        next_version,
                        u8::from(shared),
                        u8::from(lossless)
                    ),
                )
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            // Most rounds: let it open (and recover) the file and write for a random while. One in
            // four: kill it at once, possibly while it opens or recovers.
            if !rng.is_multiple_of(4) {
                let start_len = std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
                let deadline = Instant::now() + Duration::from_secs(30);
                while std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0) < start_len + 64 * 1024
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            std::thread::sleep(Duration::from_millis(rng % 300));
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let (state, pending, max_version) = replay(&log);
            next_version = max_version + 1_000_000;
            let cache = open(&path, shared, lossless);
            let on_flash = cache.stats().flash_items;
            let t = now();
            for key in 0..KEYS {
                let got = cache.get(format!("key{key}").as_bytes());
                let acked = state.get(&key).cloned().unwrap_or(State::Absent);
                let in_flight = pending.as_ref().filter(|(k, _)| *k == key).map(|(_, s)| s.clone());
                // A value may be gone (evicted from the tier, or dropped by the crash), never older.
                // Without a write queue nothing leaves, but what expires (maybe a little early).
                let allowed = |s: &State, got: &Option<Vec<u8>>| match (s, got) {
                    (State::Value(_, 0), None) => !lossless,
                    (_, None) => true,
                    (State::Absent, Some(_)) => false,
                    (State::Value(v, _), Some(item)) => *item == value(key, *v),
                };
                // Expired values must not be served; unexpired ones may expire up to 3 s early.
                let expired = |s: &State| matches!(s, State::Value(_, at) if *at != 0 && t >= *at);
                let ok = [Some(acked.clone()), in_flight].into_iter().flatten().any(|s| {
                    if expired(&s) {
                        got.is_none()
                    } else {
                        allowed(&s, &got)
                    }
                });
                assert!(
                    ok,
                    "key{key}: got {:?}, acknowledged {acked:?}, in flight {pending:?}",
                    got.map(|v| String::from_utf8_lossy(&v).into_owned())
                );
                checked += 1;
                // The next child appends to the same log: record how the in-flight operation
                // turned out, so that later rounds replay the state the cache really holds.
                if let Some((k, s)) = pending.as_ref().filter(|(k, _)| *k == key) {
                    let resolved = match (&got, s) {
                        (Some(item), State::Value(v, at)) if *item == value(key, *v) => {
                            format!("R S {k} {v} {at}\n")
                        }
                        (Some(_), _) => match &acked {
                            State::Value(v, at) => format!("R S {k} {v} {at}\n"),
                            State::Absent => format!("R D {k}\n"),
                        },
                        (None, _) => format!("R D {k}\n"),
                    };
                    std::fs::OpenOptions::new()
                        .append(true)
                        .open(&log_path)
                        .unwrap()
                        .write_all(resolved.as_bytes())
                        .unwrap();
                }
            }
            let hits = cache.stats().flash_hits;
            assert!(hits <= on_flash, "{hits} flash hits of {on_flash} flash items");
            from_flash += hits;
            drop(cache);
        }
        assert!(checked > 0);
        // Most rounds end with a tier full of items: a good part must come back from it.
        assert!(from_flash > 5000, "{from_flash} reads served from flash after the crashes");
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert!(log.lines().filter(|l| *l == "A").count() > 1000, "the child did real work");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
