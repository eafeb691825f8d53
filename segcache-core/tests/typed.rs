//! The typed cache (`serde` feature): round trips of serde types, the byte handle's semantics
//! and errors, persistence across a reopen, keys that cannot be stored, bytes that do not decode.
#![cfg(feature = "serde")]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use segcache_core::{Builder, Codec, CodecError, Error, ManualClock, SharedCache, TypedCache, TypedError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, PartialEq, Debug, Clone)]
struct User {
    id: u64,
    name: String,
    score: f32,
}

#[derive(Serialize, Deserialize, PartialEq, Eq, Debug, Clone)]
enum Key {
    User(u64),
    Session { user: u64, device: String },
}

fn shared() -> SharedCache {
    Builder::new().heap_size(8 << 20).segment_size(64 << 10).build_shared().unwrap()
}

fn user(id: u64) -> User {
    User { id, name: format!("user {id}"), score: id as f32 / 4.0 }
}

#[test]
fn structs_and_enums_round_trip() {
    let cache: TypedCache<Key, User> = TypedCache::new(shared());
    let session = Key::Session { user: 3, device: "phone".into() };
    cache.set(&Key::User(1), &user(1), Duration::ZERO).unwrap();
    cache.set(&session, &user(3), Duration::ZERO).unwrap();
    assert_eq!(cache.get(&Key::User(1)).unwrap(), Some(user(1)));
    assert_eq!(cache.get(&session).unwrap(), Some(user(3)));
    assert_eq!(cache.get(&Key::User(3)).unwrap(), None);
    assert!(cache.contains(&session).unwrap());
    assert_eq!(cache.len(), 2);
    let got = cache.get_many(&[Key::User(1), Key::User(2), session.clone()]).unwrap();
    assert_eq!(got, [Some(user(1)), None, Some(user(3))]);
    cache.delete(&session).unwrap();
    assert!(matches!(cache.delete(&session), Err(TypedError::Cache(Error::NotFound))));
    assert_eq!(cache.get(&session).unwrap(), None);
}

#[test]
fn stores_keep_the_byte_handles_semantics() {
    let clock = ManualClock::new(1_000);
    let bytes = Builder::new().heap_size(8 << 20).segment_size(64 << 10).clock(clock.clone()).build_shared().unwrap();
    let cache: TypedCache<String, Vec<u32>> = TypedCache::new(bytes);
    let k = "list".to_string();
    assert!(matches!(cache.replace(&k, &vec![1], Duration::ZERO), Err(TypedError::Cache(Error::NotStored))));
    cache.add(&k, &vec![1, 2], Duration::from_secs(10)).unwrap();
    assert!(matches!(cache.add(&k, &vec![9], Duration::ZERO), Err(TypedError::Cache(Error::NotStored))));
    cache.replace(&k, &vec![1, 2, 3], Duration::from_secs(10)).unwrap();
    assert_eq!(cache.get(&k).unwrap(), Some(vec![1, 2, 3]));
    cache.touch(&k, Duration::from_secs(100)).unwrap();
    clock.advance(50);
    assert_eq!(cache.get(&k).unwrap(), Some(vec![1, 2, 3]));
    clock.advance(60);
    assert_eq!(cache.get(&k).unwrap(), None);
    assert!(matches!(cache.touch(&k, Duration::ZERO), Err(TypedError::Cache(Error::NotFound))));
    cache.set(&k, &vec![], Duration::ZERO).unwrap();
    cache.flush();
    assert!(cache.is_empty());
}

#[test]
fn values_come_back_after_a_reopen() {
    let path = std::env::temp_dir().join(format!("segcache-typed-test-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let open = || Builder::new().heap_size(8 << 20).segment_size(64 << 10).path(&path).build_shared().unwrap();
    let cache: TypedCache<u64, User> = TypedCache::new(open());
    for id in 0..1000 {
        cache.set(&id, &user(id), Duration::ZERO).unwrap();
    }
    cache.close().unwrap();
    let cache: TypedCache<u64, User> = TypedCache::new(open());
    assert_eq!(cache.len(), 1000);
    for id in 0..1000 {
        assert_eq!(cache.get(&id).unwrap(), Some(user(id)));
    }
    // Dropped without `close` too.
    cache.set(&5000, &user(5000), Duration::ZERO).unwrap();
    drop(cache);
    let cache: TypedCache<u64, User> = TypedCache::new(open());
    assert_eq!(cache.get(&5000).unwrap(), Some(user(5000)));
    drop(cache);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn keys_whose_encoding_does_not_identify_them_are_refused() {
    let floats: TypedCache<f64, u32> = TypedCache::new(shared());
    assert!(matches!(floats.set(&f64::NAN, &1, Duration::ZERO), Err(TypedError::KeyNotCanonical)));
    assert!(matches!(floats.add(&f64::NAN, &1, Duration::ZERO), Err(TypedError::KeyNotCanonical)));
    assert!(matches!(floats.get_or_insert_with(&f64::NAN, Duration::ZERO, || 1), Err(TypedError::KeyNotCanonical)));
    assert!(floats.is_empty(), "nothing stored under a refused key");
    // Zero and negative zero are equal floats but two keys.
    floats.set(&0.0, &1, Duration::ZERO).unwrap();
    floats.set(&-0.0, &2, Duration::ZERO).unwrap();
    assert_eq!((floats.get(&0.0).unwrap(), floats.get(&-0.0).unwrap()), (Some(1), Some(2)));

    // A hash map's order, so its encoding, differs from one map to the next.
    let maps: TypedCache<HashMap<u32, u32>, u32> = TypedCache::new(shared());
    let map: HashMap<u32, u32> = (0..64).map(|i| (i, i)).collect();
    assert!(matches!(maps.set(&map, &1, Duration::ZERO), Err(TypedError::KeyNotCanonical)));
    let sets: TypedCache<HashSet<String>, u32> = TypedCache::new(shared());
    let set: HashSet<String> = (0..64).map(|i| i.to_string()).collect();
    assert!(matches!(sets.set(&set, &1, Duration::ZERO), Err(TypedError::KeyNotCanonical)));
    assert!(maps.is_empty() && sets.is_empty());
    // An ordered map is canonical.
    let ordered: TypedCache<BTreeMap<String, u32>, u32> = TypedCache::new(shared());
    let key: BTreeMap<String, u32> = (0..8).map(|i| (i.to_string(), i)).collect();
    ordered.set(&key, &7, Duration::ZERO).unwrap();
    assert_eq!(ordered.get(&key.clone()).unwrap(), Some(7));
}

#[test]
fn key_sizes_are_checked_as_byte_keys() {
    let cache: TypedCache<String, u32> = TypedCache::new(shared());
    // A 250-byte string encodes to 252 bytes (two of varint length).
    let long = "x".repeat(250);
    assert!(matches!(cache.set(&long, &1, Duration::ZERO), Err(TypedError::Cache(Error::KeyTooLong { len: 252 }))));
    assert_eq!(cache.get(&long).unwrap(), None);
    // Longer than the codec's stack buffer: encoded on the heap, refused with its length.
    let longer = "y".repeat(300);
    assert!(matches!(cache.set(&longer, &1, Duration::ZERO), Err(TypedError::Cache(Error::KeyTooLong { len: 302 }))));
    assert_eq!(cache.get(&longer).unwrap(), None);
    let fits = "z".repeat(248);
    cache.set(&fits, &3, Duration::ZERO).unwrap();
    assert_eq!(cache.get(&fits).unwrap(), Some(3));
    let units: TypedCache<(), u32> = TypedCache::new(shared());
    assert!(matches!(units.set(&(), &1, Duration::ZERO), Err(TypedError::Cache(Error::EmptyKey))));
}

#[test]
fn bytes_that_do_not_decode_are_an_error_and_stay() {
    let cache: TypedCache<u32, User> = TypedCache::new(shared());
    // Written by a byte user under the key's encoding: not a `User`.
    cache.cache().set(&[1], b"\xff\xff\xff", 0, Duration::ZERO).unwrap();
    match cache.get(&1) {
        Err(TypedError::Codec(e)) => assert!(e.is_decode(), "{e}"),
        other => panic!("expected a decode error, got {other:?}"),
    }
    assert!(matches!(cache.get_many(&[1]), Err(TypedError::Codec(_))));
    assert_eq!(cache.cache().get(&[1]).unwrap().value, b"\xff\xff\xff");
    // A value of another type with trailing bytes left over is refused too.
    let wider: TypedCache<u32, (u8, u8)> = TypedCache::new(cache.into_inner());
    wider.cache().set(&[2], &[1, 2, 3], 0, Duration::ZERO).unwrap();
    assert!(matches!(wider.get(&2), Err(TypedError::Codec(_))));
}

#[test]
fn one_thread_loads_while_the_others_wait() {
    const THREADS: usize = 8;
    let cache: Arc<TypedCache<String, User>> = Arc::new(TypedCache::new(shared()));
    let loads = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (cache, loads, barrier) = (Arc::clone(&cache), Arc::clone(&loads), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                cache
                    .get_or_insert_with(&"u".to_string(), Duration::ZERO, || {
                        loads.fetch_add(1, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(100));
                        user(9)
                    })
                    .unwrap()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), user(9));
    }
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert_eq!(cache.get(&"u".to_string()).unwrap(), Some(user(9)));
    let r = cache.try_get_or_insert_with(&"v".to_string(), Duration::ZERO, || Err("down"));
    assert!(matches!(r, Err(TypedError::Loader("down"))));
    assert_eq!(cache.get(&"v".to_string()).unwrap(), None);
}

#[test]
fn a_value_that_cannot_be_encoded_is_an_error() {
    /// Serializes as a sequence of unknown length, which postcard cannot write.
    struct Unsized;
    impl Serialize for Unsized {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeSeq;
            s.serialize_seq(None)?.end()
        }
    }
    impl<'de> Deserialize<'de> for Unsized {
        fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
            Ok(Unsized)
        }
    }
    let cache: TypedCache<u32, Unsized> = TypedCache::new(shared());
    match cache.set(&1, &Unsized, Duration::ZERO) {
        Err(TypedError::Codec(e)) => assert!(!e.is_decode()),
        other => panic!("expected an encode error, got {:?}", other.err()),
    }
    assert!(matches!(cache.get_or_insert_with(&1, Duration::ZERO, || Unsized), Err(TypedError::Codec(_))));
    assert!(cache.is_empty());
}

/// Keys as their UTF-8 bytes, values as decimal text: a codec of its own, without serde.
#[derive(Default)]
struct Text;

impl Codec<String> for Text {
    fn encode(&self, value: &String, out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(value.as_bytes());
        Ok(())
    }
    fn decode(&self, bytes: &[u8]) -> Result<String, CodecError> {
        String::from_utf8(bytes.to_vec()).map_err(CodecError::decode)
    }
}

impl Codec<u64> for Text {
    fn encode(&self, value: &u64, out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(value.to_string().as_bytes());
        Ok(())
    }
    fn decode(&self, bytes: &[u8]) -> Result<u64, CodecError> {
        std::str::from_utf8(bytes).map_err(CodecError::decode)?.parse().map_err(CodecError::decode)
    }
}

#[test]
fn a_codec_of_its_own_shares_items_with_byte_users() {
    let cache: TypedCache<String, u64, Text> = TypedCache::new(shared());
    cache.set(&"hits".to_string(), &41, Duration::ZERO).unwrap();
    // The byte handle sees the codec's bytes, and its writes are read back typed.
    assert_eq!(cache.cache().incr(b"hits", 1).unwrap(), 42);
    assert_eq!(cache.get(&"hits".to_string()).unwrap(), Some(42));
    cache.cache().set(b"name", b"not a number", 0, Duration::ZERO).unwrap();
    assert!(matches!(cache.get(&"name".to_string()), Err(TypedError::Codec(e)) if e.is_decode()));
}
