//! Soak: long random streams of every write (set, add, replace, cas, append, prepend, incr, decr,
//! touch, delete, flush now and later) over a few dozen keys, with a TTL mix and a clock that
//! moves, into a heap small enough that it fills with the dead copies those keys leave behind.
//! After every operation each key is checked against a model: an item may be missing only if it
//! expired, was flushed, or the eviction listener was told of it (so every item the engine drops
//! is both reported and counted). Several segment sizes and eviction policies, anonymous and
//! file-backed.
//!
//! Each run prints its seed; `SEGCACHE_SOAK_SEED=N` replays one, `SEGCACHE_SOAK_OPS=N` sets the
//! operations per configuration (default sized for CI; a soak wants 1000000 or more), and
//! `SEGCACHE_SOAK_VERIFY_EVERY=N` how often the engine's whole-table check runs (default 64).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use segcache_core::{
    parse_decimal, ttl, Builder, Error, ManualClock, Policy, RemovalCause, RmwOptions, Segcache, SharedCache,
    StoreMode, StoreOptions,
};

const T0: u32 = 1_700_000_000;
const KEYS: usize = 24;

/// What the model knows of a key's item.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    cas: u64,
    /// When the item expires at the latest (0: never); it may expire up to `early` seconds
    /// before (TTL buckets round TTLs down).
    expire_at: u32,
    early: u32,
}

/// Whether an entry must be live, must be gone, or may be either at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Live,
    Dead,
    Either,
}

impl Entry {
    /// For reports: the value's length and first bytes.
    fn short(&self) -> String {
        let head = String::from_utf8_lossy(&self.value[..self.value.len().min(24)]).into_owned();
        format!(
            "{} bytes {head:?}.., flags {}, cas {}, expires {} (early {})",
            self.value.len(),
            self.flags,
            self.cas,
            self.expire_at,
            self.early
        )
    }

    fn life(&self, now: u32) -> Life {
        if self.expire_at == 0 || now < self.expire_at.saturating_sub(self.early) {
            Life::Live
        } else if now >= self.expire_at {
            Life::Dead
        } else {
            Life::Either
        }
    }
}

/// An op's outcome, comparable between the engine and the model (CAS values are the engine's).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Stored,
    Number(u64),
    Err(&'static str),
}

fn err_name(e: &Error) -> &'static str {
    match e {
        Error::NotStored => "not stored",
        Error::NotFound => "not found",
        Error::Exists => "exists",
        Error::NotNumeric => "not numeric",
        Error::TooLarge { .. } => "too large",
        _ => "other",
    }
}

#[derive(Debug, Clone)]
enum Op {
    Set(usize, Vec<u8>, u32, u32),
    Add(usize, Vec<u8>, u32, u32),
    Replace(usize, Vec<u8>, u32, u32),
    Cas(usize, Vec<u8>, u32, u32, bool),
    /// A set with a client-chosen CAS value (memcached's `ms E`): a record of another layout.
    SetExplicit(usize, Vec<u8>, u32, u32, u64),
    /// Marks the item stale (memcached's `md I`), with a new TTL if given.
    Invalidate(usize, Option<u32>),
    Append(usize, Vec<u8>),
    Prepend(usize, Vec<u8>),
    Incr(usize, u64),
    Decr(usize, u64),
    Touch(usize, u32),
    Delete(usize),
    Get(usize),
    Flush,
    FlushAfter(u32),
    Tick(u32),
}

struct Config {
    name: &'static str,
    /// `Some(shards)`: through `SharedCache`, as the server.
    shared: Option<usize>,
    /// `Builder::pad_numbers`, as the server.
    pad: bool,
    heap: usize,
    segment: usize,
    policy: Policy,
    file: bool,
}

fn key(i: usize) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

/// Values of digits (so incr and decr apply) or letters, mostly short, some a good part of a
/// segment, so that rewrites that do not fit in place fill the heap with dead copies.
fn value(rng: &mut StdRng, segment: usize) -> Vec<u8> {
    let len = match rng.gen_range(0..100) {
        0..=29 => rng.gen_range(0..4),
        30..=94 => [4, 5, 6, 8, 9, 12, 16, 20, 33, 64, 100, 250, 600, 2000, 9000][rng.gen_range(0..15)],
        _ => rng.gen_range(2000..segment / 3),
    };
    digits_or_letters(rng, len)
}

/// A few bytes, to append or prepend.
fn small_value(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.gen_range(1..8);
    digits_or_letters(rng, len)
}

fn digits_or_letters(rng: &mut StdRng, len: usize) -> Vec<u8> {
    if rng.gen_bool(0.5) && len < 20 {
        (0..len).map(|_| b'0' + rng.gen_range(0..10)).collect()
    } else {
        (0..len).map(|_| b'A' + rng.gen_range(0..26)).collect()
    }
}

/// TTLs in a few buckets of each width (an open segment per bucket in use), and a few short
/// ones that expire during the run.
fn ttl_of(rng: &mut StdRng) -> u32 {
    match rng.gen_range(0..20) {
        0..=7 => 0,
        8..=9 => 1000,
        10..=11 => 1500,
        12 => 1501,
        13 => 5000,
        14 => 40_000,
        15 => 90_000,
        _ => rng.gen_range(1..6),
    }
}

fn gen_op(rng: &mut StdRng, segment: usize) -> Op {
    let k = rng.gen_range(0..KEYS);
    let flags = if rng.gen_bool(0.5) { 0 } else { rng.gen_range(1..70_000) };
    match rng.gen_range(0..1000) {
        0..=199 => Op::Set(k, value(rng, segment), flags, ttl_of(rng)),
        200..=249 => Op::Add(k, value(rng, segment), flags, ttl_of(rng)),
        250..=299 => Op::Replace(k, value(rng, segment), flags, ttl_of(rng)),
        300..=369 => Op::Cas(k, value(rng, segment), flags, ttl_of(rng), rng.gen_bool(0.8)),
        370..=469 => {
            let v = if rng.gen_bool(0.9) { small_value(rng) } else { value(rng, segment) };
            Op::Append(k, v)
        }
        470..=519 => Op::Prepend(k, small_value(rng)),
        520..=619 => Op::Incr(k, rng.gen_range(0..1_000_000)),
        620..=659 => Op::Decr(k, rng.gen_range(0..1_000)),
        660..=719 => Op::Touch(k, ttl_of(rng)),
        720..=739 => Op::Delete(k),
        740..=759 => Op::SetExplicit(k, value(rng, segment), flags, ttl_of(rng), rng.gen_range(1 << 40..1 << 50)),
        760..=779 => Op::Invalidate(k, rng.gen_bool(0.5).then(|| ttl_of(rng))),
        780..=996 => Op::Get(k),
        // Rare enough that the heap fills between flushes.
        997 if rng.gen_bool(0.01) => Op::FlushAfter(rng.gen_range(1..4)),
        998 if rng.gen_bool(0.01) => Op::Flush,
        _ => Op::Tick(1),
    }
}

/// How early the engine may expire an item stored with `ttl`: its rounding, and a merge's window.
fn early_of(ttl: u32) -> u32 {
    if ttl == 0 {
        0
    } else {
        3 * ttl::width_of(ttl)
    }
}

/// What the eviction listener was told: each item's key, CAS value and cause.
type Told = Arc<Mutex<Vec<(Vec<u8>, u64, RemovalCause)>>>;

/// The engine itself, or the shared handle (the server's), sharded or not.
enum Cache {
    Engine(Box<Segcache>),
    Shared(SharedCache),
}

/// Forwards a call to whichever cache this is (the two have the same methods, `&mut self` and
/// `&self`).
macro_rules! on {
    ($c:expr, $m:ident($($a:expr),*)) => {
        match $c {
            Cache::Engine(c) => c.$m($($a),*),
            Cache::Shared(c) => c.$m($($a),*),
        }
    };
}

impl Cache {
    fn get(&self, k: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
        match self {
            Cache::Engine(c) => c.get(k).map(|i| (i.value().to_vec(), i.flags(), i.cas())),
            Cache::Shared(c) => c.get(k).map(|i| (i.value, i.flags, i.cas)),
        }
    }
}

struct Soak {
    cache: Cache,
    steps: u64,
    verify_every: u64,
    pad: bool,
    clock: Arc<ManualClock>,
    model: Vec<Option<Entry>>,
    /// The items the listener was told of since the last step.
    told: Told,
    told_total: u64,
    flush_at: u32,
    max_item: usize,
}

impl Soak {
    fn now(&self) -> u32 {
        on!(&self.cache, now())
    }

    /// The model after time passes: a delayed flush that is due.
    fn advance_model(&mut self) {
        if self.flush_at != 0 && self.now() >= self.flush_at {
            self.model.iter_mut().for_each(|e| *e = None);
            self.flush_at = 0;
        }
    }

    /// The outcome of `op` on `entry` (the key's item, or none), and the new entry if it stores
    /// (its CAS value is filled in from the engine's answer).
    fn expect(&self, op: &Op, entry: Option<&Entry>) -> (Out, Option<Option<Entry>>) {
        let now = self.now();
        let new = |v: &[u8], flags: u32, ttl: u32| Entry {
            value: v.to_vec(),
            flags,
            cas: 0,
            expire_at: if ttl == 0 { 0 } else { now + ttl },
            early: early_of(ttl),
        };
        let key_len = Self::key_of(op).map_or(0, |k| key(k).len());
        let joined = |e: &Entry, v: &[u8], front: bool| {
            if key_len + e.value.len() + v.len() > self.max_item {
                return (Out::Err("too large"), None);
            }
            let value = if front { [v, &e.value].concat() } else { [&e.value[..], v].concat() };
            (Out::Stored, Some(Some(Entry { value, cas: 0, ..e.clone() })))
        };
        match (op, entry) {
            (Op::Set(_, v, f, t) | Op::SetExplicit(_, v, f, t, _), _) => (Out::Stored, Some(Some(new(v, *f, *t)))),
            (Op::Invalidate(..), None) => (Out::Err("not found"), None),
            (Op::Invalidate(_, t), Some(e)) => {
                let e = match t {
                    Some(t) => Entry { expire_at: if *t == 0 { 0 } else { now + t }, early: early_of(*t), ..e.clone() },
                    None => e.clone(),
                };
                (Out::Stored, Some(Some(e)))
            }
            (Op::Add(_, v, f, t), None) | (Op::Replace(_, v, f, t), Some(_)) => {
                (Out::Stored, Some(Some(new(v, *f, *t))))
            }
            (Op::Add(..), Some(_)) | (Op::Replace(..), None) => (Out::Err("not stored"), None),
            (Op::Cas(..), None) => (Out::Err("not found"), None),
            (Op::Cas(_, v, f, t, right), Some(_)) => {
                if *right {
                    (Out::Stored, Some(Some(new(v, *f, *t))))
                } else {
                    (Out::Err("exists"), None)
                }
            }
            (Op::Append(..) | Op::Prepend(..), None) => (Out::Err("not stored"), None),
            (Op::Append(_, v), Some(e)) => joined(e, v, false),
            (Op::Prepend(_, v), Some(e)) => joined(e, v, true),
            (Op::Incr(..) | Op::Decr(..) | Op::Touch(..) | Op::Delete(..) | Op::Get(..), None) => {
                (Out::Err("not found"), None)
            }
            (Op::Incr(_, d) | Op::Decr(_, d), Some(e)) => {
                let Some(n) = parse_decimal(&e.value) else { return (Out::Err("not numeric"), None) };
                let r = if matches!(op, Op::Incr(..)) { n.wrapping_add(*d) } else { n.saturating_sub(*d) };
                let mut value = r.to_string().into_bytes();
                if self.pad && value.len() < e.value.len() {
                    // memcached's bytes: a number that got shorter keeps the old length.
                    value.resize(e.value.len(), b' ');
                }
                (Out::Number(r), Some(Some(Entry { value, cas: 0, ..e.clone() })))
            }
            (Op::Touch(_, t), Some(e)) => {
                let touched = Entry { expire_at: if *t == 0 { 0 } else { now + t }, early: early_of(*t), ..e.clone() };
                (Out::Stored, Some(Some(touched)))
            }
            (Op::Delete(_), Some(_)) => (Out::Stored, Some(None)),
            (Op::Get(_), Some(_)) => (Out::Stored, None),
            (Op::Flush | Op::FlushAfter(_) | Op::Tick(_), _) => (Out::Stored, None),
        }
    }

    /// Runs `op` on the engine: its outcome, and the CAS value a store returned.
    fn run(&mut self, op: &Op) -> (Out, u64) {
        let c = &mut self.cache;
        let opts = StoreOptions::default();
        let d = |t: &u32| Duration::from_secs(u64::from(*t));
        let stored = |r: Result<u64, Error>| match r {
            Ok(cas) => (Out::Stored, cas),
            Err(e) => (Out::Err(err_name(&e)), 0),
        };
        let unit = |r: Result<(), Error>| stored(r.map(|_| 0));
        let none = RmwOptions::default();
        match op {
            Op::Set(k, v, f, t) => stored(on!(c, store_with(&key(*k), v, *f, d(t), StoreMode::Set, opts))),
            Op::Add(k, v, f, t) => stored(on!(c, store_with(&key(*k), v, *f, d(t), StoreMode::Add, opts))),
            Op::Replace(k, v, f, t) => stored(on!(c, store_with(&key(*k), v, *f, d(t), StoreMode::Replace, opts))),
            Op::Cas(k, v, f, t, right) => {
                let known = self.model[*k].as_ref().map_or(1, |e| e.cas);
                let token = StoreMode::Cas(if *right { known } else { known.wrapping_add(1 << 40) });
                stored(on!(c, store_with(&key(*k), v, *f, d(t), token, opts)))
            }
            Op::SetExplicit(k, v, f, t, e) => {
                let opts = StoreOptions { cas: Some(*e), ..opts };
                stored(on!(c, store_with(&key(*k), v, *f, d(t), StoreMode::Set, opts)))
            }
            Op::Invalidate(k, t) => stored(on!(c, invalidate(&key(*k), t.as_ref().map(d), None, None))),
            Op::Append(k, v) => stored(on!(c, append_with(&key(*k), v, none))),
            Op::Prepend(k, v) => stored(on!(c, prepend_with(&key(*k), v, none))),
            Op::Incr(k, n) | Op::Decr(k, n) => match on!(c, add_delta(&key(*k), matches!(op, Op::Incr(..)), *n)) {
                Ok(delta) => (Out::Number(delta.value), delta.cas),
                Err(e) => (Out::Err(err_name(&e)), 0),
            },
            Op::Touch(k, t) => unit(on!(c, touch(&key(*k), d(t)))),
            Op::Delete(k) => unit(on!(c, delete(&key(*k)))),
            Op::Get(k) => match c.get(&key(*k)) {
                Some(_) => (Out::Stored, 0),
                None => (Out::Err("not found"), 0),
            },
            Op::Flush => {
                on!(c, flush());
                (Out::Stored, 0)
            }
            Op::FlushAfter(s) => {
                on!(c, flush_after(d(s)));
                (Out::Stored, 0)
            }
            Op::Tick(s) => {
                self.clock.advance(*s);
                (Out::Stored, 0)
            }
        }
    }

    fn key_of(op: &Op) -> Option<usize> {
        match op {
            Op::Set(k, ..)
            | Op::SetExplicit(k, ..)
            | Op::Invalidate(k, _)
            | Op::Add(k, ..)
            | Op::Replace(k, ..)
            | Op::Cas(k, ..)
            | Op::Append(k, _)
            | Op::Prepend(k, _)
            | Op::Incr(k, _)
            | Op::Decr(k, _)
            | Op::Touch(k, _)
            | Op::Delete(k)
            | Op::Get(k) => Some(*k),
            _ => None,
        }
    }

    /// Keys whose current item (by the model's CAS value) the listener was told of.
    fn reported(&mut self) -> HashSet<usize> {
        let mut told = std::mem::take(&mut *self.told.lock().unwrap());
        // Deletes and replacements are the model's own doing: what it checks is what the engine
        // dropped on its own.
        told.retain(|(_, _, cause)| matches!(cause, RemovalCause::Expired | RemovalCause::Evicted));
        self.told_total += told.len() as u64;
        let index: HashMap<Vec<u8>, usize> = (0..KEYS).map(|i| (key(i), i)).collect();
        told.iter()
            .filter_map(|(k, cas, _)| {
                let i = index[k];
                self.model[i].as_ref().is_some_and(|e| e.cas == *cas).then_some(i)
            })
            .collect()
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        self.advance_model();
        let k = Self::key_of(op);
        let entry = k.and_then(|k| self.model[k].clone());
        let life = entry.as_ref().map_or(Life::Dead, |e| e.life(self.now()));
        let (out, cas) = self.run(op);
        if matches!(op, Op::Flush) {
            self.model.iter_mut().for_each(|e| *e = None);
            self.flush_at = 0;
        }
        if let Op::FlushAfter(s) = op {
            self.flush_at = self.now() + s;
        }
        let gone = self.reported();
        if let Some(k) = k {
            let present = (life != Life::Dead).then(|| self.expect(op, entry.as_ref()));
            let absent = (life != Life::Live || gone.contains(&k)).then(|| self.expect(op, None));
            let (update, missed) = match (present, absent) {
                (Some((o, u)), _) if o == out => (u, false),
                (_, Some((o, u))) if o == out => (u, true),
                (p, a) => {
                    return Err(format!(
                        "key {k}: {op:?} answered {out:?}; the model has {:?} ({life:?}, reported: {}) and \
                         expects {:?} if present, {:?} if absent",
                        entry.as_ref().map(Entry::short),
                        gone.contains(&k),
                        p.map(|p| p.0),
                        a.map(|a| a.0),
                    ))
                }
            };
            match update {
                Some(Some(mut e)) => {
                    e.cas = if matches!(op, Op::Touch(..)) { entry.as_ref().map_or(0, |x| x.cas) } else { cas };
                    self.model[k] = Some(e);
                }
                // An answer the model allowed only if the item is gone.
                Some(None) | None if missed => self.model[k] = None,
                Some(None) => self.model[k] = None,
                None => {}
            }
        }
        // Items the listener was told of may be gone: learn which from the engine.
        for i in gone {
            if self.cache.get(&key(i)).is_none() {
                self.model[i] = None;
            }
        }
        self.check_all()?;
        // The engine's own check (no slot leads to a dead record or a segment not in use); it
        // walks the whole table, so not after every op.
        self.steps += 1;
        if self.steps.is_multiple_of(self.verify_every) {
            on!(&self.cache, verify())?;
        }
        Ok(())
    }

    /// Every key against the model; a key that may have expired is learnt from the engine.
    fn check_all(&mut self) -> Result<(), String> {
        self.advance_model();
        let now = self.now();
        for i in 0..KEYS {
            let got = self.cache.get(&key(i));
            let want = self.model[i].clone();
            match (&want, got) {
                (None, None) => {}
                (None, Some((v, f, c))) => {
                    let g = Entry { value: v, flags: f, cas: c, expire_at: 0, early: 0 }.short();
                    return Err(format!("key {i}: present ({g}), the model has it gone"));
                }
                (Some(e), None) => match e.life(now) {
                    Life::Live => {
                        return Err(format!(
                            "key {i}: lost (the model has {}, live at {now}; never reported)",
                            e.short()
                        ))
                    }
                    _ => self.model[i] = None,
                },
                (Some(e), Some((v, f, c))) => {
                    if e.life(now) == Life::Dead {
                        return Err(format!(
                            "key {i}: still present at {now}, the model has it expired: {}",
                            e.short()
                        ));
                    }
                    if (&e.value, e.flags, e.cas) != (&v, f, c) {
                        let g = Entry { value: v, flags: f, cas: c, expire_at: 0, early: 0 }.short();
                        return Err(format!("key {i}: engine has ({g}), the model {}", e.short()));
                    }
                }
            }
        }
        Ok(())
    }
}

/// An op for reports: values by length and first bytes.
fn describe(op: &Op) -> String {
    let v = |v: &[u8]| format!("{} bytes {:?}..", v.len(), String::from_utf8_lossy(&v[..v.len().min(12)]));
    match op {
        Op::Set(k, x, f, t) => format!("set k{k} {} flags {f} ttl {t}", v(x)),
        Op::Add(k, x, f, t) => format!("add k{k} {} flags {f} ttl {t}", v(x)),
        Op::Replace(k, x, f, t) => format!("replace k{k} {} flags {f} ttl {t}", v(x)),
        Op::Cas(k, x, f, t, right) => format!("cas k{k} {} flags {f} ttl {t} right token {right}", v(x)),
        Op::SetExplicit(k, x, f, t, e) => format!("set k{k} {} flags {f} ttl {t} cas {e}", v(x)),
        Op::Append(k, x) => format!("append k{k} {}", v(x)),
        Op::Prepend(k, x) => format!("prepend k{k} {}", v(x)),
        other => format!("{other:?}"),
    }
}

fn soak(cfg: &Config, seed: u64, ops: usize) {
    let path = cfg
        .file
        .then(|| std::env::temp_dir().join(format!("segcache-soak-{}-{}-{seed}", std::process::id(), cfg.name)));
    let clock = ManualClock::new(T0);
    let told: Told = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&told);
    let mut b = Builder::new()
        .heap_size(cfg.heap)
        .segment_size(cfg.segment)
        .eviction(cfg.policy)
        .clock(clock.clone())
        .eviction_listener(move |item, cause| log.lock().unwrap().push((item.key().to_vec(), item.cas(), cause)));
    if let Some(p) = &path {
        let _ = std::fs::remove_file(p);
        b = b.path(p);
    }
    b = b.pad_numbers(cfg.pad);
    // A store's size limit: the segment's, whatever the handle.
    let max_item = Builder::new().heap_size(cfg.heap).segment_size(cfg.segment).build().unwrap().max_item_size();
    let cache = match cfg.shared {
        None => Cache::Engine(Box::new(b.build().unwrap())),
        Some(shards) => Cache::Shared(b.shards(shards).build_shared().unwrap()),
    };
    let verify_every = env("SEGCACHE_SOAK_VERIFY_EVERY").unwrap_or(64).max(1);
    let mut s = Soak {
        cache,
        steps: 0,
        verify_every,
        pad: cfg.pad,
        clock,
        model: vec![None; KEYS],
        told,
        told_total: 0,
        flush_at: 0,
        max_item,
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut recent: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    for n in 0..ops {
        let op = gen_op(&mut rng, cfg.segment);
        recent.push_back(format!("{n}: {}", describe(&op)));
        if recent.len() > 12 {
            recent.pop_front();
        }
        if let Err(why) = s.step(&op) {
            panic!(
                "{} (SEGCACHE_SOAK_SEED={seed}), op {n}: {why}\n  stats: {:?}\n  last ops:\n    {}",
                cfg.name,
                on!(&s.cache, stats()),
                recent.iter().cloned().collect::<Vec<_>>().join("\n    ")
            );
        }
    }
    // Every item the engine dropped on its own was counted, as the listener was told of it.
    let st = on!(&s.cache, stats());
    assert_eq!(
        st.evicted_items + st.expired_items,
        s.told_total,
        "{} (seed {seed}): items evicted and expired against those reported",
        cfg.name
    );
    assert!(st.evicted_segments + st.expired_segments > 0 || ops < 20_000, "{}: the heap never filled", cfg.name);
    eprintln!(
        "{} seed {seed}: {ops} ops, {} evicted, {} expired, {} merged, {} flushes",
        cfg.name, st.evicted_items, st.expired_items, st.merged_items, st.flushes
    );
    drop(s);
    if let Some(p) = path {
        std::fs::remove_file(p).unwrap();
    }
}

/// A number from the environment.
fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// Operations per configuration: sized so that CI (a debug build runs fewer) spends about a
/// minute on the whole file; SEGCACHE_SOAK_OPS for a real soak.
fn ops() -> usize {
    env("SEGCACHE_SOAK_OPS").unwrap_or(if cfg!(debug_assertions) { 20_000 } else { 150_000 })
}

fn seed() -> u64 {
    env("SEGCACHE_SOAK_SEED").unwrap_or_else(|| rand::thread_rng().gen())
}

fn run(cfg: Config) {
    let seed = seed();
    eprintln!("{}: SEGCACHE_SOAK_SEED={seed}", cfg.name);
    soak(&cfg, seed, ops());
}

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

#[test]
fn merge_64k_anonymous() {
    run(Config {
        shared: None,
        pad: false,
        name: "merge-64k",
        heap: 2 * MIB,
        segment: 64 * KIB,
        policy: Policy::Merge,
        file: false,
    });
}

#[test]
fn merge_64k_file() {
    run(Config {
        shared: None,
        pad: false,
        name: "merge-64k-file",
        heap: 2 * MIB,
        segment: 64 * KIB,
        policy: Policy::Merge,
        file: true,
    });
}

#[test]
fn merge_1m_anonymous() {
    run(Config {
        shared: None,
        pad: false,
        name: "merge-1m",
        heap: 8 * MIB,
        segment: MIB,
        policy: Policy::Merge,
        file: false,
    });
}

#[test]
fn merge_1m_file() {
    run(Config {
        shared: None,
        pad: false,
        name: "merge-1m-file",
        heap: 8 * MIB,
        segment: MIB,
        policy: Policy::Merge,
        file: true,
    });
}

#[test]
fn s3fifo_256k_file() {
    run(Config {
        shared: None,
        pad: false,
        name: "s3fifo-256k-file",
        heap: 4 * MIB,
        segment: 256 * KIB,
        policy: Policy::S3Fifo,
        file: true,
    });
}

#[test]
fn s3fifo_64k_anonymous() {
    run(Config {
        shared: None,
        pad: false,
        name: "s3fifo-64k",
        heap: 2 * MIB,
        segment: 64 * KIB,
        policy: Policy::S3Fifo,
        file: false,
    });
}

#[test]
fn fifo_128k_anonymous() {
    run(Config {
        shared: None,
        pad: false,
        name: "fifo-128k",
        heap: 2 * MIB,
        segment: 128 * KIB,
        policy: Policy::Fifo,
        file: false,
    });
}

#[test]
fn util_64k_file() {
    run(Config {
        shared: None,
        pad: false,
        name: "util-64k-file",
        heap: 2 * MIB,
        segment: 64 * KIB,
        policy: Policy::Util,
        file: true,
    });
}

#[test]
fn cte_and_random_256k_anonymous() {
    run(Config {
        shared: None,
        pad: false,
        name: "cte-256k",
        heap: 4 * MIB,
        segment: 256 * KIB,
        policy: Policy::Cte,
        file: false,
    });
    run(Config {
        shared: None,
        pad: false,
        name: "random-256k",
        heap: 4 * MIB,
        segment: 256 * KIB,
        policy: Policy::Random,
        file: false,
    });
}

#[test]
fn shared_merge_1m_as_the_server() {
    run(Config {
        shared: Some(1),
        pad: true,
        name: "shared-merge-1m",
        heap: 8 * MIB,
        segment: MIB,
        policy: Policy::Merge,
        file: false,
    });
}

#[test]
fn shared_merge_1m_file_as_the_server() {
    run(Config {
        shared: Some(2),
        pad: true,
        name: "shared-merge-1m-file",
        heap: 8 * MIB,
        segment: MIB,
        policy: Policy::Merge,
        file: true,
    });
}

#[test]
fn shared_merge_64k_padded() {
    run(Config {
        shared: Some(1),
        pad: true,
        name: "shared-merge-64k",
        heap: 2 * MIB,
        segment: 64 * KIB,
        policy: Policy::Merge,
        file: false,
    });
    run(Config {
        shared: None,
        pad: true,
        name: "merge-64k-padded",
        heap: 2 * MIB,
        segment: 64 * KIB,
        policy: Policy::Merge,
        file: true,
    });
}

/// The server's shape: 64 MiB of 1 MiB segments, through the shared handle, numbers padded;
/// the heap fills with dead copies late in a run, as in the server's differential soaks.
#[test]
fn shared_merge_64m_as_the_server() {
    run(Config {
        shared: Some(1),
        pad: true,
        name: "shared-merge-64m",
        heap: 64 * MIB,
        segment: MIB,
        policy: Policy::Merge,
        file: false,
    });
    run(Config {
        shared: Some(4),
        pad: true,
        name: "shared-merge-64m-file",
        heap: 64 * MIB,
        segment: MIB,
        policy: Policy::Merge,
        file: true,
    });
}
