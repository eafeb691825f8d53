//! Model-based test: random operation sequences with a moving clock, checked against a HashMap
//! with expiry. Presence may differ only where the engine is allowed to lose an item (eviction,
//! or the documented early expiry within three TTL-bucket widths); values never differ.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use segcache_core::{ttl, Builder, Error, ManualClock, OwnedItem, Policy, Segcache, SharedCache};

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
    fn flush(&mut self);
    fn expire(&mut self);
}

macro_rules! forward {
    ($t:ty) => {
        impl Api for $t {
            fn get(&mut self, k: &[u8]) -> Option<OwnedItem> { <$t>::get(self, k).map(|i| i.to_owned()) }
            fn contains(&mut self, k: &[u8]) -> bool { <$t>::contains(self, k) }
            fn get_many(&mut self, ks: &[&[u8]]) -> Vec<Option<OwnedItem>> {
                let mut out = vec![None; ks.len()];
                <$t>::get_many_with(self, ks, |i, item| out[i] = Some(item.to_owned()));
                out
            }
            fn set(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration) -> Result<(), Error> { <$t>::set(self, k, v, f, t) }
            fn add(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration) -> Result<(), Error> { <$t>::add(self, k, v, f, t) }
            fn replace(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration) -> Result<(), Error> { <$t>::replace(self, k, v, f, t) }
            fn cas(&mut self, k: &[u8], v: &[u8], f: u32, t: Duration, c: u64) -> Result<(), Error> { <$t>::cas(self, k, v, f, t, c) }
            fn append(&mut self, k: &[u8], v: &[u8]) -> Result<(), Error> { <$t>::append(self, k, v) }
            fn prepend(&mut self, k: &[u8], v: &[u8]) -> Result<(), Error> { <$t>::prepend(self, k, v) }
            fn incr(&mut self, k: &[u8], d: u64) -> Result<u64, Error> { <$t>::incr(self, k, d) }
            fn decr(&mut self, k: &[u8], d: u64) -> Result<u64, Error> { <$t>::decr(self, k, d) }
            fn delete(&mut self, k: &[u8]) -> Result<(), Error> { <$t>::delete(self, k) }
            fn touch(&mut self, k: &[u8], t: Duration) -> Result<(), Error> { <$t>::touch(self, k, t) }
            fn flush(&mut self) { <$t>::flush(self) }
            fn expire(&mut self) { <$t>::expire(self); }
        }
    };
}
forward!(Segcache);
forward!(SharedCache);

#[derive(Debug, Clone)]
enum Op {
    Get(u8),
    GetMany(Vec<u8>),
    Set(u8, Vec<u8>, u32, u32),
    Add(u8, Vec<u8>, u32, u32),
    Replace(u8, Vec<u8>, u32, u32),
    Cas(u8, Vec<u8>, bool),
    Append(u8, Vec<u8>),
    Prepend(u8, Vec<u8>),
    Incr(u8, u64),
    Decr(u8, u64),
    Delete(u8),
    Touch(u8, u32),
    Flush,
    Expire,
    Advance(u32),
}

fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => (0u64..1000).prop_map(|n| n.to_string().into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 200..3000),
    ]
}

fn ttl_secs() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(0u32), 2 => 1u32..20, 1 => 250u32..400, 1 => 4000u32..6000]
}

fn op(keys: u8) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    prop_oneof![
        4 => k.clone().prop_map(Op::Get),
        1 => proptest::collection::vec(0..keys, 0..20).prop_map(Op::GetMany),
        4 => (k.clone(), value(), any::<u32>(), ttl_secs()).prop_map(|(k, v, f, t)| Op::Set(k, v, f, t)),
        1 => (k.clone(), value(), any::<u32>(), ttl_secs()).prop_map(|(k, v, f, t)| Op::Add(k, v, f, t)),
        1 => (k.clone(), value(), any::<u32>(), ttl_secs()).prop_map(|(k, v, f, t)| Op::Replace(k, v, f, t)),
        1 => (k.clone(), value(), any::<bool>()).prop_map(|(k, v, ok)| Op::Cas(k, v, ok)),
        1 => (k.clone(), value()).prop_map(|(k, v)| Op::Append(k, v)),
        1 => (k.clone(), value()).prop_map(|(k, v)| Op::Prepend(k, v)),
        1 => (k.clone(), prop_oneof![0u64..100, Just(u64::MAX)]).prop_map(|(k, d)| Op::Incr(k, d)),
        1 => (k.clone(), 0u64..100).prop_map(|(k, d)| Op::Decr(k, d)),
        1 => k.clone().prop_map(Op::Delete),
        1 => (k, ttl_secs()).prop_map(|(k, t)| Op::Touch(k, t)),
        1 => Just(Op::Flush),
        1 => Just(Op::Expire),
        2 => prop_oneof![1u32..3, 5u32..40, 300u32..700].prop_map(Op::Advance),
    ]
}

#[derive(Debug, Clone)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    /// Exact expiry (0: never), and the earliest time the engine may already treat it as expired.
    deadline: u32,
    early: u32,
}

struct Model {
    map: HashMap<Vec<u8>, Entry>,
    clock: Arc<ManualClock>,
    /// Whether the engine may lose items (evicting policy, small heap).
    evicts: bool,
}

impl Model {
    fn now(&self) -> u32 {
        segcache_core::Clock::now(&*self.clock)
    }
    fn entry(value: Vec<u8>, flags: u32, ttl: u32, now: u32) -> Entry {
        if ttl == 0 {
            Entry { value, flags, deadline: 0, early: 0 }
        } else {
            Entry { value, flags, deadline: now + ttl, early: (now + ttl).saturating_sub(3 * ttl::width_of(ttl)) }
        }
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
    fn check_item(&self, k: &[u8], got: Option<OwnedItem>) {
        match (self.map.get(k), got) {
            (_, None) => {}
            (None, Some(i)) => panic!("engine returned {i:?} for {k:?}, which the model says is gone"),
            (Some(e), Some(i)) => {
                assert_eq!(i.value, e.value, "value of {k:?}");
                assert_eq!(i.flags, e.flags, "flags of {k:?}");
                if e.deadline != 0 {
                    let left = i.ttl.expect("ttl").as_secs() as u32;
                    assert!(self.now() + left <= e.deadline, "item outlives its TTL");
                }
            }
        }
    }
}

fn run(c: &mut impl Api, clock: Arc<ManualClock>, evicts: bool, ops: Vec<Op>) {
    let mut m = Model { map: HashMap::new(), clock, evicts };
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
                m.map.insert(k, Model::entry(v, f, t, now));
            }
            Op::Add(k, v, f, t) => {
                let k = key(k);
                m.sync(c, &k);
                let r = c.add(&k, &v, f, Duration::from_secs(t.into()));
                if m.map.contains_key(&k) {
                    assert!(matches!(r, Err(Error::NotStored)), "{r:?}");
                } else {
                    r.unwrap();
                    m.map.insert(k, Model::entry(v, f, t, now));
                }
            }
            Op::Replace(k, v, f, t) => {
                let k = key(k);
                m.sync(c, &k);
                let r = c.replace(&k, &v, f, Duration::from_secs(t.into()));
                if m.map.contains_key(&k) {
                    r.unwrap();
                    m.map.insert(k, Model::entry(v, f, t, now));
                } else {
                    assert!(matches!(r, Err(Error::NotStored)), "{r:?}");
                }
            }
            Op::Cas(k, v, fresh) => {
                let k = key(k);
                m.sync(c, &k);
                let cas = c.get(&k).map(|i| i.cas);
                match cas {
                    None => assert!(matches!(c.cas(&k, &v, 1, Duration::ZERO, 1), Err(Error::NotFound))),
                    Some(cas) if fresh => {
                        c.cas(&k, &v, 1, Duration::ZERO, cas).unwrap();
                        m.map.insert(k, Model::entry(v, 1, 0, now));
                    }
                    Some(cas) => {
                        let r = c.cas(&k, &v, 1, Duration::ZERO, cas ^ (1 << 63));
                        assert!(matches!(r, Err(Error::Exists)), "{r:?}");
                    }
                }
            }
            Op::Append(k, v) | Op::Prepend(k, v) => {
                let front = matches!(op, Op::Prepend(..));
                let k = key(k);
                m.sync(c, &k);
                let r = if front { c.prepend(&k, &v) } else { c.append(&k, &v) };
                match m.map.get_mut(&k) {
                    Some(e) => {
                        r.unwrap();
                        e.value = if front { [&v[..], &e.value[..]].concat() } else { [&e.value[..], &v[..]].concat() };
                    }
                    None => assert!(matches!(r, Err(Error::NotStored)), "{r:?}"),
                }
            }
            Op::Incr(k, d) | Op::Decr(k, d) => {
                let up = matches!(op, Op::Incr(..));
                let k = key(k);
                m.sync(c, &k);
                let r = if up { c.incr(&k, d) } else { c.decr(&k, d) };
                match m.map.get_mut(&k) {
                    None => assert!(matches!(r, Err(Error::NotFound)), "{r:?}"),
                    Some(e) => match decimal(&e.value) {
                        None => assert!(matches!(r, Err(Error::NotNumeric)), "{r:?}"),
                        Some(n) => {
                            let want = if up { n.wrapping_add(d) } else { n.saturating_sub(d) };
                            assert_eq!(r.unwrap(), want);
                            e.value = want.to_string().into_bytes();
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
            Op::Touch(k, t) => {
                let k = key(k);
                m.sync(c, &k);
                let r = c.touch(&k, Duration::from_secs(t.into()));
                match m.map.get(&k).cloned() {
                    Some(e) => {
                        r.unwrap();
                        m.map.insert(k, Model::entry(e.value, e.flags, t, now));
                    }
                    None => assert!(matches!(r, Err(Error::NotFound)), "{r:?}"),
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

/// memcached's notion of a number: 1 to 20 ASCII digits that fit in 64 bits.
fn decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn engine(policy: Policy, small: bool, clock: &Arc<ManualClock>) -> Builder {
    let heap = if small { 512 << 10 } else { 8 << 20 };
    Builder::new().heap_size(heap).segment_size(16 << 10).eviction(policy).clock(clock.clone())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn engine_without_eviction_matches_model_exactly(ops in proptest::collection::vec(op(12), 1..300)) {
        let clock = ManualClock::new(T0);
        let mut c = engine(Policy::None, false, &clock).build().unwrap();
        run(&mut c, clock, false, ops);
    }

    #[test]
    fn shared_handle_without_eviction_matches_model_exactly(ops in proptest::collection::vec(op(12), 1..300)) {
        let clock = ManualClock::new(T0);
        let mut c = engine(Policy::None, false, &clock).shards(4).build_shared().unwrap();
        run(&mut c, clock, false, ops);
    }

    #[test]
    fn evicting_policies_never_return_a_wrong_value(
        policy in proptest::sample::select(Policy::ALL[1..].to_vec()),
        shared in any::<bool>(),
        ops in proptest::collection::vec(op(16), 1..400),
    ) {
        let clock = ManualClock::new(T0);
        let b = engine(policy, true, &clock);
        if shared {
            let mut c = b.shards(2).build_shared().unwrap();
            run(&mut c, clock, true, ops);
        } else {
            let mut c = b.build().unwrap();
            run(&mut c, clock, true, ops);
        }
    }
}
