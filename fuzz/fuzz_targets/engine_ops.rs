//! Random operation sequences against the engine, with a moving manual clock. Checks: no panic,
//! and every value returned is the latest one written for its key (never stale, deleted or
//! foreign). Run: `cargo +nightly fuzz run engine_ops`.
#![no_main]

use std::collections::HashMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use segcache_core::{Builder, ManualClock, Policy};

#[derive(Debug, Arbitrary)]
enum Op {
    Set { key: u8, value: Vec<u8>, flags: u32, ttl: u8 },
    Add { key: u8, value: Vec<u8> },
    Replace { key: u8, value: Vec<u8> },
    Cas { key: u8, value: Vec<u8>, stale: bool },
    Append { key: u8, value: Vec<u8> },
    Prepend { key: u8, value: Vec<u8> },
    Incr { key: u8, delta: u64 },
    Decr { key: u8, delta: u64 },
    Delete { key: u8 },
    Touch { key: u8, ttl: u8 },
    Get { key: u8 },
    GetMany { keys: Vec<u8> },
    Flush,
    Expire,
    Advance { secs: u8 },
}

#[derive(Debug, Arbitrary)]
struct Input {
    policy: u8,
    small_heap: bool,
    ops: Vec<Op>,
}

fn key(k: u8) -> Vec<u8> {
    format!("k{}", k % 32).into_bytes()
}

fuzz_target!(|input: Input| {
    let clock = ManualClock::new(1_700_000_000);
    let policy = Policy::ALL[input.policy as usize % Policy::ALL.len()];
    let heap = if input.small_heap { 256 << 10 } else { 4 << 20 };
    let mut c =
        Builder::new().heap_size(heap).segment_size(16 << 10).eviction(policy).clock(clock.clone()).build().unwrap();
    // The latest value written for each key; `None` after a delete or flush. A read may miss
    // (eviction, expiry) but must never return anything else.
    let mut latest: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
    let ttl = |t: u8| Duration::from_secs(u64::from(t % 16));
    for op in input.ops.into_iter().take(500) {
        match op {
            Op::Set { key: k, value, flags, ttl: t } => {
                if c.set(&key(k), &value, flags, ttl(t)).is_ok() {
                    latest.insert(key(k), Some(value));
                }
            }
            Op::Add { key: k, value } => {
                if c.add(&key(k), &value, 0, Duration::ZERO).is_ok() {
                    latest.insert(key(k), Some(value));
                }
            }
            Op::Replace { key: k, value } => {
                if c.replace(&key(k), &value, 0, Duration::ZERO).is_ok() {
                    latest.insert(key(k), Some(value));
                }
            }
            Op::Cas { key: k, value, stale } => {
                let cas = c.get(&key(k)).map(|i| i.cas()).unwrap_or(0);
                let cas = if stale { cas ^ 1 } else { cas };
                if c.cas(&key(k), &value, 0, Duration::ZERO, cas).is_ok() {
                    assert!(!stale, "a stale CAS succeeded");
                    latest.insert(key(k), Some(value));
                }
            }
            ref op @ (Op::Append { key: k, ref value } | Op::Prepend { key: k, ref value }) => {
                let value = value.clone();
                let front = matches!(op, Op::Prepend { .. });
                let before = c.get(&key(k)).map(|i| i.value().to_vec());
                let r = if front { c.prepend(&key(k), &value) } else { c.append(&key(k), &value) };
                if r.is_ok() {
                    let mut v = before.expect("append succeeded on a missing key");
                    if front {
                        v.splice(0..0, value);
                    } else {
                        v.extend_from_slice(&value);
                    }
                    latest.insert(key(k), Some(v));
                }
            }
            ref op @ (Op::Incr { key: k, delta } | Op::Decr { key: k, delta }) => {
                let r = if matches!(op, Op::Incr { .. }) { c.incr(&key(k), delta) } else { c.decr(&key(k), delta) };
                if let Ok(n) = r {
                    latest.insert(key(k), Some(n.to_string().into_bytes()));
                }
            }
            Op::Delete { key: k } => {
                let _ = c.delete(&key(k));
                latest.insert(key(k), None);
            }
            Op::Touch { key: k, ttl: t } => {
                let _ = c.touch(&key(k), ttl(t));
            }
            Op::Get { key: k } => {
                if let Some(item) = c.get(&key(k)) {
                    assert_eq!(
                        Some(Some(item.value().to_vec())),
                        latest.get(&key(k)).cloned(),
                        "stale or foreign value"
                    );
                }
            }
            Op::GetMany { keys } => {
                let ks: Vec<Vec<u8>> = keys.into_iter().take(40).map(key).collect();
                let refs: Vec<&[u8]> = ks.iter().map(|k| k.as_slice()).collect();
                c.get_many_with(&refs, |i, item| {
                    assert_eq!(
                        Some(Some(item.value().to_vec())),
                        latest.get(&ks[i]).cloned(),
                        "stale or foreign value"
                    );
                });
            }
            Op::Flush => {
                c.flush();
                latest.clear();
            }
            Op::Expire => {
                c.expire();
            }
            Op::Advance { secs } => clock.advance(u32::from(secs % 64)),
        }
    }
    assert_eq!(c.stats().items as usize, c.len());
});
