//! PLACEHOLDER engine with the final API, replaced by the segment engine.
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::Clock;
use crate::config::MAX_KEY_LEN;
use crate::{Builder, Error, Item, Result, Stats};

#[derive(Debug)]
pub struct Segcache {
    map: HashMap<Vec<u8>, (Vec<u8>, u32, u64, u32)>,
    clock: Arc<dyn Clock>,
    cas: u64,
    max: usize,
    hits: AtomicU64,
}

pub(crate) fn ttl_secs(ttl: Duration) -> u32 {
    let s = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    u32::try_from(s).unwrap_or(u32::MAX)
}

impl Segcache {
    pub fn builder() -> Builder { Builder::new() }
    pub(crate) fn new(b: &Builder) -> Result<Self> {
        b.validate()?;
        Ok(Segcache { map: HashMap::new(), clock: b.clock.clone(), cas: 0, max: b.segment_size - 16, hits: AtomicU64::new(0) })
    }
    pub fn now(&self) -> u32 { self.clock.now() }
    fn check(&self, key: &[u8], vlen: usize) -> Result<()> {
        if key.is_empty() { return Err(Error::EmptyKey) }
        if key.len() > MAX_KEY_LEN { return Err(Error::KeyTooLong { len: key.len() }) }
        if key.len() + vlen > self.max { return Err(Error::TooLarge { size: key.len() + vlen, max: self.max }) }
        Ok(())
    }
    pub fn get(&self, key: &[u8]) -> Option<Item<'_>> {
        let now = self.now();
        let (k, (v, f, c, e)) = self.map.get_key_value(key)?;
        if *e != 0 && now >= *e { return None }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(Item { key: k, value: v, flags: *f, cas: *c, expire_at: *e, now })
    }
    pub fn contains(&self, key: &[u8]) -> bool { self.get(key).is_some() }
    pub fn get_many_with<'a>(&'a self, keys: &[&[u8]], mut f: impl FnMut(usize, Item<'a>)) {
        for (i, k) in keys.iter().enumerate() { if let Some(it) = self.get(k) { f(i, it) } }
    }
    pub fn get_many<'a>(&'a self, keys: &[&[u8]]) -> Vec<Option<Item<'a>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
    pub fn set(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.check(key, value.len())?;
        self.cas += 1;
        let e = if ttl.is_zero() { 0 } else { self.now() + ttl_secs(ttl) };
        self.map.insert(key.to_vec(), (value.to_vec(), flags, self.cas, e));
        Ok(())
    }
    pub fn add(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        if self.contains(key) { return Err(Error::NotStored) }
        self.set(key, value, flags, ttl)
    }
    pub fn replace(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        if !self.contains(key) { return Err(Error::NotStored) }
        self.set(key, value, flags, ttl)
    }
    pub fn cas(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration, cas: u64) -> Result<()> {
        match self.get(key) { None => Err(Error::NotFound), Some(i) if i.cas != cas => Err(Error::Exists), _ => self.set(key, value, flags, ttl) }
    }
    fn concat(&mut self, key: &[u8], value: &[u8], front: bool) -> Result<()> {
        let it = self.get(key).ok_or(Error::NotStored)?;
        let mut v = if front { value.to_vec() } else { it.value.to_vec() };
        v.extend_from_slice(if front { it.value } else { value });
        let (f, e) = (it.flags, it.expire_at);
        let ttl = if e == 0 { Duration::ZERO } else { Duration::from_secs((e - self.now()) as u64) };
        self.set(key, &v, f, ttl)
    }
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<()> { self.concat(key, value, false) }
    pub fn prepend(&mut self, key: &[u8], value: &[u8]) -> Result<()> { self.concat(key, value, true) }
    fn arith(&mut self, key: &[u8], delta: u64, up: bool) -> Result<u64> {
        let it = self.get(key).ok_or(Error::NotFound)?;
        let n: u64 = std::str::from_utf8(it.value).ok().and_then(|s| s.parse().ok()).ok_or(Error::NotNumeric)?;
        let n = if up { n.wrapping_add(delta) } else { n.saturating_sub(delta) };
        let (f, e) = (it.flags, it.expire_at);
        let ttl = if e == 0 { Duration::ZERO } else { Duration::from_secs((e - self.now()) as u64) };
        self.set(key, n.to_string().as_bytes(), f, ttl)?;
        Ok(n)
    }
    pub fn incr(&mut self, key: &[u8], delta: u64) -> Result<u64> { self.arith(key, delta, true) }
    pub fn decr(&mut self, key: &[u8], delta: u64) -> Result<u64> { self.arith(key, delta, false) }
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        if !self.contains(key) { return Err(Error::NotFound) }
        self.map.remove(key); Ok(())
    }
    pub fn touch(&mut self, key: &[u8], ttl: Duration) -> Result<()> {
        let it = self.get(key).ok_or(Error::NotFound)?.to_owned();
        self.set(key, &it.value, it.flags, ttl)
    }
    pub fn flush(&mut self) { self.map.clear() }
    pub fn flush_after(&mut self, _delay: Duration) { self.map.clear() }
    pub fn expire(&mut self) -> usize { 0 }
    pub fn stats(&self) -> Stats { Stats { items: self.map.len() as u64, get_hits: self.hits.load(Ordering::Relaxed), shards: 1, ..Default::default() } }
    pub fn len(&self) -> usize { self.map.len() }
    pub fn is_empty(&self) -> bool { self.map.is_empty() }
}
