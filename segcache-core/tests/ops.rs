//! Operation semantics of the engine (memcached's), with a manual clock.

use std::sync::Arc;
use std::time::Duration;

use segcache_core::{Builder, Error, ManualClock, Policy, Segcache};

const T0: u32 = 1_700_000_000;
const NEVER: Duration = Duration::ZERO;

fn cache(clock: &Arc<ManualClock>) -> Segcache {
    Builder::new()
        .heap_size(4 << 20)
        .segment_size(64 << 10)
        .clock(clock.clone())
        .eviction(Policy::None)
        .build()
        .unwrap()
}

#[test]
fn set_get_replace_and_flags() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    assert!(c.get(b"a").is_none());
    c.set(b"a", b"1", 0, NEVER).unwrap();
    c.set(b"b", b"two", 0xdead_beef, NEVER).unwrap();
    let a = c.get(b"a").unwrap();
    assert_eq!((a.key(), a.value(), a.flags(), a.ttl()), (&b"a"[..], &b"1"[..], 0, None));
    assert_eq!(c.get(b"b").unwrap().flags(), 0xdead_beef);
    c.set(b"a", b"uno", 5, NEVER).unwrap();
    assert_eq!(c.get(b"a").unwrap().value(), b"uno");
    assert_eq!(c.get(b"a").unwrap().flags(), 5);
    assert_eq!(c.len(), 2);
    let s = c.stats();
    assert_eq!((s.items, s.sets), (2, 3));
    assert!(s.get_hits >= 4 && s.get_misses == 1);
}

#[test]
fn add_replace_cas_semantics() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    assert!(matches!(c.replace(b"k", b"v", 0, NEVER), Err(Error::NotStored)));
    c.add(b"k", b"v1", 0, NEVER).unwrap();
    assert!(matches!(c.add(b"k", b"v2", 0, NEVER), Err(Error::NotStored)));
    c.replace(b"k", b"v3", 0, NEVER).unwrap();
    assert_eq!(c.get(b"k").unwrap().value(), b"v3");
    let cas = c.get(b"k").unwrap().cas();
    c.cas(b"k", b"v4", 0, NEVER, cas).unwrap();
    assert!(matches!(c.cas(b"k", b"v5", 0, NEVER, cas), Err(Error::Exists)), "stale CAS must fail");
    assert_eq!(c.get(b"k").unwrap().value(), b"v4");
    let fresh = c.get(b"k").unwrap().cas();
    assert_ne!(fresh, cas);
    assert!(matches!(c.cas(b"missing", b"x", 0, NEVER, fresh), Err(Error::NotFound)));
    c.delete(b"k").unwrap();
    assert!(matches!(c.cas(b"k", b"x", 0, NEVER, fresh), Err(Error::NotFound)));
}

#[test]
fn append_prepend_keep_flags_and_ttl() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    assert!(matches!(c.append(b"k", b"x"), Err(Error::NotStored)));
    assert!(matches!(c.prepend(b"k", b"x"), Err(Error::NotStored)));
    c.set(b"k", b"mid", 42, Duration::from_secs(100)).unwrap();
    c.append(b"k", b"-end").unwrap();
    c.prepend(b"k", b"start-").unwrap();
    let i = c.get(b"k").unwrap();
    assert_eq!((i.value(), i.flags()), (&b"start-mid-end"[..], 42));
    assert_eq!(i.ttl(), Some(Duration::from_secs(100)));
    clock.advance(100);
    assert!(c.get(b"k").is_none(), "append must not extend the TTL");
}

#[test]
fn incr_decr_as_memcached() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    assert!(matches!(c.incr(b"n", 1), Err(Error::NotFound)));
    c.set(b"n", b"10", 3, NEVER).unwrap();
    assert_eq!(c.incr(b"n", 5).unwrap(), 15);
    assert_eq!(c.decr(b"n", 20).unwrap(), 0, "decr floors at 0");
    c.set(b"n", b"18446744073709551615", 0, NEVER).unwrap();
    assert_eq!(c.incr(b"n", 2).unwrap(), 1, "incr wraps at 2^64");
    assert_eq!(c.get(b"n").unwrap().value(), b"1");
    assert_eq!(c.get(b"n").unwrap().flags(), 0);
    c.set(b"s", b"12a", 0, NEVER).unwrap();
    assert!(matches!(c.incr(b"s", 1), Err(Error::NotNumeric)));
    c.set(b"s", b"", 0, NEVER).unwrap();
    assert!(matches!(c.decr(b"s", 1), Err(Error::NotNumeric)));
    c.set(b"s", b"99999999999999999999999", 0, NEVER).unwrap();
    assert!(matches!(c.incr(b"s", 1), Err(Error::NotNumeric)), "more than 64 bits");
    assert_eq!(c.get(b"s").unwrap().value(), b"99999999999999999999999", "failed incr changes nothing");
}

/// A rewrite of the same length goes where the old record lies, so overwrites take no segment
/// space: here, a hundred thousand of them in a 1 MiB heap with eviction off (appended, they
/// would need 1.4 MiB). Value, flags and CAS change each time.
#[test]
fn same_length_rewrites_take_no_new_space() {
    let clock = ManualClock::new(T0);
    let mut c = Builder::new()
        .heap_size(1 << 20)
        .segment_size(64 << 10)
        .clock(clock.clone())
        .eviction(Policy::None)
        .build()
        .unwrap();
    c.set(b"k", b"v0000", 1, NEVER).unwrap();
    let free = c.stats().segments_free;
    let mut cas = c.get(b"k").unwrap().cas();
    for i in 1..100_000u32 {
        let v = format!("v{:04}", i % 10_000);
        c.set(b"k", v.as_bytes(), 1 + i % 7, NEVER).unwrap();
        let item = c.get(b"k").unwrap();
        assert_eq!((item.value(), item.flags()), (v.as_bytes(), 1 + i % 7));
        assert_ne!(item.cas(), cas, "a rewrite keeps its CAS");
        cas = item.cas();
    }
    let s = c.stats();
    assert_eq!((s.items, s.sets, s.segments_free), (1, 100_000, free));
}

/// A rewrite stays in place only where the old segment's expiry is the one an append would give
/// the new TTL; otherwise it is appended, and the item expires as the new TTL says.
#[test]
fn rewrites_in_place_keep_the_new_ttl() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    let ten = Duration::from_secs(10);
    c.set(b"k", b"aaaa", 0, ten).unwrap();
    clock.advance(5);
    // Its segment expires at T0 + 10: in place, the new value would expire 5 s early.
    c.set(b"k", b"bbbb", 0, ten).unwrap();
    clock.advance(7);
    assert_eq!(
        c.get(b"k").map(|i| (i.value().to_vec(), i.ttl())),
        Some((b"bbbb".to_vec(), Some(Duration::from_secs(3))))
    );
    // Another TTL bucket: no expiry at all, then a TTL again.
    c.set(b"k", b"cccc", 0, NEVER).unwrap();
    clock.advance(1000);
    assert_eq!(c.get(b"k").map(|i| (i.value().to_vec(), i.ttl())), Some((b"cccc".to_vec(), None)));
    c.set(b"k", b"dddd", 0, ten).unwrap();
    assert_eq!(c.get(b"k").unwrap().ttl(), Some(ten));
    clock.advance(10);
    assert!(c.get(b"k").is_none());
}

#[test]
fn ttl_expiry_touch_and_never_returning_expired_items() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    c.set(b"short", b"1", 0, Duration::from_secs(5)).unwrap();
    c.set(b"long", b"2", 0, Duration::from_secs(3600)).unwrap();
    c.set(b"forever", b"3", 0, NEVER).unwrap();
    clock.advance(4);
    assert_eq!(c.get(b"short").unwrap().ttl(), Some(Duration::from_secs(1)));
    clock.advance(1);
    assert!(c.get(b"short").is_none(), "expired at exactly its TTL");
    assert!(c.get(b"long").is_some());
    c.touch(b"long", Duration::from_secs(10)).unwrap();
    assert!(matches!(c.touch(b"short", Duration::from_secs(10)), Err(Error::NotFound)));
    clock.advance(10);
    assert!(c.get(b"long").is_none(), "touch shortened the TTL");
    assert!(c.get(b"forever").is_some());
    // The expired segments are freed whole.
    let removed = c.expire();
    assert!(removed >= 1, "expire removed {removed}");
    assert!(c.stats().expired_segments >= 2);
    assert_eq!(c.len(), 1);
}

#[test]
fn flush_now_and_later() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    c.set(b"a", b"1", 0, NEVER).unwrap();
    c.flush();
    assert!(c.get(b"a").is_none());
    assert_eq!(c.len(), 0);
    c.set(b"b", b"2", 0, NEVER).unwrap();
    c.flush_after(Duration::from_secs(10));
    clock.advance(9);
    assert!(c.get(b"b").is_some());
    clock.advance(1);
    assert!(c.get(b"b").is_none(), "delayed flush took effect");
    c.set(b"c", b"3", 0, NEVER).unwrap();
    assert!(c.get(b"c").is_some(), "items stored after the flush time survive");
    assert!(c.get(b"b").is_none());
}

/// Every read path (get, contains, get_many) reads the clock only once it has found the key's
/// slot; a flushed or expired item must still never come back through any of them.
#[test]
fn reads_never_return_flushed_or_expired_items() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("key-{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let visible = |c: &Segcache, refs: &[&[u8]]| -> (usize, usize, usize) {
        let gets = refs.iter().filter(|k| c.get(k).is_some()).count();
        let contains = refs.iter().filter(|k| c.contains(k)).count();
        let many = c.get_many(refs).iter().filter(|i| i.is_some()).count();
        (gets, contains, many)
    };
    for k in &refs[..20] {
        c.set(k, b"forever", 0, NEVER).unwrap();
    }
    for k in &refs[20..] {
        c.set(k, b"short", 0, Duration::from_secs(2)).unwrap();
    }
    assert_eq!(visible(&c, &refs), (40, 40, 40));
    clock.advance(2);
    assert_eq!(visible(&c, &refs), (20, 20, 20), "expired items are hidden from every read");
    c.flush_after(Duration::from_secs(5));
    clock.advance(4);
    assert_eq!(visible(&c, &refs), (20, 20, 20), "a pending flush hides nothing yet");
    clock.advance(1);
    assert_eq!(visible(&c, &refs), (0, 0, 0), "a delayed flush hides every item from every read");
    let misses = c.stats().get_misses;
    assert!(c.get(refs[0]).is_none());
    assert_eq!(c.stats().get_misses, misses + 1, "a flushed item counts as a miss");
    c.set(refs[0], b"again", 0, NEVER).unwrap();
    assert_eq!(visible(&c, &refs), (1, 1, 1), "only the item stored after the flush");
}

/// Reads take the longest key there is and miss on keys no write accepts (empty, over-long),
/// on both handles (the shared one's lock-free path and its locked one alike).
#[test]
fn reads_miss_on_keys_no_write_accepts() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    let longest = vec![b'k'; 250];
    c.set(&longest, b"v", 0, NEVER).unwrap();
    assert_eq!(c.get(&longest).map(|i| i.value().to_vec()), Some(b"v".to_vec()));
    assert!(c.get(b"").is_none());
    assert!(c.get(&[b'k'; 251]).is_none());

    let shared = Builder::new().heap_size(4 << 20).segment_size(64 << 10).build_shared().unwrap();
    shared.set(&longest, b"v", 0, NEVER).unwrap();
    assert_eq!(shared.get_with(&longest, |i| i.value().to_vec()), Some(b"v".to_vec()));
    assert!(shared.get(b"").is_none());
    assert!(shared.get(&[b'k'; 251]).is_none());
    assert!(!shared.contains(b""));
    let mut found = Vec::new();
    shared.get_many_with(&[b"".as_slice(), &longest, &[b'k'; 251]], |at, i| found.push((at, i.value().to_vec())));
    assert_eq!(found, vec![(1, b"v".to_vec())]);
}

#[test]
fn bad_input_gets_typed_errors() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    assert!(matches!(c.set(b"", b"v", 0, NEVER), Err(Error::EmptyKey)));
    let long = vec![b'k'; 251];
    assert!(matches!(c.set(&long, b"v", 0, NEVER), Err(Error::KeyTooLong { len: 251 })));
    c.set(&long[..250], b"v", 0, NEVER).unwrap();
    let big = vec![0u8; 64 << 10];
    let err = c.set(b"big", &big, 0, NEVER).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    let max = c.max_item_size();
    c.set(b"fits", &big[..max - 4], 0, NEVER).unwrap();
    assert_eq!(c.get(b"fits").unwrap().value().len(), max - 4);
    assert!(c.get(&long).is_none());
    assert!(matches!(c.delete(b"nothing"), Err(Error::NotFound)));
    for (name, b) in [
        ("segment", Builder::new().segment_size(1000)),
        ("heap", Builder::new().heap_size(1 << 20).segment_size(1 << 20)),
        ("hash", Builder::new().hash_power(60)),
        ("shards", Builder::new().shards(3)),
    ] {
        let e = if name == "shards" { b.build_shared().map(drop) } else { b.build().map(drop) };
        assert!(matches!(e, Err(Error::InvalidConfig(_))), "{name}");
    }
}

#[test]
fn empty_and_binary_values() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    c.set(b"empty", b"", 0, NEVER).unwrap();
    assert_eq!(c.get(b"empty").unwrap().value(), b"");
    let bin: Vec<u8> = (0..=255).collect();
    c.set(b"\x00\xffbin\r\n", &bin, 1, NEVER).unwrap();
    assert_eq!(c.get(b"\x00\xffbin\r\n").unwrap().value(), &bin[..]);
}

/// `SharedCache::get_many_with` reads by batches whose lines it fetches first: every key of
/// several batches and a last, partial one, spread over shards, is answered once, under its own
/// index and with its own value, whether a hit, a miss, a repeated key or an item too large for
/// a read without the lock.
#[test]
fn shared_get_many_answers_every_key_of_every_batch_once() {
    let c = Builder::new().heap_size(32 << 20).shards(4).build_shared().unwrap();
    let value = |k: usize| match k % 7 {
        0 => vec![k as u8; 2000],
        n => (k as u32).to_le_bytes().repeat(n),
    };
    for k in (0..100).filter(|k| k % 3 != 0) {
        c.set(format!("k{k}").as_bytes(), &value(k), 0, NEVER).unwrap();
    }
    // Keys 0..100, then 5 repeated inside a batch, in an order unlike the stores'.
    let ks: Vec<usize> = (0..100).rev().chain([5, 7, 5, 8, 5]).collect();
    let keys: Vec<Vec<u8>> = ks.iter().map(|k| format!("k{k}").into_bytes()).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let mut seen: Vec<Option<Vec<u8>>> = vec![None; refs.len()];
    c.get_many_with(&refs, |i, item| {
        assert!(seen[i].is_none(), "index {i} answered twice");
        assert_eq!(item.key(), refs[i], "index {i}");
        seen[i] = Some(item.value().to_vec());
    });
    for (i, &k) in ks.iter().enumerate() {
        assert_eq!(seen[i], (k % 3 != 0).then(|| value(k)), "index {i}, key {k}");
    }
}

#[test]
fn get_many_returns_hits_in_order() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    for i in 0..40u32 {
        if i % 3 != 0 {
            c.set(format!("k{i}").as_bytes(), &i.to_le_bytes(), 0, NEVER).unwrap();
        }
    }
    let keys: Vec<Vec<u8>> = (0..40u32).map(|i| format!("k{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let got = c.get_many(&refs);
    for (i, g) in got.iter().enumerate() {
        match g {
            Some(item) => {
                assert_ne!(i % 3, 0);
                assert_eq!(item.value(), &(i as u32).to_le_bytes());
            }
            None => assert_eq!(i % 3, 0),
        }
    }
}

#[test]
fn no_eviction_fails_cleanly_when_full_and_keeps_everything() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    let value = [7u8; 1000];
    let mut stored = 0;
    let err = loop {
        match c.set(format!("key{stored}").as_bytes(), &value, 0, NEVER) {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::NoMemory), "{err}");
    assert!(stored > 3000, "{stored}");
    for i in 0..stored {
        assert_eq!(c.get(format!("key{i}").as_bytes()).unwrap().value(), &value[..], "key{i}");
    }
    // Deleting frees no segment (log-structured), but overwriting in place is still refused
    // without room; deletes themselves always work.
    c.delete(b"key0").unwrap();
    assert!(c.get(b"key0").is_none());
}

#[test]
fn every_evicting_policy_keeps_serving_correct_values() {
    const PAD: &str = "................................................................................";
    for policy in Policy::ALL.into_iter().filter(|p| *p != Policy::None) {
        let clock = ManualClock::new(T0);
        let mut c = Builder::new()
            .heap_size(2 << 20)
            .segment_size(64 << 10)
            .clock(clock.clone())
            .eviction(policy)
            .build()
            .unwrap();
        let n = 40_000u32;
        for i in 0..n {
            let key = format!("key{i}");
            let ttl = if i % 5 == 0 { Duration::from_secs(30 + u64::from(i % 7)) } else { NEVER };
            c.set(key.as_bytes(), format!("value-{i}-{policy}-{PAD}").as_bytes(), i, ttl).unwrap();
            // Read some keys often so that frequency-aware policies have something to keep.
            if i % 10 == 0 {
                for j in 0..5 {
                    let _ = c.get(format!("key{}", j * 7).as_bytes());
                }
            }
            if i % 8000 == 0 {
                clock.advance(20);
            }
        }
        let s = c.stats();
        assert!(s.evicted_segments > 0 || s.expired_segments > 0, "{policy}: nothing evicted: {s:?}");
        let mut hits = 0;
        for i in 0..n {
            if let Some(item) = c.get(format!("key{i}").as_bytes()) {
                hits += 1;
                assert_eq!(item.value(), format!("value-{i}-{policy}-{PAD}").as_bytes(), "{policy}");
                assert_eq!(item.flags(), i, "{policy}");
            }
        }
        assert!(hits > 5_000, "{policy}: only {hits} items retained");
        assert_eq!(s.items as usize, c.len());
        if matches!(policy, Policy::Merge | Policy::S3Fifo) {
            for hot in [7, 14, 21, 28] {
                assert!(c.get(format!("key{hot}").as_bytes()).is_some(), "{policy}: hot key{hot} kept");
            }
            assert!(s.merged_items > 0, "{policy}: {s:?}");
        }
    }
}

/// With room to spare (live items a quarter of the heap), overwrites leave dead copies behind
/// (values of two lengths, so that they are not rewritten in place);
/// merge eviction must reclaim that space without dropping a live item, in the single engine and
/// in the sharded handle (few segments per shard). Without a file, merges compact their sources
/// in place, so live records move over the dead ones before them.
#[test]
fn merge_reclaims_overwritten_space_without_losing_items() {
    const KEYS: u64 = 20_000;
    let value = |k: u64, v: u64| format!("{k:08}-{v:08}-{}", "x".repeat(64 + (v % 2) as usize)).into_bytes();
    let b = || Builder::new().heap_size(8 << 20).segment_size(64 << 10).eviction(Policy::Merge);
    let mut single = b().build().unwrap();
    let shared = b().shards(4).build_shared().unwrap();
    let mut latest = vec![0u64; KEYS as usize];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..30 * KEYS {
        // First every key once, then overwrites, nine in ten to a hot twentieth of the keys: the
        // rest stay where the fill put them, in densely live segments.
        let k = if round < KEYS {
            round
        } else {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(10) {
                x % KEYS
            } else {
                x % (KEYS / 20)
            }
        };
        latest[k as usize] = round;
        let key = format!("key-{k}");
        single.set(key.as_bytes(), &value(k, round), 0, Duration::ZERO).unwrap();
        shared.set(key.as_bytes(), &value(k, round), 0, Duration::ZERO).unwrap();
    }
    assert!(single.stats().evicted_segments > 0 && shared.stats().evicted_segments > 0, "the heap never filled");
    for k in 0..KEYS {
        let key = format!("key-{k}");
        let want = value(k, latest[k as usize]);
        assert_eq!(single.get(key.as_bytes()).map(|i| i.value().to_vec()), Some(want.clone()), "Segcache lost {key}");
        assert_eq!(shared.get(key.as_bytes()).map(|i| i.value), Some(want), "SharedCache lost {key}");
    }
    assert_eq!(single.stats().evicted_items, 0);
    assert_eq!(shared.stats().evicted_items, 0);
    assert!(single.stats().merged_items > 0 && shared.stats().merged_items > 0, "no merge moved an item");
}

/// Without a file a merge keeps no spare segment to copy into: it compacts its newest source in
/// place (`merge_reclaims_overwritten_space_without_losing_items` checks that nothing is lost).
#[test]
fn merge_without_a_file_holds_no_segment_back() {
    let c = Builder::new().heap_size(1 << 20).segment_size(64 << 10).eviction(Policy::Merge).build().unwrap();
    let s = c.stats();
    assert_eq!(s.segments_free, s.segments_total);
}

#[test]
fn oversized_appends_fail_before_copying_and_keep_the_old_value() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    let max = c.max_item_size();
    c.set(b"k", b"old", 5, NEVER).unwrap();
    let big = vec![b'x'; max];
    for r in [c.append(b"k", &big), c.prepend(b"k", &big), c.append(b"absent", &big)] {
        assert!(matches!(r, Err(Error::TooLarge { .. })), "{r:?}");
    }
    // Each part fits, the two joined do not.
    let half = vec![b'y'; max - 3];
    c.set(b"j", b"12345", 0, NEVER).unwrap();
    assert!(matches!(c.append(b"j", &half), Err(Error::TooLarge { .. })));
    assert!(matches!(c.prepend(b"j", &half), Err(Error::TooLarge { .. })));
    let (k, j) = (c.get(b"k").unwrap(), c.get(b"j").unwrap());
    assert_eq!((k.value(), k.flags(), j.value()), (&b"old"[..], 5, &b"12345"[..]));
    // Right at the limit still works.
    c.append(b"j", &half[..max - 1 - 5]).unwrap();
    assert_eq!(c.get(b"j").unwrap().value().len(), max - 1);
}

#[test]
fn shorter_numbers_are_padded_only_when_asked() {
    let clock = ManualClock::new(T0);
    for pad in [false, true] {
        let mut c = Builder::new()
            .heap_size(4 << 20)
            .segment_size(64 << 10)
            .clock(clock.clone())
            .pad_numbers(pad)
            .build()
            .unwrap();
        c.set(b"n", b"100", 3, NEVER).unwrap();
        assert_eq!(c.decr(b"n", 1).unwrap(), 99);
        assert_eq!(c.decr(b"n", 90).unwrap(), 9);
        let want: &[u8] = if pad { b"9  " } else { b"9" };
        assert_eq!((c.get(b"n").unwrap().value(), c.get(b"n").unwrap().flags()), (want, 3));
        // Padded or not, it reads back as the number and grows again.
        assert_eq!(c.incr(b"n", 991).unwrap(), 1000);
        assert_eq!(c.get(b"n").unwrap().value(), b"1000");
    }
}

/// A lowered memory limit caps the segments in use (the rest stay free, and fills evict within
/// the limit); lifting it lets the cache use the whole heap again. More than the heap is refused.
#[test]
fn memory_limit_caps_segments_in_use() {
    let clock = ManualClock::new(T0);
    let seg = 64 << 10;
    let mut c = Builder::new().heap_size(1 << 20).segment_size(seg).clock(clock.clone()).build().unwrap();
    let total = c.stats().segments_total;
    let fill = |c: &mut Segcache, from: u32| {
        for i in from..from + 20_000 {
            c.set(format!("key{i}").as_bytes(), &[b'v'; 100], 0, NEVER).unwrap();
        }
    };
    c.set_memory_limit(4 * seg).unwrap();
    assert_eq!(c.memory_limit(), 4 * seg);
    fill(&mut c, 0);
    let s = c.stats();
    assert_eq!(s.segments_total - s.segments_free, 4, "{s:?}");
    assert!(s.evicted_items > 0);
    // The most recent items are still there and correct.
    assert_eq!(c.get(b"key19999").unwrap().value(), &[b'v'; 100]);
    c.set_memory_limit(1 << 20).unwrap();
    fill(&mut c, 20_000);
    let s = c.stats();
    assert!(s.segments_total - s.segments_free > 4, "{s:?}");
    assert!(matches!(c.set_memory_limit((1 << 20) + 1), Err(Error::InvalidConfig(_))));
    assert_eq!(total, s.segments_total);
}

/// Items that expire or are evicted without a read since their store are counted apart
/// (memcached's `expired_unfetched`, `evicted_unfetched`); a store after a read makes the item
/// unfetched again.
#[test]
fn unfetched_items_are_counted_when_they_go() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    for i in 0..100u32 {
        c.set(format!("e{i}").as_bytes(), b"v", 0, Duration::from_secs(10)).unwrap();
    }
    for i in 0..30u32 {
        assert!(c.get(format!("e{i}").as_bytes()).is_some());
    }
    // Read, then stored again: unfetched.
    c.set(b"e0", b"w", 0, Duration::from_secs(10)).unwrap();
    clock.advance(40);
    c.expire();
    let s = c.stats();
    assert_eq!((s.expired_items, s.expired_unfetched, s.evicted_unfetched), (100, 71, 0), "{s:?}");
}

/// Evicted items never read count as unfetched, under each policy's way of evicting (whole
/// segments, merges, a full hash chain); read ones do not.
#[test]
fn unfetched_items_are_counted_when_evicted() {
    for policy in [Policy::Fifo, Policy::Merge, Policy::S3Fifo] {
        let clock = ManualClock::new(T0);
        let mut c = Builder::new()
            .heap_size(1 << 20)
            .segment_size(64 << 10)
            .clock(clock.clone())
            .eviction(policy)
            .build()
            .unwrap();
        for i in 0..40_000u32 {
            c.set(format!("u{i}").as_bytes(), &[b'v'; 50], 0, NEVER).unwrap();
        }
        let s = c.stats();
        assert!(s.evicted_items > 0 && s.evicted_unfetched == s.evicted_items, "{policy:?}: {s:?}");
        // Read every item still there, then evict by writing new ones: the read ones that go are
        // not unfetched (S3-FIFO keeps read items: only new ones go).
        if policy == Policy::S3Fifo {
            continue;
        }
        for i in 0..40_000u32 {
            let _ = c.get(format!("u{i}").as_bytes());
        }
        let before = c.stats();
        for i in 0..40_000u32 {
            c.set(format!("w{i}").as_bytes(), &[b'v'; 50], 0, NEVER).unwrap();
        }
        let s = c.stats();
        let evicted = s.evicted_items - before.evicted_items;
        let unfetched = s.evicted_unfetched - before.evicted_unfetched;
        assert!(evicted >= unfetched + before.items / 2, "{policy:?}: {evicted} evicted, {unfetched} unfetched");
    }
}

/// `add_delta` tells whether the result outgrew the old value, as memcached decides between
/// writing in place and writing a new item (with padding, a shorter result keeps the length).
#[test]
fn add_delta_reports_growth() {
    let clock = ManualClock::new(T0);
    let mut c =
        Builder::new().heap_size(4 << 20).segment_size(64 << 10).clock(clock).pad_numbers(true).build().unwrap();
    c.set(b"n", b"9", 0, NEVER).unwrap();
    let d = c.add_delta(b"n", true, 1).unwrap();
    assert_eq!((d.value, d.grew), (10, true));
    let d = c.add_delta(b"n", false, 5).unwrap();
    assert_eq!((d.value, d.grew), (5, false));
    assert_eq!(c.get(b"n").unwrap().value(), b"5 ");
    let d = c.add_delta(b"n", true, 94).unwrap();
    assert_eq!((d.value, d.grew), (99, false));
    let d = c.add_delta(b"n", true, 1).unwrap();
    assert_eq!((d.value, d.grew), (100, true));
}

/// A miss that finds the key's item expired or flushed is counted apart (memcached's
/// `get_expired`, `get_flushed`), besides the miss; a key never stored is a plain miss. The
/// shared handle counts the same, on its lock-free reads and its batched ones.
#[test]
fn misses_on_expired_and_flushed_items_are_counted_apart() {
    let clock = ManualClock::new(T0);
    let mut c = cache(&clock);
    c.set(b"short", b"v", 0, Duration::from_secs(10)).unwrap();
    c.set(b"long", b"v", 0, NEVER).unwrap();
    clock.advance(20);
    assert!(c.get(b"short").is_none() && c.get(b"absent").is_none());
    assert_eq!(c.get_many(&[b"short", b"absent", b"long"]).iter().filter(|i| i.is_some()).count(), 1);
    let s = c.stats();
    assert_eq!((s.get_misses, s.get_expired, s.get_flushed), (4, 2, 0), "{s:?}");
    // A flush frees everything at once (later reads are plain misses); one that waits for its
    // time leaves the items in place until then.
    c.flush_after(Duration::from_secs(5));
    clock.advance(5);
    assert!(c.get(b"long").is_none());
    let s = c.stats();
    assert_eq!((s.get_misses, s.get_expired, s.get_flushed), (5, 2, 1), "{s:?}");

    let clock = ManualClock::new(T0);
    let shared = segcache_core::SharedCache::builder()
        .heap_size(4 << 20)
        .segment_size(64 << 10)
        .clock(clock.clone())
        .build_shared()
        .unwrap();
    shared.set(b"short", b"v", 0, Duration::from_secs(10)).unwrap();
    shared.set(b"big", &[b'v'; 4096], 0, Duration::from_secs(10)).unwrap();
    shared.set(b"long", b"v", 0, NEVER).unwrap();
    clock.advance(20);
    assert!(shared.get(b"short").is_none() && shared.get(b"big").is_none() && shared.get(b"absent").is_none());
    assert_eq!(shared.get_many(&[b"short", b"long"]).iter().filter(|i| i.is_some()).count(), 1);
    shared.flush_after(Duration::from_secs(5));
    clock.advance(5);
    assert!(shared.get(b"long").is_none());
    let s = shared.stats();
    assert_eq!((s.get_misses, s.get_expired, s.get_flushed), (5, 3, 1), "{s:?}");
}

/// The eviction listener hears of every item that expires or is evicted, under each way of
/// evicting (whole segments, merges, S3-FIFO, a full hash chain), with the item as it was; of a
/// deleted item as removed and of a replaced one as replaced; and of nothing a flush removed.
#[test]
fn the_eviction_listener_hears_of_each_item_that_goes() {
    use segcache_core::RemovalCause;
    use std::sync::Mutex;

    for policy in [Policy::Fifo, Policy::Merge, Policy::S3Fifo, Policy::Random] {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let log = heard.clone();
        let clock = ManualClock::new(T0);
        let mut c = Builder::new()
            .heap_size(1 << 20)
            .segment_size(64 << 10)
            .clock(clock.clone())
            .eviction(policy)
            .eviction_listener(move |item, cause| {
                assert_eq!(item.value(), item.key().repeat(4), "an item is heard of as it was");
                log.lock().unwrap().push((item.key().to_vec(), cause, item.flags()));
            })
            .build()
            .unwrap();
        for i in 0..50_000u32 {
            let key = format!("k{i:05}");
            c.set(key.as_bytes(), key.repeat(4).as_bytes(), i, NEVER).unwrap();
        }
        c.delete(b"k49999").unwrap();
        c.set(b"k49998", b"k49998k49998k49998k49998", 0, NEVER).unwrap();
        let s = c.stats();
        let mut heard_now = heard.lock().unwrap().clone();
        let by_owner: Vec<_> =
            heard_now.iter().filter(|(_, cause, _)| *cause != RemovalCause::Evicted).cloned().collect();
        assert_eq!(
            by_owner,
            [(b"k49999".to_vec(), RemovalCause::Removed, 49_999), (b"k49998".to_vec(), RemovalCause::Replaced, 49_998)],
            "{policy:?}"
        );
        heard_now.retain(|(_, cause, _)| *cause == RemovalCause::Evicted);
        assert!(s.evicted_items > 0, "{policy:?}");
        assert_eq!(heard_now.len() as u64, s.evicted_items, "{policy:?}");
        for (key, cause, flags) in &heard_now {
            assert_eq!(*cause, RemovalCause::Evicted);
            assert!(c.get(key).is_none(), "{policy:?}: an evicted key is gone");
            assert_eq!(std::str::from_utf8(&key[1..]).unwrap().parse::<u32>().unwrap(), *flags);
        }
        // Expiry, then a listener removed: nothing more is heard.
        heard.lock().unwrap().clear();
        c.flush();
        c.set(b"short", b"shortshortshortshort", 0, Duration::from_secs(5)).unwrap();
        clock.advance(20);
        c.expire();
        assert_eq!(*heard.lock().unwrap(), vec![(b"short".to_vec(), RemovalCause::Expired, 0)], "{policy:?}");
        c.set_eviction_listener(None);
        c.set(b"short", b"shortshortshortshort", 0, Duration::from_secs(5)).unwrap();
        clock.advance(20);
        c.expire();
        assert_eq!(heard.lock().unwrap().len(), 1);
    }

    // A full hash chain: the least used item of the chain goes.
    let heard = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = heard.clone();
    let mut c = Builder::new()
        .heap_size(4 << 20)
        .segment_size(64 << 10)
        .hash_power(4)
        .eviction(Policy::Merge)
        .eviction_listener(move |_, _| {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .build()
        .unwrap();
    for i in 0..5_000u32 {
        c.set(format!("chain{i}").as_bytes(), b"v", 0, NEVER).unwrap();
    }
    let s = c.stats();
    assert!(s.evicted_items > 0);
    assert_eq!(heard.load(std::sync::atomic::Ordering::Relaxed), s.evicted_items);
}

/// A touch that moves its item to another TTL bucket needs room for the copy; when that room
/// is made by evicting the item's own segment, the item stays, as it was (value, flags, CAS
/// value, stale state) with its new TTL, fetched by a touch and not by `set_ttl`.
#[test]
fn a_touch_never_evicts_the_item_it_touches() {
    for access in [true, false] {
        let clock = ManualClock::new(T0);
        let mut c = Builder::new()
            .heap_size(128 << 10)
            .segment_size(64 << 10)
            .clock(clock.clone())
            .eviction(Policy::Fifo)
            .build()
            .unwrap();
        c.set(b"t", b"touched", 7, NEVER).unwrap();
        let mut i = 0;
        while c.stats().segments_free > 0 {
            c.set(format!("k{i}").as_bytes(), &[b'v'; 500], 0, NEVER).unwrap();
            i += 1;
        }
        let cas = c.invalidate(b"t", None, None, None).unwrap();
        let evicted = c.stats().evicted_items;
        match access {
            true => c.touch(b"t", Duration::from_secs(100)).unwrap(),
            false => c.set_ttl(b"t", Duration::from_secs(100)).unwrap(),
        }
        assert!(c.stats().evicted_items > evicted, "the touch's room came from the item's segment");
        assert!(c.get(b"k0").is_none(), "k0 shared the item's segment");
        let item = c.get(b"t").expect("the touched item stays");
        assert_eq!((item.value(), item.flags(), item.cas()), (&b"touched"[..], 7, cas));
        assert!(item.is_stale(), "still stale");
        assert_eq!(item.ttl(), Some(Duration::from_secs(100)));
        assert_eq!(item.fetched(), access, "fetched by a touch only");
    }
}
