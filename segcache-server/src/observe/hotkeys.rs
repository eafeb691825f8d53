//! The hot-key view: per worker, the keys of sampled requests counted over a sliding window
//! (six buckets of ten seconds) with Space-Saving summaries (a bounded map: a new key takes the
//! place of the least counted one and inherits its count, so a key requested more often than
//! 1/capacity of the time is never lost). Merged over buckets and workers on demand. The
//! summaries are allocated once, at start: counting a key allocates nothing.

use std::collections::HashMap;
use std::sync::Mutex;

/// Seconds per bucket.
pub const BUCKET_SECS: u64 = 10;
/// Buckets in the window: the view covers the last `BUCKETS * BUCKET_SECS` seconds (the
/// current bucket is partial).
pub const BUCKETS: usize = 6;
/// Keys each bucket keeps.
pub const CAPACITY: usize = 64;

/// The longest key kept (memcached's limit); a longer binary key is counted by its prefix.
const MAX_KEY: usize = 250;

/// One bucket's Space-Saving summary, in arrays sized once: counting a key never allocates.
#[derive(Debug)]
struct Summary {
    epoch: u64,
    len: usize,
    hashes: [u64; CAPACITY],
    counts: [u64; CAPACITY],
    key_lens: [u8; CAPACITY],
    keys: Box<[u8]>,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            epoch: 0,
            len: 0,
            hashes: [0; CAPACITY],
            counts: [0; CAPACITY],
            key_lens: [0; CAPACITY],
            keys: vec![0; CAPACITY * MAX_KEY].into(),
        }
    }
}

/// FNV-1a: only to skip most key comparisons.
fn fnv(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

impl Summary {
    fn key(&self, i: usize) -> &[u8] {
        &self.keys[i * MAX_KEY..i * MAX_KEY + self.key_lens[i] as usize]
    }

    fn add(&mut self, key: &[u8]) {
        let key = &key[..key.len().min(MAX_KEY)];
        let h = fnv(key);
        // CAPACITY entries: a linear scan, on sampled requests only.
        if let Some(i) = (0..self.len).find(|&i| self.hashes[i] == h && self.key(i) == key) {
            self.counts[i] += 1;
            return;
        }
        let (slot, count) = if self.len < CAPACITY {
            self.len += 1;
            (self.len - 1, 1)
        } else {
            // The least counted key gives its place, and its count, to the new one.
            let i = (0..CAPACITY).min_by_key(|&i| self.counts[i]).unwrap_or(0);
            (i, self.counts[i] + 1)
        };
        self.hashes[slot] = h;
        self.counts[slot] = count;
        self.key_lens[slot] = key.len() as u8;
        self.keys[slot * MAX_KEY..slot * MAX_KEY + key.len()].copy_from_slice(key);
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

/// One worker's window. Locked by its worker for a sampled request and by a reader of the
/// view: never contended on the request path but by a scrape.
#[derive(Debug)]
pub struct HotKeys {
    buckets: Mutex<Vec<Summary>>,
}

impl Default for HotKeys {
    fn default() -> Self {
        HotKeys { buckets: Mutex::new((0..BUCKETS).map(|_| Summary::default()).collect()) }
    }
}

impl HotKeys {
    /// Counts one sampled request for `key` at `now` (seconds, any monotonic origin).
    pub fn record(&self, key: &[u8], now: u64) {
        let epoch = now / BUCKET_SECS + 1; // 0 marks an unused bucket
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut b[(epoch % BUCKETS as u64) as usize];
        if s.epoch != epoch {
            s.epoch = epoch;
            s.clear();
        }
        s.add(key);
    }

    /// Adds this worker's counts within the window ending at `now` into `into`.
    pub fn add_to(&self, into: &mut HashMap<Box<[u8]>, u64>, now: u64) {
        let epoch = now / BUCKET_SECS + 1;
        let b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        for s in b.iter().filter(|s| s.epoch != 0 && s.epoch + BUCKETS as u64 > epoch) {
            for i in 0..s.len {
                *into.entry(s.key(i).into()).or_insert(0) += s.counts[i];
            }
        }
    }
}

/// The `k` most counted keys, most first (ties by key, for a stable order).
pub fn top(counts: HashMap<Box<[u8]>, u64>, k: usize) -> Vec<(Box<[u8]>, u64)> {
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

/// A key as text for `stats` and labels: printable ASCII as is, other bytes (and `%`) as `%XX`.
pub fn printable(key: &[u8]) -> String {
    let mut s = String::with_capacity(key.len());
    for &b in key {
        if b.is_ascii_graphic() && b != b'%' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(workers: &[&HotKeys], now: u64, k: usize) -> Vec<(String, u64)> {
        let mut m = HashMap::new();
        for w in workers {
            w.add_to(&mut m, now);
        }
        top(m, k).into_iter().map(|(k, c)| (printable(&k), c)).collect()
    }

    #[test]
    fn heavy_keys_survive_many_cold_ones_and_merge_over_workers() {
        let (a, b) = (HotKeys::default(), HotKeys::default());
        for i in 0..10_000u32 {
            a.record(format!("cold{i}").as_bytes(), 5);
            if i % 10 == 0 {
                a.record(b"hot", 5);
                b.record(b"hot", 5);
            }
            if i % 20 == 0 {
                b.record(b"warm", 5);
            }
        }
        let v = view(&[&a, &b], 5, 2);
        assert_eq!(v[0].0, "hot");
        // Space-Saving overestimates by at most the least count when its key came in.
        assert!(v[0].1 >= 2_000, "{v:?}");
        assert_eq!(v[1].0, "warm");
    }

    #[test]
    fn the_window_slides() {
        let h = HotKeys::default();
        h.record(b"old", 0);
        h.record(b"new", 55);
        assert_eq!(view(&[&h], 55, 5), vec![("new".into(), 1), ("old".into(), 1)]);
        // 60 s on, the bucket of second 0 has left the window.
        assert_eq!(view(&[&h], 60, 5), vec![("new".into(), 1)]);
        // A bucket reused for a later period starts empty.
        h.record(b"newer", 61);
        assert_eq!(view(&[&h], 61, 5), vec![("new".into(), 1), ("newer".into(), 1)]);
        assert_eq!(view(&[&h], 200, 5), vec![]);
    }

    #[test]
    fn keys_print_safely() {
        assert_eq!(printable(b"user:1"), "user:1");
        assert_eq!(printable(b"a b\n%\xff\"\\"), "a%20b%0A%25%FF\"\\");
    }
}
