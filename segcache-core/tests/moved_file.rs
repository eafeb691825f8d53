//! Moving a cache: a persistence file copied to another directory (what another machine with
//! the same settings is given) opens there with every item, whether it was closed or left open
//! by a process that died.

use std::path::{Path, PathBuf};
use std::time::Duration;

use segcache_core::{Builder, SharedCache};

const ITEMS: u32 = 5000;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("segcache-moved-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn builder(path: &Path) -> Builder {
    Builder::new().heap_size(8 << 20).segment_size(256 << 10).shards(2).path(path)
}

fn value(i: u32) -> Vec<u8> {
    format!("value {i} ").repeat(i as usize % 20 + 1).into_bytes()
}

fn filled(path: &Path) -> SharedCache {
    let c = builder(path).build_shared().unwrap();
    for i in 0..ITEMS {
        let ttl = if i % 3 == 0 { Duration::from_secs(3600) } else { Duration::ZERO };
        c.set(format!("k{i}").as_bytes(), &value(i), i, ttl).unwrap();
    }
    c
}

fn holds_every_item(c: &SharedCache) {
    assert_eq!(c.len(), ITEMS as usize);
    for i in 0..ITEMS {
        let item = c.get(format!("k{i}").as_bytes()).unwrap_or_else(|| panic!("k{i} missing"));
        assert_eq!((item.value, item.flags), (value(i), i), "k{i}");
    }
}

#[test]
fn a_closed_file_copied_elsewhere_opens_warm() {
    let (here, there) = (dir("closed-here"), dir("closed-there"));
    filled(&here.join("cache.seg")).close().unwrap();
    std::fs::copy(here.join("cache.seg"), there.join("moved.seg")).unwrap();
    std::fs::remove_dir_all(&here).unwrap();

    let c = builder(&there.join("moved.seg")).build_shared().unwrap();
    holds_every_item(&c);
    c.close().unwrap();
    std::fs::remove_dir_all(&there).unwrap();
}

#[test]
fn a_file_left_open_copied_elsewhere_is_recovered() {
    let (here, there) = (dir("open-here"), dir("open-there"));
    let c = filled(&here.join("cache.seg"));
    // The handle is never closed or dropped, as when the process dies: the file is not marked
    // clean, and what the cache wrote is in the page cache the copy reads.
    std::mem::forget(c);
    std::fs::copy(here.join("cache.seg"), there.join("moved.seg")).unwrap();

    let c = builder(&there.join("moved.seg")).build_shared().unwrap();
    assert_eq!(c.dropped_segments(), 0);
    holds_every_item(&c);
    c.close().unwrap();
    std::fs::remove_dir_all(&there).unwrap();
}
