//! Writes: set, add, replace, cas and delete, and the store they share.

use std::time::Duration;

use crate::engine::rewrite::Overwrite;
use crate::engine::Segcache;
use crate::error::{Error, Result};
use crate::eviction::policy::Policy;
use crate::hash::hash;
use crate::hashtable::bucket::Bucket;
use crate::hashtable::slot::{self};
use crate::prefetch::prefetch;
use crate::record::MAX_KEY_LEN;
use crate::record::{self, Stamp};
use crate::segments::header::{NONE, POOL_MAIN, POOL_SMALL};
use crate::ttl_buckets::expire::expiry_of;
use crate::ttl_buckets::expire::ttl_secs;

/// What a store requires of the key's current item ([`Segcache::store_with`]).
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, Error, StoreMode, StoreOptions};
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// let opts = StoreOptions::default();
/// cache.store_with(b"k", b"1", 0, Duration::ZERO, StoreMode::Add, opts)?;
/// let again = cache.store_with(b"k", b"2", 0, Duration::ZERO, StoreMode::Add, opts);
/// assert!(matches!(again, Err(Error::NotStored)));
/// let cas = cache.get(b"k").unwrap().cas();
/// cache.store_with(b"k", b"3", 0, Duration::ZERO, StoreMode::Cas(cas), opts)?;
/// assert_eq!(cache.get(b"k").unwrap().value(), b"3");
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Store whatever is there.
    Set,
    /// Store only if the key is absent.
    Add,
    /// Store only if the key is present.
    Replace,
    /// Store only if the item's CAS value is this one.
    Cas(u64),
}

/// How a store sets the new item's state and CAS value (memcached's meta flags).
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, StoreMode, StoreOptions};
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// // memcached's `ms k E1234`: the client picks the CAS value.
/// let opts = StoreOptions { cas: Some(1234), ..StoreOptions::default() };
/// assert_eq!(cache.store_with(b"k", b"v", 0, Duration::ZERO, StoreMode::Set, opts)?, 1234);
/// assert_eq!(cache.get(b"k").unwrap().cas(), 1234);
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// The CAS value the item takes (memcached's `E`), instead of a new one from the shard's
    /// counter. The caller then answers for its uniqueness.
    pub cas: Option<u64>,
    /// The writer holds the new item's recache token (memcached's `mg N`, which creates an item
    /// on a miss): reads that claim the token see [`crate::Item::token_sent`] until the item is
    /// stored again or invalidated.
    pub won: bool,
    /// With [`Mode::Cas`]: when the item's CAS value is newer than the one given, store anyway,
    /// as a stale item that keeps the current item's TTL and recache token (memcached's `ms I`,
    /// for a client whose recache lost the race to a newer invalidation).
    pub invalidate: bool,
}

/// What a store writes besides the value: the record's state and the slot's fetched bit.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NewState {
    pub(crate) explicit: Option<u64>,
    pub(crate) stale: bool,
    pub(crate) won: bool,
    /// Keep the current item's fetched bit (an invalidation).
    pub(crate) keep_fetched: bool,
    /// The TTL given is what is left of the current item's, whose expiry was rounded down when
    /// it was stored: the new copy expires at that very second. Rounding again (the TTL, then
    /// the segment's window) would shorten the item's life at each append or increment.
    pub(crate) keep_expiry: bool,
    /// The record is a large item's head (see `engine::large`).
    pub(crate) large: bool,
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if valid_key(key) {
        Ok(())
    } else if key.is_empty() {
        Err(Error::EmptyKey)
    } else {
        Err(Error::KeyTooLong { len: key.len() })
    }
}

/// Whether `check_key` accepts `key`, for reads, which miss on a bad key: testing a `Result`
/// drops it, an out-of-line call on every read (`Error` owns heap data).
#[inline]
pub(crate) fn valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN
}

impl Segcache {
    /// Stores the item, replacing any other under `key` (`ttl` of zero: never expires).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"first", 0, Duration::ZERO)?; // never expires
    /// cache.set(b"k", b"second", 9, Duration::from_secs(60))?;
    /// let item = cache.get(b"k").unwrap();
    /// assert_eq!((item.value(), item.flags()), (&b"second"[..], 9));
    /// assert!(item.ttl().unwrap() <= Duration::from_secs(60));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    #[inline]
    pub fn set(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Set).map(drop)
    }

    /// Stores only if the key is absent (else [`Error::NotStored`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.add(b"lock", b"owner-1", 0, Duration::from_secs(30))?;
    /// let taken = cache.add(b"lock", b"owner-2", 0, Duration::from_secs(30));
    /// assert!(matches!(taken, Err(Error::NotStored)));
    /// assert_eq!(cache.get(b"lock").unwrap().value(), b"owner-1");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn add(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Add).map(drop)
    }

    /// Stores only if the key is present (else [`Error::NotStored`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// assert!(matches!(cache.replace(b"k", b"v", 0, Duration::ZERO), Err(Error::NotStored)));
    /// cache.set(b"k", b"old", 0, Duration::ZERO)?;
    /// cache.replace(b"k", b"new", 0, Duration::ZERO)?;
    /// assert_eq!(cache.get(b"k").unwrap().value(), b"new");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn replace(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Replace).map(drop)
    }

    /// Stores only if the item's CAS value is still `cas` ([`Error::Exists`] if it changed,
    /// [`Error::NotFound`] if it is gone).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v1", 0, Duration::ZERO)?;
    /// let token = cache.get(b"k").unwrap().cas();
    /// cache.cas(b"k", b"v2", 0, Duration::ZERO, token)?;
    /// // The token is spent: the item changed since it was read.
    /// assert!(matches!(cache.cas(b"k", b"v3", 0, Duration::ZERO, token), Err(Error::Exists)));
    /// assert!(matches!(cache.cas(b"absent", b"v", 0, Duration::ZERO, token), Err(Error::NotFound)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn cas(&mut self, key: &[u8], value: &[u8], flags: u32, ttl: Duration, cas: u64) -> Result<()> {
        self.store(key, hash(key), &[value], flags, ttl_secs(ttl), Mode::Cas(cas)).map(drop)
    }

    /// Stores the item as `mode` requires, with `opts` for its state and CAS value; returns the
    /// CAS value it got.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, StoreMode, StoreOptions};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// let cas = cache.store_with(b"k", b"v", 0, Duration::ZERO, StoreMode::Set, StoreOptions::default())?;
    /// assert_eq!(cache.get(b"k").unwrap().cas(), cas);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn store_with(
        &mut self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        ttl: Duration,
        mode: Mode,
        opts: StoreOptions,
    ) -> Result<u64> {
        check_key(key)?;
        self.origin.check()?;
        let h = hash(key);
        let now = self.prepare_keyed_write(key, h);
        let st = NewState { explicit: opts.cas, won: opts.won, ..NewState::default() };
        self.store_at(key, h, &[value], flags, ttl_secs(ttl), mode, now, st, opts.invalidate)
    }

    /// Marks the item stale (memcached's `md I`): reads that claim the recache token see
    /// [`crate::Item::is_stale`] and exactly one wins it ([`crate::Item::won`]). The item takes a
    /// new CAS value (`cas`, or the shard's next), keeps its value and flags, and takes `ttl` if
    /// given (else keeps its TTL); any token handed out before is forgotten. `compare`: only if
    /// the item's CAS value is that ([`Error::Exists`] otherwise). [`Error::NotFound`] if
    /// absent. Returns the new CAS value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ReadOptions};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// let cas = cache.invalidate(b"k", None, None, None)?;
    /// let claim = ReadOptions { claim_token: true, ..ReadOptions::default() };
    /// let first = cache.get_with_options(b"k", claim).unwrap();
    /// assert!(first.is_stale() && first.won() && first.cas() == cas);
    /// let second = cache.get_with_options(b"k", claim).unwrap();
    /// assert!(second.is_stale() && !second.won() && second.token_sent());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn invalidate(
        &mut self,
        key: &[u8],
        ttl: Option<Duration>,
        compare: Option<u64>,
        cas: Option<u64>,
    ) -> Result<u64> {
        check_key(key)?;
        self.origin.check()?;
        let h = hash(key);
        let now = self.prepare_keyed_write(key, h);
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let current = self.lookup(key, h, now).map(|(item, _)| {
            scratch.extend_from_slice(item.value);
            (item.cas, item.flags, item.expire_at)
        });
        let res = match current {
            None => Err(Error::NotFound),
            Some((c, _, _)) if compare.is_some_and(|x| x != c) => Err(Error::Exists),
            Some((_, flags, expire_at)) => {
                let secs = match ttl {
                    Some(t) => ttl_secs(t),
                    None if expire_at == 0 => 0,
                    None => expire_at.saturating_sub(now).max(1),
                };
                let st = NewState {
                    explicit: cas,
                    stale: true,
                    won: false,
                    keep_fetched: true,
                    keep_expiry: ttl.is_none(),
                    large: false,
                };
                self.store_at(key, h, &[&scratch], flags, secs, Mode::Set, now, st, false)
            }
        };
        self.scratch = scratch;
        res
    }

    /// Removes the key ([`Error::NotFound`] if absent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.delete(b"k")?;
    /// assert!(cache.get(b"k").is_none());
    /// assert!(matches!(cache.delete(b"k"), Err(Error::NotFound)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    #[inline]
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.delete_if(key, None)
    }

    /// Removes the key if its CAS value is `cas` ([`Error::Exists`] if it changed,
    /// [`Error::NotFound`] if absent): memcached's `md key C<cas>`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// let token = cache.get(b"k").unwrap().cas();
    /// cache.set(b"k", b"changed", 0, Duration::ZERO)?;
    /// assert!(matches!(cache.delete_cas(b"k", token), Err(Error::Exists)));
    /// let token = cache.get(b"k").unwrap().cas();
    /// cache.delete_cas(b"k", token)?;
    /// assert!(!cache.contains(b"k"));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn delete_cas(&mut self, key: &[u8], cas: u64) -> Result<()> {
        self.delete_if(key, Some(cas))
    }

    fn delete_if(&mut self, key: &[u8], compare: Option<u64>) -> Result<()> {
        self.delete_hashed(key, hash(key), compare)
    }

    /// `delete_if` for a caller that has the key's hash `h` (`SharedCache` hashes to choose the
    /// shard). Always inlined: the tier's check before a keyed write tipped the inliner's budget
    /// for `SharedCache::delete`, which then called it and the key's `locate` (40 instructions).
    #[inline(always)]
    pub(crate) fn delete_hashed(&mut self, key: &[u8], h: u64, compare: Option<u64>) -> Result<()> {
        check_key(key)?;
        self.origin.check()?;
        let now = self.prepare_keyed_write(key, h);
        self.delete_at(key, h, now, compare)
    }

    /// `delete_if` for a caller that has checked the key and prepared the write.
    pub(crate) fn delete_at(&mut self, key: &[u8], h: u64, now: u32, compare: Option<u64>) -> Result<()> {
        let Some((found, r)) = self.find_record(key, h) else {
            return Err(Error::NotFound);
        };
        // What `kill` would parse the record again for.
        let live_len = r.live_len();
        let large = r.stamp.large;
        let Some((item, found)) = self.item_meta(found, r, now) else {
            return Err(Error::NotFound);
        };
        if compare.is_some_and(|c| c != item.cas) {
            return Err(Error::Exists);
        }
        let chunks = if large { crate::large::Descriptor::decode(item.value) } else { None };
        let loc = slot::slot_loc(found.value);
        self.tell_owner_removal(loc, found.value, crate::listener::RemovalCause::Removed);
        self.kill_parsed(loc, live_len);
        self.remove_slot(h, found.slot);
        self.table().touch_info(h, now);
        self.meta_mut().deletes += 1;
        if let Some(d) = chunks {
            self.drop_chunks(&d);
        }
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
    ) -> Result<u64> {
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
    ) -> Result<u64> {
        check_key(key)?;
        self.origin.check()?;
        let now = self.prepare_keyed_write(key, h);
        self.store_at(key, h, value, flags, ttl, mode, now, NewState::default(), false)
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
        mut st: NewState,
        invalidate: bool,
    ) -> Result<u64> {
        let value_len: usize = value.iter().map(|v| v.len()).sum();
        // Its longest form (a wide CAS): a record must fit a segment in every form, so that a copy
        // into a segment where its counter is not narrow fits too.
        let widest = record::CasForm::widest(st.explicit.is_some());
        let len = record::record_len(key.len(), value_len, flags, widest);
        if len > self.geo.segment_size || value_len > record::MAX_VALUE_LEN {
            // Out of line: an item that fits a segment never comes here (see `engine::large`).
            return self.store_large(key, h, value, flags, ttl, mode, now, st, invalidate);
        }
        // The bucket's miss overlaps the append; the lookup after it finds the line in cache.
        prefetch(self.table().head(h) as *const Bucket as *const u8);
        // A plain set needs the current copy only to replace it, which the lookup after the
        // append does (S3-FIFO also wants its pool).
        let existing = if mode == Mode::Set && self.policy != Policy::S3Fifo {
            None
        } else {
            self.lookup_meta(key, h, now)
                .map(|(item, found)| (item.cas, found.value, item.expire_at, item.state.token_sent))
        };
        let mut ttl = ttl;
        match (mode, existing) {
            (Mode::Add, Some(_)) | (Mode::Replace, None) => return Err(Error::NotStored),
            (Mode::Cas(_), None) => return Err(Error::NotFound),
            // memcached's `ms I`: a recache that lost to a newer invalidation is kept, stale,
            // with the current item's TTL and token.
            (Mode::Cas(c), Some((cas, _, expire_at, won))) if invalidate && c < cas => {
                ttl = if expire_at == 0 { 0 } else { expire_at.saturating_sub(now).max(1) };
                st.keep_expiry = true;
                st.stale = true;
                st.won = won;
            }
            (Mode::Cas(c), Some((cas, ..))) if c != cas => return Err(Error::Exists),
            _ => {}
        }
        // New keys go to S3-FIFO's small pool unless the ghost remembers them; rewrites stay put.
        let pool = match existing {
            _ if self.policy != Policy::S3Fifo => POOL_MAIN,
            Some((_, v, ..)) => self.seg(slot::slot_loc(v).seg).pool,
            None if self.ghost.remembers(h) => POOL_MAIN,
            None => POOL_SMALL,
        };
        let expire_at = if st.keep_expiry && ttl != 0 { now.saturating_add(ttl) } else { expiry_of(ttl, now) };
        let counter = if st.explicit.is_some() { 0 } else { self.next_cas_mut() };
        let stamp = Stamp { stale: st.stale, won: st.won, ..Stamp::new(counter, st.explicit, 0) };
        let cas = st.explicit.unwrap_or_else(|| self.cas_of(counter));
        let width = |ttl| if st.keep_expiry { 1 } else { crate::ttl_buckets::ttl::width_of(ttl) };
        // A large item's head has a layout of its own (`record::LARGE_HEAD`): never written over
        // a record, appended by a call of its own, so that no other store tests for it again.
        let (loc, absent) = if st.large {
            (self.append_head(key, value, flags, stamp, ttl, expire_at, width(ttl), pool, now)?, false)
        } else {
            let (wide, absent) = match self.overwrite_in_place(
                key,
                h,
                value,
                flags,
                stamp,
                st.keep_fetched,
                value_len,
                ttl,
                expire_at,
                now,
            ) {
                Overwrite::Done => {
                    self.meta_mut().sets += 1;
                    return Ok(cas);
                }
                Overwrite::Append { wide, absent } => (wide, absent),
            };
            (self.append_record(key, value, flags, stamp, wide, ttl, expire_at, width(ttl), pool, now)?, absent)
        };
        // Appending may have evicted or moved the old copy: look it up again, unless there was
        // none (an append evicts and moves only what is there, and adds nothing under this key
        // but the slot below).
        let t = self.table();
        let old = if absent { None } else { t.find(h, |l| l != loc && self.key_at(l, key)) };
        // Only a file outlives a crash; the metadata line stays clean otherwise, since lock-free
        // readers on other cores read it (the flush time).
        if self.durable {
            let meta = self.meta_mut();
            meta.intent_seg = loc.seg;
            meta.intent_offset = loc.offset;
        }
        let freq = old.as_ref().map_or(0, |f| slot::slot_freq(f.value));
        let fetched = match old {
            Some(f) if st.keep_fetched => f.value & slot::FETCHED,
            _ => 0,
        };
        let new = slot::pack(slot::tag_of(h), freq, loc) | fetched;
        match old {
            Some(f) => {
                let old_loc = slot::slot_loc(f.value);
                self.tell_owner_removal(old_loc, f.value, crate::listener::RemovalCause::Replaced);
                match self.record(old_loc) {
                    Some(r) if r.stamp.large => self.replace_head(old_loc, h, f, new),
                    r => {
                        self.kill_parsed(old_loc, r.and_then(|r| r.live_len()));
                        t.put(h, f.slot, new);
                    }
                }
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
        Ok(cas)
    }
}
