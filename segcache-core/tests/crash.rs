//! A real crash test: a child process writes, overwrites and deletes under load, logging every
//! acknowledged operation; the parent kills it with SIGKILL at random moments, reopens the file
//! (crash recovery) and checks it against the log.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use segcache_core::{Builder, Policy, SharedCache};

#[path = "common/ack_log.rs"]
mod ack_log;

use ack_log::{replay, State};

const KEYS: u64 = 2000;
const CHILD_ENV: &str = "SEGCACHE_CRASH_CHILD";

fn open(path: &PathBuf, evicting: bool) -> SharedCache {
    let b = Builder::new().segment_size(64 << 10).shards(4).path(path);
    if evicting { b.heap_size(1 << 20).eviction(Policy::Merge) } else { b.heap_size(64 << 20).eviction(Policy::None) }
        .build_shared()
        .expect("open")
}

/// A value of `key`'s `version`: of one length in every version when `fixed` (so most sets
/// rewrite the old record in place), of one of 200 lengths otherwise (so most append).
fn value(key: u64, version: u64, fixed: bool) -> Vec<u8> {
    let mut v = format!("{key}:{version}:").into_bytes();
    let len = if fixed { 48 } else { 40 + (version % 200) as usize };
    v.resize(len, b'a' + (version % 26) as u8);
    v
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// The child: runs until killed. Log lines: `B <op>` before an operation, `A` after it returns.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let mut parts = spec.split(',');
    let path = PathBuf::from(parts.next().unwrap());
    let log_path = PathBuf::from(parts.next().unwrap());
    let mut version: u64 = parts.next().unwrap().parse().unwrap();
    let evicting = parts.next().unwrap() == "1";
    let fixed = parts.next().unwrap() == "1";
    let cache = open(&path, evicting);
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
            0..=1 => {
                log.write_all(format!("B D {key}\n").as_bytes()).unwrap();
                let _ = cache.delete(k.as_bytes());
            }
            2 => {
                // Expires in 1-2 s: must not be served once its time has passed.
                let at = now() + 2;
                log.write_all(format!("B T {key} {version} {at}\n").as_bytes()).unwrap();
                cache.set(k.as_bytes(), &value(key, version, fixed), 0, Duration::from_secs(2)).unwrap();
            }
            _ => {
                log.write_all(format!("B S {key} {version}\n").as_bytes()).unwrap();
                if let Err(e) = cache.set(k.as_bytes(), &value(key, version, fixed), 0, Duration::ZERO) {
                    panic!("set failed: {e}");
                }
            }
        }
        log.write_all(b"A\n").unwrap();
    }
}

#[test]
fn kill9_at_random_moments_loses_nothing_acknowledged_and_resurrects_nothing() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let dir = std::env::temp_dir().join(format!("segcache-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = 0x0123_4567_89ab_cdefu64 ^ u64::from(std::process::id());
    // Appends without and with eviction, then rewrites in place (`fixed`).
    for (evicting, fixed) in [(false, false), (true, false), (false, true)] {
        let path = dir.join(format!("heap-{evicting}-{fixed}"));
        let log_path = dir.join(format!("log-{evicting}-{fixed}"));
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&log_path);
        let mut next_version = 0;
        let mut checked = 0;
        for _round in 0..12 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut child = Command::new(&exe)
                .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
                .env(
                    CHILD_ENV,
                    format!(
                        "{},{},{},{},{}",
                        path.display(),
                        log_path.display(),
                        next_version,
                        u8::from(evicting),
                        u8::from(fixed)
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
                while std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0) < start_len + 4096
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
            let cache = open(&path, evicting);
            let t = now();
            for key in 0..KEYS {
                let got = cache.get(format!("key{key}").as_bytes());
                let acked = state.get(&key).cloned().unwrap_or(State::Absent);
                let in_flight = pending.as_ref().filter(|(k, _)| *k == key).map(|(_, s)| s.clone());
                let allowed = |s: &State, got: &Option<segcache_core::OwnedItem>| match (s, got) {
                    (State::Absent, None) => true,
                    (State::Absent, Some(_)) => false,
                    (State::Value(..), None) => false,
                    (State::Value(v, _), Some(item)) => item.value == value(key, *v, fixed),
                };
                // Expired values must not be served; unexpired ones may expire up to 3 s early.
                let expired = |s: &State| matches!(s, State::Value(_, at) if *at != 0 && t >= *at);
                let may_be_gone = |s: &State| matches!(s, State::Value(_, at) if *at != 0 && t + 3 >= *at);
                let ok = [Some(acked.clone()), in_flight].into_iter().flatten().any(|s| {
                    if expired(&s) {
                        got.is_none()
                    } else {
                        allowed(&s, &got) || (got.is_none() && (may_be_gone(&s) || evicting))
                    }
                });
                assert!(
                    ok,
                    "key{key}: got {:?}, acknowledged {acked:?}, in flight {pending:?}",
                    got.map(|i| String::from_utf8_lossy(&i.value).into_owned())
                );
                checked += 1;
                // The next child appends to the same log: record how the in-flight operation
                // turned out, so that later rounds replay the state the cache really holds.
                if let Some((k, s)) = pending.as_ref().filter(|(k, _)| *k == key) {
                    let resolved = match (&got, s) {
                        (Some(item), State::Value(v, at)) if item.value == value(key, *v, fixed) => {
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
            drop(cache);
        }
        assert!(checked > 0);
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert!(log.lines().filter(|l| *l == "A").count() > 1000, "the child did real work");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
