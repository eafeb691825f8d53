//! Model-based test: random operation sequences with a moving clock, checked against a HashMap
//! with expiry, through `Segcache` and `SharedCache`, each with and without a file. Presence may
//! differ only where the engine is allowed to lose an item (eviction, or the documented early
//! expiry: exact in 1-second TTL buckets, within three widths in wider ones); values, flags and
//! CAS semantics never differ.
//!
//! Values and flags are drawn so that one key's records collide in length with different layouts
//! (client flags take 4 bytes only when non-zero: n bytes with flags 0 against n - 4 bytes with
//! flags), which a rewrite in place must tell apart; most operations run within one second.
//! Without eviction, some values are larger than a segment (chunked: `Builder::max_item_size`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use segcache_core::{
    ttl, Builder, Error, ManualClock, OwnedItem, Policy, Segcache, SharedCache, StoreMode, StoreOptions,
};

const T0: u32 = 1_700_000_000;

/// The operations under test, implemented by the engine and the shared handle alike.
trait Api {
    fn get(&mut self, k: &[u8]) -> Option<OwnedItem>;
    fn contains(&mut self, k: &[u8]) -> bool;
    fn get_many(&mut self, ks: &[&[u8]]) -> Vec<Option<OwnedItem>>;
    fn set(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration) -> Result<(), Error>;
    fn add(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration) -> Result<(), Error>;
    fn replace(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration) -> Result<(), Error>;
    fn cas(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration, c: u64) -> Result<(), Error>;
    fn append(&mut self, k: &[u8], v: &[u8]) -> Result<(), Error>;
    fn prepend(&mut self, k: &[u8], v: &[u8]) -> Result<(), Error>;
    fn incr(&mut self, k: &[u8], d: u64) -> Result<u64, Error>;
    fn decr(&mut self, k: &[u8], d: u64) -> Result<u64, Error>;
    fn delete(&mut self, k: &[u8]) -> Result<(), Error>;
    fn touch(&mut self, k: &[u8], t: Duration) -> Result<(), Error>;
    fn get_and_touch(&mut self, k: &[u8], t: Duration) -> Option<OwnedItem>;
    fn flush(&mut self);
    fn expire(&mut self);
    /// A set with a client-chosen CAS value: another layout of the same length (4 bytes more).
    fn set_cas(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration, cas: u64) -> Result<u64, Error>;
    fn invalidate(&mut self, k: &[u8]) -> Result<u64, Error>;
}

macro_rules! forward {
    ($t:ty, $gat:expr) => {
        impl Api for $t {
            fn get(&mut self, k: &[u8]) -> Option<OwnedItem> {
                <$t>::get(self, k).map(|i| i.to_owned())
            }
            fn contains(&mut self, k: &[u8]) -> bool {
                <$t>::contains(self, k)
            }
            fn get_many(&mut self, ks: &[&[u8]]) -> Vec<Option<OwnedItem>> {
                let mut out = vec![None; ks.len()];
                <$t>::get_many_with(self, ks, |i, item| out[i] = Some(item.to_owned()));
                out
            }
            fn set(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration) -> Result<(), Error> {
                <$t>::set(self, k, v, f, t)
            }
            fn add(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration) -> Result<(), Error> {
                <$t>::add(self, k, v, f, t)
            }
            fn replace(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration) -> Result<(), Error> {
                <$t>::replace(self, k, v, f, t)
            }
            fn cas(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration, c: u64) -> Result<(), Error> {
                <$t>::cas(self, k, v, f, t, c)
            }
            fn append(&mut self, k: &[u8], v: &[u8]) -> Result<(), Error> {
                <$t>::append(self, k, v)
            }
            fn prepend(&mut self, k: &[u8], v: &[u8]) -> Result<(), Error> {
                <$t>::prepend(self, k, v)
            }
            fn incr(&mut self, k: &[u8], d: u64) -> Result<u64, Error> {
                <$t>::incr(self, k, d)
            }
            fn decr(&mut self, k: &[u8], d: u64) -> Result<u64, Error> {
                <$t>::decr(self, k, d)
            }
            fn delete(&mut self, k: &[u8]) -> Result<(), Error> {
                <$t>::delete(self, k)
            }
            fn touch(&mut self, k: &[u8], t: Duration) -> Result<(), Error> {
                <$t>::touch(self, k, t)
            }
            fn get_and_touch(&mut self, k: &[u8], t: Duration) -> Option<OwnedItem> {
                $gat(self, k, t)
            }
            fn flush(&mut self) {
                <$t>::flush(self)
            }
            fn expire(&mut self) {
                <$t>::expire(self);
            }
            fn set_cas(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration, cas: u64) -> Result<u64, Error> {
                let opts = StoreOptions { cas: Some(cas), ..StoreOptions::default() };
                <$t>::store_with(self, k, v, f, t, StoreMode::Set, opts)
            }
            fn invalidate(&mut self, k: &[u8]) -> Result<u64, Error> {
                <$t>::invalidate(self, k, None, None, None)
            }
        }
    };
}
forward!(Segcache, |c: &mut Segcache, k: &[u8], t| {
    c.touch(k, t).ok()?;
    c.get(k).map(|i| i.to_owned())
});
forward!(SharedCache, |c: &mut SharedCache, k: &[u8], t| SharedCache::get_and_touch(c, k, t));

#[derive(Debug, Clone, Copy)]
enum CasWith {
    /// The token of the latest read of the key (its success depends on what happened since).
    Latest,
    /// A fresh read's token: must succeed.
    Fresh,
    /// A token no read handed out: must fail.
    Bogus,
}

#[derive(Debug, Clone)]
enum Op {
    Get(u8),
    GetMany(Vec<u8>),
    Set(u8, Vec<u8>, u32, u32),
    Add(u8, Vec<u8>, u32, u32),
    Replace(u8, Vec<u8>, u32, u32),
    Cas(u8, Vec<u8>, u32, u32, CasWith),
    Append(u8, Vec<u8>),
    Prepend(u8, Vec<u8>),
    Incr(u8, u64),
    Decr(u8, u64),
    Delete(u8),
    Touch(u8, u32),
    GetAndTouch(u8, u32),
    Flush,
    Expire,
    Advance(u32),
    SetCas(u8, Vec<u8>, u32, u32),
    Invalidate(u8),
}

fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

/// Non-zero client flags.
fn flags() -> impl Strategy<Value = u32> {
    prop_oneof![Just(1u32), Just(7), Just(u32::MAX), any::<u32>().prop_map(|f| f | 1)]
}

/// A value and its flags whose record is `n` bytes past the header and key: `n` bytes with
/// flags 0, or `n - 4` with flags (the two layouts of one length).
fn colliding(n: impl Strategy<Value = usize>) -> impl Strategy<Value = (Vec<u8>, u32)> {
    (n, any::<bool>(), flags()).prop_flat_map(|(n, flagged, f)| {
        let (len, f) = if flagged { (n - 4, f) } else { (n, 0) };
        (proptest::collection::vec(any::<u8>(), len), Just(f))
    })
}

/// Values and flags; with `large`, a value larger than a 16 KiB segment holds now and then
/// (stored as chunks: see `Builder::max_item_size`).
fn value_flags(large: bool) -> impl Strategy<Value = (Vec<u8>, u32)> {
    let any_flags = prop_oneof![2 => Just(0u32), 1 => flags()];
    prop_oneof![
        4 => colliding(4usize..12),
        2 => colliding(prop_oneof![Just(40usize), Just(44), Just(480), Just(484)]),
        2 => (proptest::collection::vec(any::<u8>(), 0..40), any_flags.clone()),
        2 => (0u64..1000, any_flags.clone(), 0usize..3).prop_map(|(n, f, pad)| (format!("{n}{}", " ".repeat(pad)).into_bytes(), f)),
        1 => (proptest::collection::vec(any::<u8>(), 200..3000), any_flags.clone()),
        u32::from(large) => (16_300usize..50_000, any::<u8>(), any_flags)
            .prop_map(|(n, seed, f)| ((0..n).map(|i| (i as u8).wrapping_mul(seed | 1) ^ (i >> 8) as u8).collect(), f)),
    ]
}

fn ttl_secs() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(0u32), 2 => 1u32..20, 1 => 250u32..400, 1 => 4000u32..6000]
}

/// An operation on one of `keys` keys; with `large`, some values are larger than a segment.
fn op(keys: u8, large: bool) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    let value_flags = move || value_flags(large);
    prop_oneof![
        4 => k.clone().prop_map(Op::Get),
        1 => proptest::collection::vec(0..keys, 0..20).prop_map(Op::GetMany),
        5 => (k.clone(), value_flags(), ttl_secs()).prop_map(|(k, (v, f), t)| Op::Set(k, v, f, t)),
        1 => (k.clone(), value_flags(), ttl_secs()).prop_map(|(k, (v, f), t)| Op::Add(k, v, f, t)),
        1 => (k.clone(), value_flags(), ttl_secs()).prop_map(|(k, (v, f), t)| Op::Replace(k, v, f, t)),
        3 => (k.clone(), value_flags(), ttl_secs(), prop_oneof![4 => Just(CasWith::Latest), 1 => Just(CasWith::Fresh), 1 => Just(CasWith::Bogus)])
            .prop_map(|(k, (v, f), t, w)| Op::Cas(k, v, f, t, w)),
        1 => (k.clone(), proptest::collection::vec(any::<u8>(), 0..8)).prop_map(|(k, v)| Op::Append(k, v)),
        1 => (k.clone(), proptest::collection::vec(any::<u8>(), 0..8)).prop_map(|(k, v)| Op::Prepend(k, v)),
        1 => (k.clone(), prop_oneof![0u64..100, Just(u64::MAX)]).prop_map(|(k, d)| Op::Incr(k, d)),
        1 => (k.clone(), 0u64..100).prop_map(|(k, d)| Op::Decr(k, d)),
        1 => k.clone().prop_map(Op::Delete),
        1 => (k.clone(), ttl_secs()).prop_map(|(k, t)| Op::Touch(k, t)),
        1 => (k.clone(), ttl_secs()).prop_map(|(k, t)| Op::GetAndTouch(k, t)),
        2 => (k.clone(), value_flags(), ttl_secs()).prop_map(|(k, (v, f), t)| Op::SetCas(k, v, f, t)),
        1 => k.prop_map(Op::Invalidate),
        1 => Just(Op::Flush),
        1 => Just(Op::Expire),
        2 => prop_oneof![4 => 1u32..3, 2 => 5u32..40, 2 => 300u32..700, 1 => 100_000u32..10_000_000].prop_map(Op::Advance),
    ]
}

#[derive(Debug, Clone)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    /// Exact expiry (0: never), and the earliest time the engine may already treat it as expired.
    deadline: u32,
    early: u32,
    /// Which modification made this version of the item (unique over the run).
    version: u64,
}

struct Model {
    map: HashMap<Vec<u8>, Entry>,
    clock: Arc<ManualClock>,
    /// Whether the engine may lose items (evicting policy, small heap).
    evicts: bool,
    versions: u64,
    /// The latest read of each key: its CAS token and the item version it was read from.
    reads: HashMap<Vec<u8>, (u64, u64)>,
    /// Every token seen, with the key and version it belonged to, and the other way round: a
    /// token belongs to one version of one key, and a version keeps its token (touches too).
    tokens: HashMap<u64, (Vec<u8>, u64)>,
    token_of: HashMap<(Vec<u8>, u64), u64>,
}

impl Model {
    fn now(&self) -> u32 {
        segcache_core::Clock::now(&*self.clock)
    }
    fn entry(&mut self, value: Vec<u8>, flags: u32, ttl: u32, now: u32) -> Entry {
        self.versions += 1;
        let mut e = Entry { value, flags, deadline: 0, early: 0, version: self.versions };
        e.set_ttl(ttl, now);
        e
    }
    /// Drops what has certainly expired; then reconciles presence of `k` with the engine where
    /// the engine may have lost it.
    fn sync(&mut self, c: &mut impl Api, k: &[u8]) {
        let now = self.now();
        self.map.retain(|_, e| e.deadline == 0 || now < e.deadline);
        let present = c.contains(k);
        match self.map.get(k) {
            None => assert!(!present, "engine holds {k:?}, which the model says is gone"),
            Some(e) if !present => {
                let may_lose = self.evicts || (e.deadline != 0 && now >= e.early);
                assert!(may_lose, "engine lost {k:?} ({e:?}) at {now} without cause");
                self.map.remove(k);
            }
            Some(_) => {}
        }
    }
    fn check_item(&mut self, k: &[u8], got: Option<OwnedItem>) {
        let now = self.now();
        match (self.map.get(k), got) {
            (_, None) => {}
            (None, Some(i)) => panic!("engine returned {i:?} for {k:?}, which the model says is gone"),
            (Some(e), Some(i)) => {
                assert_eq!(i.value, e.value, "value of {k:?}");
                assert_eq!(i.flags, e.flags, "flags of {k:?}");
                if e.deadline != 0 {
                    let left = i.ttl.expect("ttl").as_secs() as u32;
                    assert!(now + left <= e.deadline, "item outlives its TTL");
                    assert!(now + left >= e.early, "item expires earlier than its TTL bucket allows");
                } else {
                    assert_eq!(i.ttl, None, "an item that never expires got a TTL");
                }
                let version = e.version;
                let owner = self.tokens.entry(i.cas).or_insert_with(|| (k.to_vec(), version));
                assert_eq!(*owner, (k.to_vec(), version), "CAS {} of {k:?} was handed out for another item", i.cas);
                let token = *self.token_of.entry((k.to_vec(), version)).or_insert(i.cas);
                assert_eq!(token, i.cas, "the CAS of {k:?} changed without a modification");
                self.reads.insert(k.to_vec(), (i.cas, version));
            }
        }
    }
}

impl Entry {
    fn set_ttl(&mut self, ttl: u32, now: u32) {
        if ttl == 0 {
            (self.deadline, self.early) = (0, 0);
        } else {
            // Rounding to the bucket, the segment's expiry window and a merge each take less
            // than a width: exact in 1-second buckets.
            let w = ttl::width_of(ttl);
            (self.deadline, self.early) = (now + ttl, (now + ttl).saturating_sub(3 * (w - 1)));
        }
    }
}

fn run(c: &mut impl Api, clock: Arc<ManualClock>, evicts: bool, ops: Vec<Op>) {
    let mut m = Model {
        map: HashMap::new(),
        clock,
        evicts,
        versions: 0,
        reads: HashMap::new(),
        tokens: HashMap::new(),
        token_of: HashMap::new(),
    };
    for op in ops {
        let now = m.now();
        match op.clone() {
            Op::Get(k) => {
                let k = key(k);
                m.sync(c, &k);
                let got = c.get(&k);
                assert_eq!(got.is_some(), m.map.contains_key(&k), "presence of {k:?}");
                m.check_item(&k, got);
            }
            Op::GetMany(ks) => {
                let keys: Vec<Vec<u8>> = ks.into_iter().map(key).collect();
                let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
                for (k, got) in keys.iter().zip(c.get_many(&refs)) {
                    m.check_item(k, got);
                }
            }
            Op::Set(k, v, f, t) => {
                let k = key(k);
                m.sync(c, &k);
                c.set(&k, &v, f, Duration::from_secs(t.into())).unwrap();
                let e = m.entry(v, f, t, now);
                m.map.insert(k, e);
            }
            Op::SetCas(k, v, f, t) => {
                let k = key(k);
                m.sync(c, &k);
                // Unique per version, above every counter value the engine hands out.
                let cas = (1 << 62) + m.versions + 1;
                assert_eq!(c.set_cas(&k, &v, f, Duration::from_secs(t.into()), cas).unwrap(), cas);
                let e = m.entry(v, f, t, now);
                m.map.insert(k, e);
            }
            Op::Invalidate(k) => {
                let k = key(k);
                m.sync(c, &k);
                let r = c.invalidate(&k);
                match m.map.get(&k).cloned() {
                    None => assert!(matches!(r, Err(Error::NotFound)), "{r:?}"),
                    Some(old) => {
                        r.unwrap();
                        m.versions += 1;
                        let e = Entry { version: m.versions, ..old };
                        m.map.insert(k, e);
                    }
                }
            }
            Op::Add(k, v, f, t) => {
                let k = key(k);
                m.sync(c, &k);
                let r = c.add(&k, &v, f, Duration::from_secs(t.into()));
                if m.map.contains_key(&k) {
                    assert!(matches!(r, Err(Error::NotStored)), "{r:?}");
                } else {
                    r.unwrap();
                    let e = m.entry(v, f, t, now);
                    m.map.insert(k, e);
                }
            }
            Op::Replace(k, v, f, t) => {
                let k = key(k);
                m.sync(c, &k);
                let r = c.replace(&k, &v, f, Duration::from_secs(t.into()));
                if m.map.contains_key(&k) {
                    r.unwrap();
                    let e = m.entry(v, f, t, now);
                    m.map.insert(k, e);
                } else {
                    assert!(matches!(r, Err(Error::NotStored)), "{r:?}");
                }
            }
            Op::Cas(k, v, f, t, with) => {
                let k = key(k);
                m.sync(c, &k);
                let token = match with {
                    CasWith::Fresh => {
                        let got = c.get(&k);
                        m.check_item(&k, got.clone());
                        got.map(|i| i.cas)
                    }
                    CasWith::Latest => m.reads.get(&k).map(|r| r.0),
                    CasWith::Bogus => None,
                };
                // A token no item ever had: the largest the engine could hand out is far below.
                let token_or_bogus = token.unwrap_or(u64::MAX);
                let r = c.cas(&k, &v, f, Duration::from_secs(t.into()), token_or_bogus);
                match m.map.get(&k) {
                    None => assert!(matches!(r, Err(Error::NotFound)), "{r:?}"),
                    Some(e) => {
                        let unmodified = token.is_some()
                            && m.reads.get(&k).is_some_and(|&(tok, ver)| Some(tok) == token && ver == e.version);
                        if unmodified {
                            assert!(r.is_ok(), "cas with the token of the current version failed: {r:?}");
                            let e = m.entry(v, f, t, now);
                            m.map.insert(k, e);
                        } else {
                            assert!(matches!(r, Err(Error::Exists)), "cas with a stale token: {r:?}");
                        }
                    }
                }
            }
            Op::Append(k, v) | Op::Prepend(k, v) => {
                let front = matches!(op, Op::Prepend(..));
                let k = key(k);
                m.sync(c, &k);
                let r = if front { c.prepend(&k, &v) } else { c.append(&k, &v) };
                m.versions += 1;
                let version = m.versions;
                match m.map.get_mut(&k) {
                    Some(e) => {
                        r.unwrap();
                        e.value = if front { [&v[..], &e.value[..]].concat() } else { [&e.value[..], &v[..]].concat() };
                        e.version = version;
                    }
                    None => assert!(matches!(r, Err(Error::NotStored)), "{r:?}"),
                }
            }
            Op::Incr(k, d) | Op::Decr(k, d) => {
                let up = matches!(op, Op::Incr(..));
                let k = key(k);
                m.sync(c, &k);
                let r = if up { c.incr(&k, d) } else { c.decr(&k, d) };
                m.versions += 1;
                let version = m.versions;
                match m.map.get_mut(&k) {
                    None => assert!(matches!(r, Err(Error::NotFound)), "{r:?}"),
                    Some(e) => match decimal(&e.value) {
                        None => assert!(matches!(r, Err(Error::NotNumeric)), "{r:?} for {:?}", e.value),
                        Some(n) => {
                            let want = if up { n.wrapping_add(d) } else { n.saturating_sub(d) };
                            assert_eq!(r.unwrap(), want);
                            e.value = want.to_string().into_bytes();
                            e.version = version;
                        }
                    },
                }
            }
            Op::Delete(k) => {
                let k = key(k);
                m.sync(c, &k);
                let r = c.delete(&k);
                if m.map.remove(&k).is_some() {
                    r.unwrap();
                } else {
                    assert!(matches!(r, Err(Error::NotFound)), "{r:?}");
                }
            }
            Op::Touch(k, t) | Op::GetAndTouch(k, t) => {
                let gat = matches!(op, Op::GetAndTouch(..));
                let k = key(k);
                m.sync(c, &k);
                let ttl = Duration::from_secs(t.into());
                let (ok, got) = if gat {
                    let got = c.get_and_touch(&k, ttl);
                    (got.is_some(), got)
                } else {
                    let r = c.touch(&k, ttl);
                    assert!(matches!(r, Ok(()) | Err(Error::NotFound)), "{r:?}");
                    (r.is_ok(), None)
                };
                match m.map.get_mut(&k) {
                    Some(e) => {
                        assert!(ok, "touch of a present key failed");
                        // Not a modification: the version (and so the CAS) stays.
                        e.set_ttl(t, now);
                        if gat {
                            m.check_item(&k, got);
                        }
                    }
                    None => assert!(!ok, "touch of an absent key succeeded"),
                }
            }
            Op::Flush => {
                c.flush();
                m.map.clear();
            }
            Op::Expire => c.expire(),
            Op::Advance(s) => m.clock.advance(s),
        }
    }
    // Every key agrees at the end.
    for k in 0..16 {
        let k = key(k);
        m.sync(c, &k);
        let got = c.get(&k);
        assert_eq!(got.is_some(), m.map.contains_key(&k));
        m.check_item(&k, got);
    }
}

/// memcached's notion of a number (`safe_strtoull` over the value and its "\r\n"): white space,
/// an optional sign, digits that fit in 64 bits, then white space, a NUL or the end; a minus sign
/// only where the number read as signed is not negative.
fn decimal(v: &[u8]) -> Option<u64> {
    let is_space = |c: &u8| b" \t\n\r\x0b\x0c".contains(c);
    let rest: Vec<u8> = v.iter().copied().skip_while(|c| is_space(c)).collect();
    let (neg, rest) = match rest.first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, &rest[..]),
    };
    let end = rest.iter().position(|c| !c.is_ascii_digit()).unwrap_or(rest.len());
    if end == 0 || rest.get(end).is_some_and(|c| *c != 0 && !is_space(c)) {
        return None;
    }
    let n: u64 = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    match neg {
        false => Some(n),
        true if n == 0 || n > 1 << 63 => Some(0u64.wrapping_sub(n)),
        true => None,
    }
}

/// Where a file-backed case keeps its file: one per case, removed after it.
struct TempFile(PathBuf);

impl TempFile {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("segcache-model-{}-{n}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn engine(policy: Policy, small: bool, clock: &Arc<ManualClock>) -> Builder {
    let heap = if small { 512 << 10 } else { 8 << 20 };
    Builder::new().heap_size(heap).segment_size(16 << 10).max_item_size(64 << 10).eviction(policy).clock(clock.clone())
}

/// Runs `ops` through `Segcache` and `SharedCache` (with `shards`), each with and without a file,
/// and through a `SharedCache` whose file processes share (its locks in the mapping).
fn run_all(policy: Policy, small: bool, shards: usize, evicts: bool, ops: &[Op]) {
    let handles =
        [(false, false, false), (false, true, false), (true, false, false), (true, true, false), (true, true, true)];
    for (file, shared, multi) in handles {
        let clock = ManualClock::new(T0);
        let tmp = TempFile::new();
        let mut b = engine(policy, small, &clock);
        if file {
            b = b.path(&tmp.0).multi_process(multi);
        }
        if shared {
            let mut c = b.shards(shards).build_shared().unwrap();
            run(&mut c, clock, evicts, ops.to_vec());
        } else {
            let mut c = b.build().unwrap();
            run(&mut c, clock, evicts, ops.to_vec());
        }
    }
}

/// Runs `ops` through `Segcache` (with and without a heap file) and `SharedCache` over a heap of
/// four 16 KiB segments per shard and a flash tier eight times as large: most items that survive
/// live on flash, and every operation meets them there.
fn run_tiered(policy: Policy, ops: &[Op]) {
    for (file, shared) in [(false, false), (true, false), (false, true)] {
        let clock = ManualClock::new(T0);
        let (heap, tier) = (TempFile::new(), TempFile::new());
        let shards = if shared { 2 } else { 1 };
        let mut b = Builder::new()
            .heap_size(shards * (64 << 10))
            .segment_size(16 << 10)
            .eviction(policy)
            .clock(clock.clone())
            .tier(&tier.0, shards as u64 * (512 << 10));
        if file {
            b = b.path(&heap.0);
        }
        if shared {
            let mut c = b.shards(shards).build_shared().unwrap();
            run(&mut c, clock, true, ops.to_vec());
        } else {
            let mut c = b.build().unwrap();
            run(&mut c, clock, true, ops.to_vec());
            c.verify().unwrap();
        }
    }
}

/// Appends and prepends keep their item's expiry to the second: rounding it down to a bucket
/// width at each rewrite would let a few of them shorten the item's life past its bucket's.
#[test]
fn read_modify_writes_keep_the_expiry_to_the_second() {
    let ops = vec![
        Op::SetCas(0, vec![3, 128, 96, 216], 0, 304),
        Op::Set(3, vec![b'x'; 1373], 0, 351),
        Op::Advance(2),
        Op::Prepend(3, vec![1]),
        Op::Advance(1),
        Op::Append(3, vec![1, 2, 3, 4]),
        Op::Get(3),
    ];
    run_all(Policy::Random, true, 2, true, &ops);
    let mut ops = vec![Op::Set(1, b"0".to_vec(), 0, 351)];
    for i in 0..40 {
        ops.extend([Op::Advance(1 + i % 3), Op::Append(1, b"1".to_vec()), Op::Incr(2, 1), Op::Get(1)]);
    }
    run_all(Policy::Fifo, true, 2, true, &ops);
}

/// Stores of one key whose record has the length of the current one but another layout (with
/// client flags and a value 4 bytes shorter, or the reverse), then CAS and touch on such records:
/// every handle serves exactly what the model holds.
#[test]
fn same_length_stores_of_another_layout_keep_the_value() {
    let ops = vec![
        Op::Set(0, b"a".to_vec(), 1, 0),
        Op::Set(0, b"bbbbb".to_vec(), 0, 0),
        Op::Get(0),
        Op::Set(1, b"WXYZy".to_vec(), 0, 0),
        Op::Set(1, b"N".to_vec(), 7, 0),
        Op::Get(1),
        Op::Set(1, b"WXYZy".to_vec(), 0, 0),
        Op::Get(1),
        Op::Cas(1, b"OLD!".to_vec(), 0, 0, CasWith::Latest),
        Op::Cas(1, b"Q".to_vec(), 9, 0, CasWith::Fresh),
        Op::Get(1),
        Op::Touch(1, 0),
        Op::Cas(1, b"RRRRR".to_vec(), 0, 0, CasWith::Latest),
        Op::Get(1),
    ];
    for shards in [1, 4] {
        run_all(Policy::None, false, shards, false, &ops);
    }
}

/// A CAS of an item on flash brings it back with its exact expiry, into a segment that expires
/// after the one the new version then goes to, in the same TTL bucket. A merge of the two must
/// not give the new version the first segment's later expiry.
#[test]
fn a_merge_never_lends_an_item_a_later_expiry() {
    let ops = vec![
        Op::Set(40, vec![0; 9], 0, 5963),
        Op::Advance(942),
        Op::Set(8, vec![1; 44], 0, 4707),
        Op::Get(8),
        Op::Set(30, vec![2; 40], 1, 4039),
        Op::Set(57, vec![3; 4], 0, 363),
        Op::SetCas(21, vec![4; 5], 0, 10),
        Op::Advance(2),
        Op::SetCas(57, vec![], u32::MAX, 0),
        Op::Cas(8, vec![5; 5], 0, 4376, CasWith::Latest),
        Op::Advance(405),
        Op::Set(40, vec![6; 2], 521057951, 13),
    ];
    run_tiered(Policy::Merge, &ops);
}

#[test]
fn model_decimal_is_memcacheds() {
    let cases = [
        (&b"5 "[..], Some(5)),
        (b" 5", Some(5)),
        (b"-0", Some(0)),
        (b"-1", None),
        (b"5x", None),
        (b"", None),
        (b"5\0z", Some(5)),
    ];
    for (v, n) in cases {
        assert_eq!(decimal(v), n, "{v:?}");
    }
    assert_eq!(decimal(b"-9223372036854775809"), Some(9_223_372_036_854_775_807));
    assert_eq!(decimal(b"18446744073709551616"), None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn without_eviction_every_handle_matches_model_exactly(ops in proptest::collection::vec(op(12, true), 1..300)) {
        run_all(Policy::None, false, 4, false, &ops);
    }

    #[test]
    fn evicting_policies_never_return_a_wrong_value(
        policy in proptest::sample::select(Policy::ALL[1..].to_vec()),
        ops in proptest::collection::vec(op(16, false), 1..400),
    ) {
        run_all(policy, true, 2, true, &ops);
    }

    /// Every evicting policy over a heap a ninth of the whole, without the flushes and long
    /// sleeps that would empty both before items reach flash: what the engine serves from flash
    /// is what the model holds.
    #[test]
    fn a_tiny_heap_with_a_flash_tier_never_returns_a_wrong_value(
        policy in proptest::sample::select(Policy::ALL[1..].to_vec()),
        ops in proptest::collection::vec(
            op(64, false).prop_filter("keeps the items long enough to reach flash", |o| match o {
                Op::Flush => false,
                Op::Advance(s) => *s < 1000,
                _ => true,
            }),
            1..400,
        ),
    ) {
        run_tiered(policy, &ops);
    }
}
