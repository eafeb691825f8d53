//! Room to grow (`Builder::max_heap_size`): the memory limit starts at `heap_size`, moves up to
//! the room laid out and back down while the cache runs, and keeps what it holds.

use std::time::Duration;

use segcache_core::{Builder, Error, SharedCache};

const SEGMENT: usize = 64 << 10;

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:07}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("value {i} {}", "x".repeat(80)).into_bytes()
}

fn store(c: &SharedCache, keys: std::ops::Range<u32>) {
    for i in keys {
        c.set(&key(i), &value(i), i, Duration::ZERO).unwrap();
    }
}

/// The keys of `keys` the cache holds, each checked whole.
fn held(c: &SharedCache, keys: std::ops::Range<u32>) -> Vec<u32> {
    keys.filter(|&i| match c.get(&key(i)) {
        Some(item) => {
            assert_eq!((item.value, item.flags), (value(i), i), "key {i}");
            true
        }
        None => false,
    })
    .collect()
}

fn growable(heap: usize, max: usize) -> Builder {
    Builder::new().heap_size(heap).max_heap_size(max).segment_size(SEGMENT).shards(2)
}

#[test]
fn the_limit_grows_into_the_room_laid_out_and_shrinks_back_keeping_items() {
    let c = growable(2 << 20, 8 << 20).build_shared().unwrap();
    assert_eq!((c.memory_limit(), c.stats().heap_bytes), (2 << 20, 8 << 20));
    // About 7 MiB of items: a 2 MiB limit keeps a fraction.
    store(&c, 0..60_000);
    let small = held(&c, 0..60_000);
    assert!(small.len() < 25_000, "{} items under a 2 MiB limit", small.len());
    let segments = c.stats().segments_total - c.stats().segments_free;
    assert!(segments as usize <= (2 << 20) / SEGMENT, "{segments} segments in use under the limit");

    c.set_memory_limit(8 << 20).unwrap();
    assert_eq!(c.memory_limit(), 8 << 20);
    // What the small limit held is still there, and the room takes the rest.
    assert_eq!(held(&c, 0..60_000), small);
    store(&c, 0..60_000);
    let large = held(&c, 0..60_000);
    assert!(large.len() > 2 * small.len(), "{} items at 8 MiB against {} at 2 MiB", large.len(), small.len());

    // Back down: nothing is dropped until writes need room, then the segments in use shrink
    // to the limit again.
    c.set_memory_limit(2 << 20).unwrap();
    assert_eq!(held(&c, 0..60_000), large);
    store(&c, 60_000..80_000);
    let in_use = c.stats().segments_total - c.stats().segments_free;
    assert!(in_use as usize <= (2 << 20) / SEGMENT, "{in_use} segments in use after shrinking");
    assert!(held(&c, 0..80_000).len() < 25_000);
    c.verify().unwrap();

    assert!(matches!(c.set_memory_limit(16 << 20), Err(Error::InvalidConfig(_))));
    assert_eq!(c.memory_limit(), 2 << 20);
}

#[test]
fn a_single_owner_cache_grows_the_same_way() {
    let mut c = Builder::new().heap_size(1 << 20).max_heap_size(4 << 20).segment_size(SEGMENT).build().unwrap();
    assert_eq!(c.memory_limit(), 1 << 20);
    let fill = |c: &mut segcache_core::Segcache| {
        for i in 0..40_000 {
            c.set(&key(i), &value(i), i, Duration::ZERO).unwrap();
        }
        (0..40_000).filter(|&i| c.get(&key(i)).is_some()).count()
    };
    let small = fill(&mut c);
    c.set_memory_limit(4 << 20).unwrap();
    let large = fill(&mut c);
    assert!(large > 3 * small, "{large} items at 4 MiB against {small} at 1 MiB");
    assert!(c.set_memory_limit(5 << 20).is_err());
}

#[test]
fn room_to_grow_is_refused_where_it_cannot_be_had() {
    let less = Builder::new().heap_size(4 << 20).max_heap_size(2 << 20).build();
    assert!(matches!(less, Err(Error::InvalidConfig(ref m)) if m.contains("max_heap_size")), "{less:?}");
    let prefault = Builder::new().heap_size(4 << 20).max_heap_size(8 << 20).prefault(true).build_shared();
    assert!(matches!(prefault, Err(Error::InvalidConfig(ref m)) if m.contains("prefault")), "{prefault:?}");
    // The same size as the heap is no room at all, and prefaults as before.
    let same = Builder::new().heap_size(4 << 20).max_heap_size(4 << 20).prefault(true).build_shared().unwrap();
    assert_eq!(same.memory_limit(), 4 << 20);
    assert!(same.set_memory_limit(8 << 20).is_err());
}

/// The resident set of this process, in bytes (Linux).
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
#[cfg(target_os = "linux")]
fn room_above_the_limit_takes_no_memory_until_the_limit_rises() {
    const MAX: usize = 512 << 20;
    let before = resident();
    let c =
        Builder::new().heap_size(4 << 20).max_heap_size(MAX).segment_size(1 << 20).shards(1).build_shared().unwrap();
    store(&c, 0..100_000); // about 11 MiB of items through a 4 MiB limit
    let grown = resident().saturating_sub(before);
    // The segments in use and the hash table (sized for the room, about an eighth of it) are
    // resident; the other 500 MiB of segments are not. Other tests of this file run beside this
    // one and count too, hence the slack.
    assert!(grown < MAX / 4, "{} MiB resident for a 4 MiB limit", grown >> 20);
    assert_eq!(c.stats().heap_bytes as usize, MAX);
}

#[test]
fn a_file_keeps_the_room_and_reopens_with_the_limit_at_the_heap() {
    let path = std::env::temp_dir().join(format!("segcache-grow-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let b = growable(2 << 20, 8 << 20).path(&path);
    {
        let c = b.clone().build_shared().unwrap();
        c.set_memory_limit(8 << 20).unwrap();
        store(&c, 0..40_000);
        c.close().unwrap();
    }
    // The file was made for the room: reopened warm, with the limit back at `heap_size`.
    let c = b.build_shared().unwrap();
    assert_eq!((c.memory_limit(), c.stats().heap_bytes), (2 << 20, 8 << 20));
    let kept = held(&c, 0..40_000);
    assert!(kept.len() > 30_000, "{} items back", kept.len());
    c.close().unwrap();
    // Without the room, the sizes differ from the file's: refused, the file left as it was.
    assert!(Builder::new().heap_size(2 << 20).segment_size(SEGMENT).shards(2).path(&path).build_shared().is_err());
    assert!(growable(2 << 20, 8 << 20).path(&path).build_shared().is_ok());
    std::fs::remove_file(&path).unwrap();
}
