//! The workload: which keys, which values, which operations, how often.
//!
//! Keys are dense indices `0..keys` rendered in base 62 and left-padded to the key length,
//! so the same index always names the same key on every server and in every run.

use anyhow::{bail, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};

use crate::protocol::{self, ReqKind};

/// Longest key the memcache text protocol accepts.
pub const MAX_KEY_LEN: usize = 250;
/// Largest value we generate (memcached's default item size limit is 1 MiB).
pub const MAX_VALUE_LEN: usize = 1 << 20;
/// Most keys in one multi-get (keeps the request line well under server line limits).
pub const MAX_MGET: usize = 100;

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A complete workload description; serialized into every result file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub name: String,
    /// Number of distinct keys.
    pub keys: u64,
    pub key_len: usize,
    /// Value length is drawn uniformly from `value_min..=value_max`.
    pub value_min: usize,
    pub value_max: usize,
    /// Operation mix weights, get:set:delete.
    pub get: u32,
    pub set: u32,
    pub delete: u32,
    /// Zipf exponent for key popularity; `None` means uniform.
    pub zipf: Option<f64>,
    /// Keys per get request (1 = single get).
    pub mget: usize,
    /// TTL in seconds carried by every set (0 = never expires).
    pub ttl: u32,
}

impl Workload {
    /// Momento's Pelikan tuning workload: 4-byte keys, 256-byte values, 80:20 get:set.
    pub fn momento() -> Self {
        Workload {
            name: "momento".into(),
            keys: 100_000,
            key_len: 4,
            value_min: 256,
            value_max: 256,
            get: 80,
            set: 20,
            delete: 0,
            zipf: None,
            mget: 1,
            ttl: 0,
        }
    }

    /// Twitter's small-object, read-heavy cache: 64-byte keys and values, 95:5 get:set.
    pub fn twitter() -> Self {
        Workload {
            name: "twitter".into(),
            keys: 100_000,
            key_len: 64,
            value_min: 64,
            value_max: 64,
            get: 95,
            set: 5,
            delete: 0,
            zipf: None,
            mget: 1,
            ttl: 0,
        }
    }

    /// Zipf(0.99) popularity over a key space whose data is 10x the server memory,
    /// so the server must evict and the hit ratio tells how well it keeps the hot set.
    pub fn zipf(memory_mb: u64) -> Self {
        let key_len = 16;
        let value = 512;
        let keys = (memory_mb * 1024 * 1024 * 10) / (key_len + value) as u64;
        Workload {
            name: "zipf".into(),
            keys: keys.max(1),
            key_len,
            value_min: value,
            value_max: value,
            get: 90,
            set: 10,
            delete: 0,
            zipf: Some(0.99),
            mget: 1,
            ttl: 0,
        }
    }

    pub fn preset(name: &str, memory_mb: u64) -> Result<Self> {
        match name {
            "momento" => Ok(Self::momento()),
            "twitter" => Ok(Self::twitter()),
            "zipf" => Ok(Self::zipf(memory_mb)),
            other => bail!("unknown workload preset {other:?} (expected momento, twitter or zipf)"),
        }
    }

    /// Checks every field; a bad workload is an error, never a panic later.
    pub fn validate(&self) -> Result<()> {
        if self.keys == 0 {
            bail!("key count must be at least 1");
        }
        if self.key_len == 0 || self.key_len > MAX_KEY_LEN {
            bail!("key length must be 1..={MAX_KEY_LEN}, got {}", self.key_len);
        }
        // 62^key_len distinct keys must cover the key count.
        let capacity = 62f64.powi(self.key_len.min(20) as i32);
        if capacity < self.keys as f64 {
            bail!("{} keys do not fit in {}-byte keys (at most {} distinct)", self.keys, self.key_len, capacity as u64);
        }
        if self.value_min > self.value_max {
            bail!("value length range {}..{} is empty", self.value_min, self.value_max);
        }
        if self.value_max > MAX_VALUE_LEN {
            bail!("value length {} exceeds {MAX_VALUE_LEN}", self.value_max);
        }
        if self.get as u64 + self.set as u64 + self.delete as u64 == 0 {
            bail!("the get:set:delete ratio must have a non-zero weight");
        }
        if self.mget == 0 || self.mget > MAX_MGET {
            bail!("multi-get width must be 1..={MAX_MGET}, got {}", self.mget);
        }
        if let Some(s) = self.zipf {
            if !(s > 0.0 && s.is_finite()) {
                bail!("Zipf exponent must be a positive number, got {s}");
            }
        }
        Ok(())
    }
}

/// Parses a ratio like "80:20" or "90:9:1" into get:set:delete weights.
pub fn parse_ratio(s: &str) -> Result<(u32, u32, u32)> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() < 2 || parts.len() > 3 {
        bail!("ratio must be get:set or get:set:delete, got {s:?}");
    }
    let mut w = [0u32; 3];
    for (i, p) in parts.iter().enumerate() {
        w[i] = p.trim().parse().map_err(|_| anyhow::anyhow!("bad ratio weight {p:?} in {s:?}"))?;
    }
    if w.iter().all(|&x| x == 0) {
        bail!("ratio {s:?} has no non-zero weight");
    }
    Ok((w[0], w[1], w[2]))
}

/// Parses a value length: "256" or a range "64-1024".
pub fn parse_value_len(s: &str) -> Result<(usize, usize)> {
    let parse = |p: &str| -> Result<usize> { p.trim().parse().map_err(|_| anyhow::anyhow!("bad value length {p:?}")) };
    match s.split_once('-') {
        Some((a, b)) => Ok((parse(a)?, parse(b)?)),
        None => {
            let v = parse(s)?;
            Ok((v, v))
        }
    }
}

/// Writes key number `idx` as a `len`-byte base-62 string.
pub fn write_key(out: &mut Vec<u8>, idx: u64, len: usize) {
    let start = out.len();
    out.resize(start + len, b'0');
    let mut v = idx;
    let mut pos = start + len;
    while v > 0 && pos > start {
        pos -= 1;
        out[pos] = ALPHABET[(v % 62) as usize];
        v /= 62;
    }
}

/// Picks key indices, uniformly or by Zipf rank (rank 1 = key 0, the hottest).
enum KeyChooser {
    Uniform(u64),
    Zipf(Zipf<f64>),
}

/// Generates requests for one worker thread. Each thread has its own seeded RNG.
pub struct Generator {
    wl: Workload,
    rng: SmallRng,
    keys: KeyChooser,
    value: Vec<u8>,
    key_buf: Vec<u8>,
    total_weight: u32,
}

impl Generator {
    pub fn new(wl: &Workload, seed: u64) -> Result<Self> {
        wl.validate()?;
        let keys = match wl.zipf {
            None => KeyChooser::Uniform(wl.keys),
            Some(s) => KeyChooser::Zipf(
                Zipf::new(wl.keys, s).map_err(|e| anyhow::anyhow!("Zipf({s}) over {}: {e:?}", wl.keys))?,
            ),
        };
        // A recognizable, printable value pattern; its content does not matter to the servers.
        let value = (0..wl.value_max).map(|i| b'a' + (i % 26) as u8).collect();
        Ok(Generator {
            wl: wl.clone(),
            rng: SmallRng::seed_from_u64(seed),
            keys,
            value,
            key_buf: Vec::with_capacity(wl.key_len),
            total_weight: wl.get + wl.set + wl.delete,
        })
    }

    pub fn workload(&self) -> &Workload {
        &self.wl
    }

    fn key_index(&mut self) -> u64 {
        match &self.keys {
            KeyChooser::Uniform(n) => self.rng.gen_range(0..*n),
            // Zipf samples ranks 1..=n as floats.
            KeyChooser::Zipf(z) => (z.sample(&mut self.rng) as u64).saturating_sub(1).min(self.wl.keys - 1),
        }
    }

    fn value_len(&mut self) -> usize {
        if self.wl.value_min == self.wl.value_max {
            self.wl.value_min
        } else {
            self.rng.gen_range(self.wl.value_min..=self.wl.value_max)
        }
    }

    /// Appends the next request to `out` and says what kind it is.
    pub fn next_request(&mut self, out: &mut Vec<u8>) -> ReqKind {
        let r = self.rng.gen_range(0..self.total_weight);
        if r < self.wl.get {
            out.extend_from_slice(b"get");
            for _ in 0..self.wl.mget {
                out.push(b' ');
                let idx = self.key_index();
                write_key(out, idx, self.wl.key_len);
            }
            out.extend_from_slice(b"\r\n");
            ReqKind::Get { keys: self.wl.mget as u16 }
        } else if r < self.wl.get + self.wl.set {
            let idx = self.key_index();
            let len = self.value_len();
            self.encode_set(out, idx, len);
            ReqKind::Set
        } else {
            let idx = self.key_index();
            self.key_buf.clear();
            write_key(&mut self.key_buf, idx, self.wl.key_len);
            protocol::encode_delete(out, &self.key_buf);
            ReqKind::Delete
        }
    }

    /// Appends a set of key `idx` (used by the prefill phase too).
    pub fn encode_set(&mut self, out: &mut Vec<u8>, idx: u64, len: usize) {
        self.key_buf.clear();
        write_key(&mut self.key_buf, idx, self.wl.key_len);
        protocol::encode_set(out, &self.key_buf, 0, self.wl.ttl, &self.value[..len]);
    }

    /// A value length drawn from the workload's range (prefill uses it).
    pub fn draw_value_len(&mut self) -> usize {
        self.value_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fixed_length_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000u64 {
            let mut k = Vec::new();
            write_key(&mut k, i, 4);
            assert_eq!(k.len(), 4);
            assert!(k.iter().all(|c| c.is_ascii_alphanumeric()));
            assert!(seen.insert(k));
        }
        let mut k = Vec::new();
        write_key(&mut k, 61, 1);
        assert_eq!(k, b"z");
    }

    #[test]
    fn validate_rejects_bad_workloads() {
        let mut w = Workload::momento();
        assert!(w.validate().is_ok());
        w.keys = 62u64.pow(4) + 1;
        assert!(w.validate().is_err(), "more keys than 4-byte keys can name");
        let mut w = Workload::twitter();
        w.key_len = 251;
        assert!(w.validate().is_err());
        let mut w = Workload::twitter();
        w.value_min = 10;
        w.value_max = 5;
        assert!(w.validate().is_err());
        let mut w = Workload::twitter();
        w.get = 0;
        w.set = 0;
        assert!(w.validate().is_err());
        let mut w = Workload::twitter();
        w.zipf = Some(-1.0);
        assert!(w.validate().is_err());
    }

    #[test]
    fn ratio_and_value_parsing() {
        assert_eq!(parse_ratio("80:20").unwrap(), (80, 20, 0));
        assert_eq!(parse_ratio("90:9:1").unwrap(), (90, 9, 1));
        assert!(parse_ratio("80").is_err());
        assert!(parse_ratio("0:0").is_err());
        assert!(parse_ratio("a:b").is_err());
        assert_eq!(parse_value_len("256").unwrap(), (256, 256));
        assert_eq!(parse_value_len("64-1024").unwrap(), (64, 1024));
        assert!(parse_value_len("x").is_err());
    }

    #[test]
    fn op_mix_follows_the_ratio() {
        let mut w = Workload::momento();
        w.get = 70;
        w.set = 20;
        w.delete = 10;
        let mut g = Generator::new(&w, 7).unwrap();
        let (mut gets, mut sets, mut dels) = (0, 0, 0);
        let mut buf = Vec::new();
        for _ in 0..100_000 {
            buf.clear();
            match g.next_request(&mut buf) {
                ReqKind::Get { keys } => {
                    assert_eq!(keys, 1);
                    assert!(buf.starts_with(b"get "));
                    gets += 1
                }
                ReqKind::Set => {
                    assert!(buf.starts_with(b"set "));
                    // header + 256-byte value + CRLF
                    assert!(buf.ends_with(b"\r\n"));
                    sets += 1
                }
                ReqKind::Delete => {
                    assert!(buf.starts_with(b"delete "));
                    dels += 1
                }
            }
        }
        let frac = |n: i32| n as f64 / 100_000.0;
        assert!((frac(gets) - 0.7).abs() < 0.01, "gets {gets}");
        assert!((frac(sets) - 0.2).abs() < 0.01, "sets {sets}");
        assert!((frac(dels) - 0.1).abs() < 0.01, "dels {dels}");
    }

    #[test]
    fn zipf_concentrates_on_hot_keys() {
        let mut w = Workload::twitter();
        w.keys = 100_000;
        w.zipf = Some(0.99);
        w.get = 1;
        w.set = 0;
        let mut g = Generator::new(&w, 1).unwrap();
        let mut hot = 0;
        let n = 50_000;
        for _ in 0..n {
            if g.key_index() < 100 {
                hot += 1;
            }
        }
        // With s=0.99 over 1e5 keys the top 0.1% of keys draw about 40% of requests;
        // uniform would give 0.1%.
        let share = hot as f64 / n as f64;
        assert!(share > 0.3 && share < 0.55, "hot share {share}");
        for _ in 0..1000 {
            assert!(g.key_index() < w.keys);
        }
    }

    #[test]
    fn multiget_and_value_range() {
        let mut w = Workload::twitter();
        w.mget = 5;
        w.get = 1;
        w.set = 1;
        w.value_min = 10;
        w.value_max = 20;
        let mut g = Generator::new(&w, 3).unwrap();
        let mut buf = Vec::new();
        for _ in 0..1000 {
            buf.clear();
            match g.next_request(&mut buf) {
                ReqKind::Get { keys } => {
                    assert_eq!(keys, 5);
                    let line = std::str::from_utf8(&buf).unwrap().trim_end();
                    assert_eq!(line.split(' ').count(), 6);
                }
                ReqKind::Set => {
                    let s = std::str::from_utf8(&buf).unwrap();
                    let header = s.split("\r\n").next().unwrap();
                    let len: usize = header.rsplit(' ').next().unwrap().parse().unwrap();
                    assert!((10..=20).contains(&len));
                    assert_eq!(buf.len(), header.len() + 2 + len + 2);
                }
                ReqKind::Delete => unreachable!(),
            }
        }
    }
}
