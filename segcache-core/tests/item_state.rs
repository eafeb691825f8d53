//! The item state behind memcached's meta protocol: the stale bit and the recache token
//! (`md I`, `ms I`, `mg` W/Z/X, `R`, `N`), the fetched bit (`h`), the access time (`l`) and
//! client-chosen CAS values (`E`), on the single-owner engine and on the shared handle.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use segcache_core::{
    Builder, Error, ManualClock, Policy, ReadOptions, RmwOptions, Segcache, SharedCache, StoreMode, StoreOptions,
};

const T0: u32 = 1_700_000_000;
const NEVER: Duration = Duration::ZERO;
const CLAIM: ReadOptions = ReadOptions { claim_token: true, recache_below: None, no_update: false };
const QUIET: ReadOptions = ReadOptions { claim_token: false, recache_below: None, no_update: true };

fn cache(clock: &Arc<ManualClock>) -> Segcache {
    Builder::new()
        .heap_size(4 << 20)
        .segment_size(64 << 10)
        .clock(clock.clone())
        .eviction(Policy::None)
        .build()
        .unwrap()
}

/// (stale, won, token_sent) as a read with `opts` reports them.
fn token(c: &Segcache, key: &[u8], opts: ReadOptions) -> (bool, bool, bool) {
    let i = c.get_with_options(key, opts).unwrap();
    (i.is_stale(), i.won(), i.token_sent())
}

#[test]
fn invalidation_marks_stale_and_hands_the_token_to_one_reader() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    c.set(b"k", b"v", 3, Duration::from_secs(100)).unwrap();
    let before = c.get(b"k").unwrap().cas();
    assert_eq!(token(&c, b"k", CLAIM), (false, false, false), "a fresh item has no token to give");
    let cas = c.invalidate(b"k", Some(Duration::from_secs(30)), None, None).unwrap();
    assert_ne!(cas, before, "an invalidation is a new version");
    let i = c.get(b"k").unwrap();
    assert_eq!((i.value(), i.flags(), i.cas(), i.ttl()), (&b"v"[..], 3, cas, Some(Duration::from_secs(30))));
    // A plain get takes no token.
    assert_eq!(token(&c, b"k", ReadOptions::default()), (true, false, false));
    assert_eq!(token(&c, b"k", CLAIM), (true, true, false), "the first claim wins");
    assert_eq!(token(&c, b"k", CLAIM), (true, false, true), "the next ones see it taken");
    // A new invalidation forgets the token; the TTL stays without one given.
    c.invalidate(b"k", None, None, None).unwrap();
    assert_eq!(c.get(b"k").unwrap().ttl(), Some(Duration::from_secs(30)));
    assert_eq!(token(&c, b"k", CLAIM), (true, true, false));
    // The recache (a set) makes a fresh item.
    c.set(b"k", b"new", 0, NEVER).unwrap();
    assert_eq!(token(&c, b"k", CLAIM), (false, false, false));
    // Compare and errors.
    let cas = c.get(b"k").unwrap().cas();
    assert!(matches!(c.invalidate(b"k", None, Some(cas + 1), None), Err(Error::Exists)));
    assert!(c.invalidate(b"k", None, Some(cas), Some(77)).is_ok());
    assert_eq!(c.get(b"k").unwrap().cas(), 77);
    assert!(matches!(c.invalidate(b"absent", None, None, None), Err(Error::NotFound)));
}

#[test]
fn a_recache_that_lost_to_a_newer_invalidation_is_stored_stale() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    c.set(b"k", b"v1", 0, Duration::from_secs(100)).unwrap();
    let old = c.get(b"k").unwrap().cas();
    c.invalidate(b"k", Some(Duration::from_secs(50)), None, None).unwrap();
    assert!(c.get_with_options(b"k", CLAIM).unwrap().won());
    let invalidate = StoreOptions { invalidate: true, ..StoreOptions::default() };
    // Without I, the old token fails.
    assert!(matches!(
        c.store_with(b"k", b"v2", 0, Duration::from_secs(900), StoreMode::Cas(old), StoreOptions::default()),
        Err(Error::Exists)
    ));
    // With I, it is stored, stale, with the item's TTL and its token still out.
    c.store_with(b"k", b"v2", 0, Duration::from_secs(900), StoreMode::Cas(old), invalidate).unwrap();
    let i = c.get_with_options(b"k", CLAIM).unwrap();
    assert_eq!((i.value(), i.is_stale(), i.won(), i.token_sent()), (&b"v2"[..], true, false, true));
    assert_eq!(i.ttl(), Some(Duration::from_secs(50)));
    // A matching token stores a fresh item.
    let cur = i.cas();
    c.store_with(b"k", b"v3", 0, NEVER, StoreMode::Cas(cur), invalidate).unwrap();
    assert_eq!(token(&c, b"k", CLAIM), (false, false, false));
}

#[test]
fn recache_window_and_vivified_items_hand_out_one_token() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    c.set(b"k", b"v", 0, Duration::from_secs(100)).unwrap();
    let r = |secs| ReadOptions { recache_below: Some(Duration::from_secs(secs)), ..CLAIM };
    assert_eq!(token(&c, b"k", r(50)), (false, false, false), "100 s left is not below 50");
    clock.advance(60);
    assert_eq!(token(&c, b"k", r(50)), (false, true, false), "40 s left is");
    assert_eq!(token(&c, b"k", r(50)), (false, false, true));
    // Never-expiring items are never in the window.
    c.set(b"n", b"v", 0, NEVER).unwrap();
    assert_eq!(token(&c, b"n", r(u64::from(u32::MAX))), (false, false, false));
    // An item created by a miss (`mg N`) is its creator's to fill.
    let won = StoreOptions { won: true, ..StoreOptions::default() };
    c.store_with(b"viv", b"", 0, Duration::from_secs(30), StoreMode::Add, won).unwrap();
    assert_eq!(token(&c, b"viv", CLAIM), (false, false, true));
    assert!(matches!(c.store_with(b"viv", b"", 0, NEVER, StoreMode::Add, won), Err(Error::NotStored)));
}

#[test]
fn fetched_and_last_access() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    c.set(b"k", b"v", 0, NEVER).unwrap();
    let read = |c: &Segcache, opts| {
        let i = c.get_with_options(b"k", opts).unwrap();
        (i.fetched(), i.last_access().as_secs())
    };
    assert_eq!(read(&c, QUIET), (false, 0), "a quiet read changes nothing");
    assert_eq!(read(&c, ReadOptions::default()), (false, 0), "reported as found");
    assert_eq!(read(&c, QUIET), (true, 0));
    clock.advance(30);
    // The access time is refreshed at most once a minute, as memcached's.
    assert_eq!(read(&c, ReadOptions::default()), (true, 30));
    clock.advance(40);
    assert_eq!(read(&c, ReadOptions::default()), (true, 70));
    clock.advance(5);
    // Access times are kept within an eighth of their segment's age (here 70 s: rounded up to
    // 72 s after the segment opened).
    assert_eq!(read(&c, QUIET), (true, 3));
    clock.advance(100);
    assert_eq!(read(&c, QUIET), (true, 103));
    // A store is a new version, not fetched, accessed now; an invalidation keeps the bit; a
    // touch keeps both.
    c.set(b"k", b"w", 0, NEVER).unwrap();
    assert_eq!(read(&c, QUIET), (false, 0));
    c.get(b"k").unwrap();
    c.invalidate(b"k", None, None, None).unwrap();
    assert_eq!(read(&c, QUIET), (true, 0));
    clock.advance(10);
    // (A touch moves the record to a segment opened now: it cannot date an access earlier.)
    c.touch(b"k", Duration::from_secs(3600)).unwrap();
    assert_eq!(read(&c, QUIET), (true, 0));
    clock.advance(10);
    assert_eq!(read(&c, QUIET), (true, 10));
    // The same through a rewrite in place (same length, no file).
    c.set(b"k", b"x", 0, Duration::from_secs(3600)).unwrap();
    assert_eq!(read(&c, QUIET), (false, 0));
}

#[test]
fn client_chosen_cas_values() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    let e = |cas| StoreOptions { cas: Some(cas), ..StoreOptions::default() };
    let big = 0xfedc_ba98_7654_3210;
    assert_eq!(c.store_with(b"k", b"v", 5, NEVER, StoreMode::Set, e(big)).unwrap(), big);
    let i = c.get(b"k").unwrap();
    assert_eq!((i.value(), i.flags(), i.cas()), (&b"v"[..], 5, big));
    assert!(matches!(c.cas(b"k", b"v", 5, NEVER, big + 1), Err(Error::Exists)));
    // Same length, flags and CAS kind: a rewrite in place keeps the layout right.
    c.store_with(b"k", b"w", 5, NEVER, StoreMode::Cas(big), e(7)).unwrap();
    assert_eq!((c.get(b"k").unwrap().value(), c.get(b"k").unwrap().cas()), (&b"w"[..], 7));
    // Back to a counter value: a different layout of the same length as before.
    c.set(b"k", b"wxyz", 5, NEVER).unwrap();
    let i = c.get(b"k").unwrap();
    assert_eq!((i.value(), i.flags()), (&b"wxyz"[..], 5));
    assert_ne!(i.cas(), 7);
    c.cas(b"k", b"abcd", 5, NEVER, i.cas()).unwrap();
    assert_eq!(c.get(b"k").unwrap().value(), b"abcd");
    // A delete that compares (memcached's `md C`), in one step.
    let cas = c.get(b"k").unwrap().cas();
    assert!(matches!(c.delete_cas(b"k", cas + 1), Err(Error::Exists)));
    c.delete_cas(b"k", cas).unwrap();
    assert!(matches!(c.delete_cas(b"k", cas), Err(Error::NotFound)));
}

#[test]
fn exactly_one_of_many_threads_wins_the_token() {
    let cache: Arc<SharedCache> = Arc::new(Builder::new().heap_size(16 << 20).shards(2).build_shared().unwrap());
    const THREADS: usize = 8;
    for round in 0..50 {
        let key = format!("key-{round}");
        cache.set(key.as_bytes(), b"value", 0, Duration::from_secs(300)).unwrap();
        cache.invalidate(key.as_bytes(), None, None, None).unwrap();
        let (wins, taken) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (cache, key, wins, taken, barrier) =
                    (cache.clone(), key.clone(), wins.clone(), taken.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    for _ in 0..20 {
                        let (stale, won, sent) = cache
                            .get_with_options(key.as_bytes(), CLAIM, |i| (i.is_stale(), i.won(), i.token_sent()))
                            .unwrap();
                        assert!(stale && won != sent);
                        if won {
                            wins.fetch_add(1, Relaxed);
                        } else {
                            taken.fetch_add(1, Relaxed);
                        }
                        // Plain reads beside them bump the slot: they must not lose the token.
                        cache.get_with(key.as_bytes(), |_| ()).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(wins.load(Relaxed), 1, "round {round}");
        assert_eq!(taken.load(Relaxed), THREADS * 20 - 1);
    }
}

#[test]
fn shared_handle_reports_state_through_lock_free_reads() {
    let clock = ManualClock::new(T0);
    let cache = Builder::new().heap_size(16 << 20).shards(2).clock(clock.clone()).build_shared().unwrap();
    cache.set(b"k", b"v", 0, NEVER).unwrap();
    let read = |opts| cache.get_with_options(b"k", opts, |i| (i.fetched(), i.last_access().as_secs())).unwrap();
    assert_eq!(read(ReadOptions::default()), (false, 0));
    assert_eq!(read(ReadOptions::default()), (true, 0));
    clock.advance(90);
    assert_eq!(read(ReadOptions::default()), (true, 90), "due: refreshed under the lock");
    clock.advance(3);
    // (Within an eighth of the segment's age: 90 s is kept as 96.)
    assert_eq!(read(QUIET), (true, 0));
    clock.advance(10);
    assert_eq!(read(QUIET), (true, 7));
    // A set rewritten in place under the shared lock is a new version.
    cache.set(b"k", b"w", 0, NEVER).unwrap();
    assert_eq!(read(QUIET), (false, 0));
    let big = vec![1u8; 4000];
    cache.set(b"large", &big, 0, NEVER).unwrap();
    cache.invalidate(b"large", None, None, None).unwrap();
    let claim = |k: &[u8]| cache.get_with_options(k, CLAIM, |i| (i.is_stale(), i.won(), i.value().len())).unwrap();
    assert_eq!(claim(b"large"), (true, true, 4000));
    assert_eq!(claim(b"large"), (true, false, 4000));
}

/// Read-modify-writes under conditions (memcached's meta `C` and `E`, and `-I`): the compare,
/// the size check and the write are one step; each returns the CAS value its own write made; an
/// increment that keeps the number's length keeps the item's state, as memcached's in-place
/// write does, compared or not.
#[test]
fn conditional_read_modify_writes_report_their_own_version() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    c.set(b"n", b"10", 5, Duration::from_secs(1000)).unwrap();
    let cas = c.get(b"n").unwrap().cas();
    let stale = RmwOptions { compare: Some(cas + 1), ..RmwOptions::default() };
    assert!(matches!(c.add_delta_with(b"n", true, 1, stale), Err(Error::Exists)));
    // A stale item whose token went out keeps both through an increment in place.
    c.invalidate(b"n", None, None, None).unwrap();
    assert_eq!(token(&c, b"n", CLAIM), (true, true, false));
    clock.advance(100);
    let cas = c.get_with_options(b"n", QUIET).unwrap().cas();
    let d = c.add_delta_with(b"n", true, 1, RmwOptions { compare: Some(cas), ..RmwOptions::default() }).unwrap();
    let i = c.get_with_options(b"n", QUIET).unwrap();
    assert_eq!((d.value, d.grew, i.cas(), i.value(), i.flags()), (11, false, d.cas, &b"11"[..], 5));
    assert_eq!((i.is_stale(), i.token_sent()), (true, true));
    // (TTLs are rounded down to a TTL bucket's width, never later than asked.)
    assert!(i.ttl().is_some_and(|t| t <= Duration::from_secs(900) && t >= Duration::from_secs(800)), "{:?}", i.ttl());
    let d = c.add_delta_with(b"n", false, 2, RmwOptions { cas: Some(4242), ..RmwOptions::default() }).unwrap();
    assert_eq!((d.value, d.cas, c.get(b"n").unwrap().cas()), (9, 4242, 4242));

    // Appends: the caller's size check sees the client flags and the joined length.
    c.set(b"a", b"abc", 7, NEVER).unwrap();
    let seen = std::cell::Cell::new((0, 0));
    let small = |flags: u32, len: usize| {
        seen.set((flags, len));
        len <= 5
    };
    let opts = RmwOptions { fits: Some(&small), ..RmwOptions::default() };
    assert!(matches!(c.append_with(b"a", b"def", opts), Err(Error::NotStored)));
    assert_eq!((seen.get(), c.get(b"a").unwrap().value()), ((7, 6), &b"abc"[..]));
    let cas = c.prepend_with(b"a", b"<", opts).unwrap();
    let i = c.get(b"a").unwrap();
    assert_eq!((i.value(), i.cas()), (&b"<abc"[..], cas));
    let wrong = RmwOptions { compare: Some(cas + 1), ..RmwOptions::default() };
    assert!(matches!(c.append_with(b"a", b"!", wrong), Err(Error::Exists)));
    assert!(matches!(c.append_with(b"absent", b"!", RmwOptions::default()), Err(Error::NotStored)));

    // The shared handle: the same calls.
    let shared = Builder::new().heap_size(4 << 20).segment_size(64 << 10).build_shared().unwrap();
    shared.set(b"n", b"1", 0, NEVER).unwrap();
    let cas = shared.get(b"n").unwrap().cas;
    let d = shared.add_delta_with(b"n", true, 1, RmwOptions { compare: Some(cas), ..RmwOptions::default() }).unwrap();
    assert_eq!((d.value, shared.get(b"n").unwrap().cas), (2, d.cas));
    let cas = shared.append_with(b"n", b"0", RmwOptions::default()).unwrap();
    assert_eq!(shared.get(b"n").unwrap().cas, cas);
}
