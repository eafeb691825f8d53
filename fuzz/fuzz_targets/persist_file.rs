//! Corrupts a gracefully closed persistence file at fuzzer-chosen places and reopens it: the open
//! must fail with a clear error or serve only values that were written; never crash.
//! Run: `cargo +nightly fuzz run persist_file`.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use segcache_core::{Builder, Error};

const KEYS: u32 = 2000;

fn builder(path: &std::path::Path) -> Builder {
    Builder::new().heap_size(2 << 20).segment_size(64 << 10).shards(2).path(path)
}

/// A closed file with known contents, made once per fuzzing process.
fn pristine() -> &'static Vec<u8> {
    static FILE: OnceLock<Vec<u8>> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("segcache-fuzz-pristine-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let c = builder(&path).build_shared().unwrap();
        for i in 0..KEYS {
            c.set(format!("k{i}").as_bytes(), format!("value {i}").as_bytes(), i, Duration::ZERO).unwrap();
        }
        c.close().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        bytes
    })
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = pristine().clone();
    // Each 5 input bytes: a 32-bit position (biased to the metadata at the front) and an XOR mask.
    for m in data.chunks_exact(5).take(16) {
        let pos = u32::from_le_bytes([m[0], m[1], m[2], m[3]]) as usize;
        let pos = if m[4] & 1 == 0 { pos % (1 << 16) } else { pos % bytes.len() };
        bytes[pos] ^= m[4] | 1;
    }
    if data.len() % 7 == 3 {
        bytes.truncate(bytes.len() * (data.len() % 5) / 5);
    }
    let path = std::env::temp_dir().join(format!("segcache-fuzz-{}", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    match builder(&path).build_shared() {
        Ok(c) => {
            for i in 0..KEYS {
                if let Some(item) = c.get(format!("k{i}").as_bytes()) {
                    assert_eq!(item.value, format!("value {i}").into_bytes(), "wrong value after corruption");
                }
            }
        }
        Err(Error::BadFile { .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
    }
    let _ = std::fs::remove_file(&path);
});
