//! Writes: set, add, replace, cas and delete, and the store they share.

use std::time::Duration;

use crate::config::MAX_KEY_LEN;
use crate::engine::memory::prefetch;
use crate::hash::hash;
use crate::hashtable::bucket::Bucket;
use crate::hashtable::slot::{self};
use crate::record::{self};
use crate::segments::header::{NONE, POOL_MAIN, POOL_SMALL};
use crate::ttl_buckets::expire::expiry_of;
use crate::ttl_buckets::expire::ttl_secs;
use crate::Segcache;
use crate::{Error, Policy, Result};

/// What a store requires of the key's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Set,
    Add,
    Replace,
    Cas(u64),
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        Err(Error::EmptyKey)
    } else if key.len() > MAX_KEY_LEN {
        Err(Error::KeyTooLong { len: key.len() })
    } else {
        Ok(())
    }
}

impl Segcache {
    /// Stores the item, replacing any other under `key` (`ttl` of zero: never expires).
    pub fn set(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Set)
    }

    /// Stores only if the key is absent (else [`Error::NotStored`]).
    pub fn add(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Add)
    }

    /// Stores only if the key is present (else [`Error::NotStored`]).
    pub fn replace(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Replace)
    }

    /// Stores only if the item's CAS value is still `cas` ([`Error::Exists`] if it changed,
    /// [`Error::NotFound`] if it is gone).
    pub fn cas(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration, cas: u64) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Cas(cas))
    }

    /// Removes the key ([`Error::NotFound`] if absent).
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.origin.check()?;
        let now = self.prepare_write();
        let h = hash(key);
        let Some((_, found)) = self.lookup(key, h, now) else {
            return Err(Error::NotFound);
        };
        let loc = slot::slot_loc(found.value);
        self.kill(loc);
        self.remove_slot(h, found.slot);
        self.table().touch_info(h, now);
        self.meta_mut().deletes += 1;
        Ok(())
    }

    /// `set`, `add`, `replace` or `cas` (by `mode`) for a caller that has the key's hash `h`
    /// (`SharedCache` hashes to choose the shard).
    #[inline]
    pub(crate) fn store_hashed(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[u8],
        flags: u32,
        ttl: Duration,
        mode: Mode,
    ) -> Result<()> {
        self.store(key, h, &[value], flags, ttl_secs(ttl), mode)
    }

    pub(crate) fn store(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[&[u8]],
        flags: u32,
        ttl: u32,
        mode: Mode,
    ) -> Result<()> {
        check_key(key)?;
        self.origin.check()?;
        let now = self.prepare_write();
        self.store_at(key, h, value, flags, ttl, mode, now)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn store_at(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[&[u8]],
        flags: u32,
        ttl: u32,
        mode: Mode,
        now: u32,
    ) -> Result<()> {
        let value_len: usize = value.iter().map(|v| v.len()).sum();
        let len = record::record_len(key.len(), value_len, flags);
        if len > self.geo.segment_size || value_len > record::MAX_VALUE_LEN {
            return Err(Error::TooLarge { size: key.len() + value_len, max: self.max_item_size() });
        }
        // The bucket's miss overlaps the append; the lookup after it finds the line in cache.
        prefetch(self.table().head(h) as *const Bucket as *const u8);
        // A plain set needs the current copy only to replace it, which the lookup after the
        // append does (S3-FIFO also wants its pool).
        let existing = if mode == Mode::Set && self.policy != Policy::S3Fifo {
            None
        } else {
            self.lookup(key, h, now).map(|(item, found)| (item.cas, found.value))
        };
        match (mode, existing) {
            (Mode::Add, Some(_)) | (Mode::Replace, None) => return Err(Error::NotStored),
            (Mode::Cas(_), None) => return Err(Error::NotFound),
            (Mode::Cas(c), Some((cas, _))) if c != cas => return Err(Error::Exists),
            _ => {}
        }
        // New keys go to S3-FIFO's small pool unless the ghost remembers them; rewrites stay put.
        let pool = match existing {
            _ if self.policy != Policy::S3Fifo => POOL_MAIN,
            Some((_, v)) => self.seg(slot::slot_loc(v).seg).pool,
            None if self.ghost_hit(h) => POOL_MAIN,
            None => POOL_SMALL,
        };
        let expire_at = expiry_of(ttl, now);
        let cas = self.next_cas_mut();
        if self.overwrite_in_place(key, h, value, flags, cas, len, ttl, expire_at, now) {
            self.meta_mut().sets += 1;
            return Ok(());
        }
        let loc = self.append_record(key, value, flags, cas, len, ttl, expire_at, pool, now)?;
        // Appending may have evicted or moved the old copy: look it up again.
        let t = self.table();
        let old = t.find(h, |l| l != loc && self.key_at(l, key));
        // Only a file outlives a crash; the metadata line stays clean otherwise, since lock-free
        // readers on other cores read it (the flush time).
        if self.durable {
            let meta = self.meta_mut();
            meta.intent_seg = loc.seg;
            meta.intent_offset = loc.offset;
        }
        let freq = old.as_ref().map_or(0, |f| slot::slot_freq(f.value));
        let new = slot::pack(slot::tag_of(h), freq, loc);
        match old {
            Some(f) => {
                self.kill(slot::slot_loc(f.value));
                t.put(h, f.slot, new);
            }
            None => {
                let mut pool = self.meta().overflow;
                let slot = match t.empty_slot(h, &mut pool) {
                    Some(s) => s,
                    None => self.make_room_in_chain(h)?,
                };
                if pool != self.meta().overflow {
                    self.meta_mut().overflow = pool;
                }
                t.put(h, slot, new);
            }
        }
        t.touch_info(h, now);
        let durable = self.durable;
        let meta = self.meta_mut();
        if durable {
            meta.intent_seg = NONE;
        }
        meta.sets += 1;
        Ok(())
    }
}
