//! Reads: single and batched lookups, and the item state they report and change.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::engine::write::valid_key;
use crate::engine::Segcache;
use crate::hash::hash;
use crate::hashtable::bucket::Bucket;
use crate::hashtable::slot::{self};
use crate::hashtable::table::{self, Table};
use crate::item::Item;
use crate::item::ItemState;
use crate::meta::{bump, Gone, ReadCounters};
use crate::prefetch::prefetch;
use crate::record::{self, Record, Stamp};
use crate::ttl_buckets::expire::flushed_by;
use crate::ttl_buckets::expire::live_until;

/// How a read treats the item's state (memcached's meta get flags). The default is a plain
/// read: it marks the item fetched and refreshes its access time, and takes no token.
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, ReadOptions};
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// cache.set(b"k", b"v", 0, Duration::ZERO)?;
/// let peek = ReadOptions { no_update: true, ..ReadOptions::default() };
/// assert!(!cache.get_with_options(b"k", peek).unwrap().fetched());
/// assert!(!cache.get(b"k").unwrap().fetched()); // the peek left no trace
/// assert!(cache.get(b"k").unwrap().fetched());
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Take the item's recache token if it is up for grabs (memcached's `mg`): the item is stale
    /// (see [`Segcache::invalidate`]) or its TTL left is below `recache_below`, and no read took
    /// the token since the item was stored or invalidated. Exactly one such read wins
    /// ([`Item::won`]); the others see [`Item::token_sent`].
    pub claim_token: bool,
    /// With `claim_token`: an item with less than this TTL left is up for grabs too (`R`).
    pub recache_below: Option<Duration>,
    /// Leave the fetched bit and the access time as they are (memcached's `u`).
    pub no_update: bool,
}

/// Seconds between refreshes of an item's access time, as memcached's `ITEM_UPDATE_INTERVAL`:
/// a read writes the access byte at most this often, so that hot items are not written on
/// every read (and lock-free reads rarely need the lock for it).
pub(crate) const ACCESS_REFRESH: u32 = 60;

/// Whether a read at `now` refreshes the access time of an item found in `state`. An item's
/// last access is never before its segment's creation, so in a segment younger than
/// `ACCESS_REFRESH` none is due, and its access byte needs no decoding.
#[inline]
pub(crate) fn access_due(state: &ItemState, now: u32) -> bool {
    now.saturating_sub(state.created) >= ACCESS_REFRESH && now.saturating_sub(state.last_access(now)) >= ACCESS_REFRESH
}

/// The state of a record stamped `stamp` in a segment created at `create_at`, in a slot holding
/// `slot_value`.
#[inline]
pub(crate) fn state_of(stamp: &Stamp, create_at: u32, slot_value: u64) -> ItemState {
    ItemState {
        fetched: slot_value & slot::FETCHED != 0,
        stale: stamp.stale,
        token_sent: stamp.won,
        won: false,
        access: stamp.access,
        created: create_at,
    }
}

/// Whether a read with `opts` of an item found in `state`, expiring at `expire_at`, takes its
/// recache token (when no read has).
#[inline]
pub(crate) fn token_due(opts: &ReadOptions, state: &ItemState, expire_at: u32, now: u32) -> bool {
    opts.claim_token
        && !state.token_sent
        && (state.stale
            || opts
                .recache_below
                .is_some_and(|r| expire_at != 0 && u64::from(expire_at) < u64::from(now) + r.as_secs()))
}

impl Segcache {
    #[inline]
    pub(crate) fn flushed(&self, now: u32) -> bool {
        flushed_by(self.meta().flush_at, now)
    }

    #[inline]
    pub(crate) fn live_expiry(&self, seg: u32, now: u32) -> Option<u32> {
        let exp = self.seg(seg).expire_at;
        live_until(exp, now).then_some(exp)
    }

    /// Looks the key up; `None` if absent, expired or flushed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 3, Duration::ZERO)?;
    /// let item = cache.get(b"k").unwrap();
    /// assert_eq!((item.key(), item.value(), item.flags()), (&b"k"[..], &b"v"[..], 3));
    /// assert!(cache.get(b"absent").is_none());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<Item<'_>> {
        self.get_counted_in(key, hash(key), &self.meta().reads)
    }

    /// `get` for a caller that has the key's hash and counts the read in its own `counters`
    /// (`SharedCache` counts in each reader's own slot, so a read writes no line another core uses).
    #[inline]
    pub(crate) fn get_counted_in(&self, key: &[u8], h: u64, counters: &ReadCounters) -> Option<Item<'_>> {
        self.get_with_options_in(key, h, counters, &ReadOptions::default())
    }

    /// Looks the key up as `get` does, with `opts` for the item's state: the item reports its
    /// state as found ([`Item::fetched`], [`Item::last_access`], [`Item::is_stale`]) and whether
    /// this read won its recache token ([`Item::won`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ReadOptions};
    ///
    /// let clock = segcache_core::ManualClock::new(1_000);
    /// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// cache.set(b"k", b"v", 0, Duration::from_secs(30))?;
    /// clock.advance(25);
    /// // memcached's `mg k R10`: the first read to see less than 10 s left wins the recache token.
    /// let claim = ReadOptions {
    ///     claim_token: true,
    ///     recache_below: Some(Duration::from_secs(10)),
    ///     ..ReadOptions::default()
    /// };
    /// assert!(cache.get_with_options(b"k", claim).unwrap().won());
    /// let second = cache.get_with_options(b"k", claim).unwrap();
    /// assert!(!second.won() && second.token_sent());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_with_options(&self, key: &[u8], opts: ReadOptions) -> Option<Item<'_>> {
        self.get_with_options_in(key, hash(key), &self.meta().reads, &opts)
    }

    /// Looks the key up as `get` does and hands the item to `f`, as
    /// [`SharedCache::get_with`](crate::SharedCache::get_with) does. With a flash tier
    /// ([`Builder::tier`](crate::Builder::tier)), an item read from the tier stays in this call's
    /// own buffer, where `get` must hold it until the next write.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"value", 0, Duration::ZERO)?;
    /// assert_eq!(cache.get_with(b"k", |item| item.value().len()), Some(5));
    /// assert_eq!(cache.get_with(b"absent", |item| item.value().len()), None);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(Item<'_>) -> R) -> Option<R> {
        self.get_with_options_then(key, hash(key), &self.meta().reads, &ReadOptions::default(), f)
    }

    #[inline]
    pub(crate) fn get_with_options_in(
        &self,
        key: &[u8],
        h: u64,
        counters: &ReadCounters,
        opts: &ReadOptions,
    ) -> Option<Item<'_>> {
        let Some((found, r)) = self.find_record(key, h) else {
            // A key on the flash tier has no DRAM slot: it is looked for only after a DRAM miss.
            if self.tier.is_some() {
                return self.get_flash(key, h, counters, opts.no_update);
            }
            counters.miss(None);
            return None;
        };
        self.serve(found, r, h, counters, opts)
    }

    /// The item of the key's slot `found` and its record `r`, counted as a hit and marked read
    /// as `opts` says; or `None`, counted as a miss.
    #[inline(always)]
    pub(crate) fn serve<'a>(
        &'a self,
        found: table::Found<'static>,
        r: Record<'a>,
        h: u64,
        counters: &ReadCounters,
        opts: &ReadOptions,
    ) -> Option<Item<'a>> {
        let now = self.now();
        match self.item_in(found, r, now) {
            Some((mut item, found)) => {
                let coin = bump(&counters.hits);
                self.note_read(found, &mut item.state, item.expire_at, item.now, opts, coin ^ h);
                Some(item)
            }
            None => {
                counters.miss(self.gone(found, now));
                None
            }
        }
    }

    /// Why `item_of` served nothing from the key's slot `found` at `now`.
    #[cold]
    fn gone(&self, found: table::Found<'static>, now: u32) -> Option<Gone> {
        if self.flushed(now) {
            Some(Gone::Flushed)
        } else if self.live_expiry(slot::slot_loc(found.value).seg, now).is_none() {
            Some(Gone::Expired)
        } else {
            None
        }
    }

    /// What a read with `opts` changes of the item found in `found` (as `state` describes it):
    /// its fetched bit and frequency counter (in the slot), its access time when due, and its
    /// recache token when due, which sets `state.won` (or `state.token_sent` when another read
    /// took it first). For a reader that holds the engine shared: the record bytes it changes
    /// are changed atomically, and only when they change.
    #[inline]
    pub(crate) fn note_read(
        &self,
        found: table::Found<'static>,
        state: &mut ItemState,
        expire_at: u32,
        now: u32,
        opts: &ReadOptions,
        coin: u64,
    ) {
        let loc = slot::slot_loc(found.value);
        if !opts.no_update {
            Table::bump_freq(found.slot, found.value, coin);
            if access_due(state, now) {
                let age = now.saturating_sub(self.seg(loc.seg).create_at);
                self.record_byte(loc, record::ACCESS_AT).store(record::access_code(age), Relaxed);
            }
        }
        if token_due(opts, state, expire_at, now) {
            let before = self.record_byte(loc, record::FLAGS_BYTE).fetch_or(record::WON, Relaxed);
            if before & record::WON == 0 {
                state.won = true;
            } else {
                state.token_sent = true;
            }
        }
    }

    #[inline]
    pub(crate) fn lookup(&self, key: &[u8], h: u64, now: u32) -> Option<(Item<'_>, table::Found<'static>)> {
        let (found, r) = self.find_record(key, h)?;
        self.item_in(found, r, now)
    }

    /// `lookup`, reading the clock only once the key's slot is found: a miss needs no time.
    #[inline]
    pub(crate) fn lookup_lazily(&self, key: &[u8], h: u64) -> Option<(Item<'_>, table::Found<'static>)> {
        let (found, r) = self.find_record(key, h)?;
        self.item_in(found, r, self.now())
    }

    /// The key's slot, whatever the item's expiry and any flush: needs no clock.
    #[inline]
    pub(crate) fn find_key(&self, key: &[u8], h: u64) -> Option<table::Found<'static>> {
        self.find_record(key, h).map(|(found, _)| found)
    }

    /// The key's slot and its record, which is parsed once: for the key comparison and then
    /// for the item (`item_in`).
    #[inline]
    pub(crate) fn find_record(&self, key: &[u8], h: u64) -> Option<(table::Found<'static>, Record<'_>)> {
        if !valid_key(key) {
            return None;
        }
        let mut record = None;
        let found = self.table().find(h, |loc| {
            record = self.keyed_record(loc, key);
            record.is_some()
        })?;
        Some((found, record?))
    }

    /// The item in the key's slot `found`, unless it expired or was flushed.
    #[inline]
    pub(crate) fn item_of(
        &self,
        found: table::Found<'static>,
        _h: u64,
        now: u32,
    ) -> Option<(Item<'_>, table::Found<'static>)> {
        self.item_in(found, self.record(slot::slot_loc(found.value))?, now)
    }

    /// `item_of` for the record `r` that `found` points at, already parsed. A large item's head
    /// gives the item with its value gathered from its chunks (see `engine::large`), or `None`
    /// when one is missing.
    #[inline]
    pub(crate) fn item_in<'a>(
        &'a self,
        found: table::Found<'static>,
        mut r: Record<'a>,
        now: u32,
    ) -> Option<(Item<'a>, table::Found<'static>)> {
        // A head's value has a length of its own: one test of the length, at hand, keeps other
        // items from the rest, out of line. Only the value's slice comes back from there: a
        // second source of the whole item had the hit path build it in memory and copy it out.
        if r.value.len() == crate::large::HEAD_VALUE_LEN {
            r.value = self.value_of_head(found, r.value)?;
        }
        self.item_raw(found, r, now)
    }

    /// `item_in` for a write that needs the item's metadata only: a large item's value is not
    /// gathered (the item's value is then its head's descriptor), only its chunks checked.
    #[inline]
    pub(crate) fn item_meta<'a>(
        &'a self,
        found: table::Found<'static>,
        r: Record<'a>,
        now: u32,
    ) -> Option<(Item<'a>, table::Found<'static>)> {
        if r.stamp.large {
            return self.large_meta(found, r, now);
        }
        self.item_raw(found, r, now)
    }

    /// `lookup` through `item_meta`.
    #[inline]
    pub(crate) fn lookup_meta(&self, key: &[u8], h: u64, now: u32) -> Option<(Item<'_>, table::Found<'static>)> {
        let (found, r) = self.find_record(key, h)?;
        self.item_meta(found, r, now)
    }

    /// The item the record `r` in `found` holds as it lies, whatever it is: a large item's head
    /// gives its descriptor as the value.
    #[inline]
    pub(crate) fn item_raw<'a>(
        &'a self,
        found: table::Found<'static>,
        r: Record<'a>,
        now: u32,
    ) -> Option<(Item<'a>, table::Found<'static>)> {
        // A `fork()` child reads nothing: its parent may be writing a shared file meanwhile.
        if self.flushed(now) || self.origin.forked() {
            return None;
        }
        // One look at the segment's header, for the expiry and the creation time.
        let seg = self.seg(slot::slot_loc(found.value).seg);
        let expire_at = seg.expire_at;
        if !live_until(expire_at, now) {
            return None;
        }
        let cas = r.explicit_cas().unwrap_or_else(|| self.cas_of(r.stamp.cas));
        let state = state_of(&r.stamp, seg.create_at, found.value);
        Some((Item { key: r.key, value: r.value, flags: r.client_flags, cas, expire_at, now, state }, found))
    }

    /// Whether the key is present; does not count as a read.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// assert!(cache.contains(b"k") && !cache.contains(b"absent"));
    /// assert_eq!(cache.stats().get_hits, 0); // not counted as a read
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn contains(&self, key: &[u8]) -> bool {
        let h = hash(key);
        // A large item's chunks are checked, not copied.
        let found = self.find_record(key, h).and_then(|(found, r)| self.item_meta(found, r, self.now()));
        found.is_some() || (self.tier.is_some() && self.contains_flash(key, h, self.now()))
    }

    /// Where the key's record lies (segment id, byte offset), if present: for tests that check
    /// what a write moved. Not part of the stable API.
    #[doc(hidden)]
    pub fn record_location(&self, key: &[u8]) -> Option<(u32, u32)> {
        let loc = slot::slot_loc(self.lookup_lazily(key, hash(key))?.1.value);
        Some((loc.seg, loc.offset))
    }

    /// Looks up many keys, calling `f(index, item)` for each hit. The buckets of a batch and then
    /// its items are prefetched before any is read, so the memory misses overlap.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"a", b"1", 0, Duration::ZERO)?;
    /// cache.set(b"c", b"3", 0, Duration::ZERO)?;
    /// let mut hits = Vec::new();
    /// cache.get_many_with(&[b"a", b"b", b"c"], |i, item| hits.push((i, item.value().to_vec())));
    /// assert_eq!(hits, [(0, b"1".to_vec()), (2, b"3".to_vec())]);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_many_with<'a>(&'a self, keys: &[&[u8]], mut f: impl FnMut(usize, Item<'a>)) {
        let counters = &self.meta().reads;
        let mut on_tier = Vec::new();
        self.get_many_counted_in(keys, counters, &mut on_tier, &mut f);
        for i in on_tier {
            if let Some(item) = self.get_flash(keys[i], hash(keys[i]), counters, false) {
                f(i, item);
            }
        }
    }

    /// `get_many_with` counting hits and misses in `counters` (see `get_counted_in`), for the
    /// keys in DRAM: with a tier, the indexes of the keys that DRAM lacks go to `on_tier`, for
    /// the caller to read from flash as its items' lifetime allows (not counted yet).
    pub(crate) fn get_many_counted_in<'a>(
        &'a self,
        keys: &[&[u8]],
        counters: &ReadCounters,
        on_tier: &mut Vec<usize>,
        mut f: impl FnMut(usize, Item<'a>),
    ) {
        pub(crate) const BATCH: usize = 16;
        let now = self.now();
        let t = self.table();
        let mut hashes = [0u64; BATCH];
        // The first slot whose tag matches: almost always the key's, so the last pass reads the
        // record there without scanning the chain again.
        let mut first_match: [Option<table::Found<'static>>; BATCH] = [None; BATCH];
        for (chunk_no, chunk) in keys.chunks(BATCH).enumerate() {
            for (h, k) in hashes.iter_mut().zip(chunk) {
                *h = hash(k);
                prefetch(t.head(*h) as *const Bucket as *const u8);
            }
            for (h, candidate) in hashes[..chunk.len()].iter().zip(&mut first_match) {
                let tag = slot::tag_of(*h);
                *candidate = t.find(*h, |_| true).filter(|f| slot::slot_tag(f.value) == tag);
                if let Some(found) = candidate {
                    let loc = slot::slot_loc(found.value);
                    if (loc.seg as usize) < self.geo.segments {
                        // SAFETY: in-bounds address inside the heap; prefetch never faults.
                        let at = unsafe {
                            self.mem.heap.add(loc.seg as usize * self.geo.segment_size + loc.offset as usize)
                        };
                        prefetch(at);
                        // Small items straddle two lines more often than not.
                        prefetch(at.wrapping_add(64));
                    }
                }
            }
            for (i, k) in chunk.iter().enumerate() {
                let h = hashes[i];
                let slot = match first_match[i] {
                    Some(f) if self.key_at(slot::slot_loc(f.value), k) => Some(f),
                    _ => self.find_key(k, h),
                };
                let Some(slot) = slot else {
                    if self.tier.is_some() {
                        on_tier.push(chunk_no * BATCH + i);
                    } else {
                        counters.miss(None);
                    }
                    continue;
                };
                match self.item_of(slot, h, now) {
                    Some((mut item, found)) => {
                        let coin = bump(&counters.hits);
                        self.note_read(found, &mut item.state, item.expire_at, now, &ReadOptions::default(), coin ^ h);
                        f(chunk_no * BATCH + i, item)
                    }
                    None => counters.miss(self.gone(slot, now)),
                }
            }
        }
    }

    /// Looks up many keys; `None` for each miss, in the order of `keys`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"a", b"1", 0, Duration::ZERO)?;
    /// let got = cache.get_many(&[b"a", b"b"]);
    /// assert_eq!(got[0].unwrap().value(), b"1");
    /// assert!(got[1].is_none());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn get_many<'a>(&'a self, keys: &[&[u8]]) -> Vec<Option<Item<'a>>> {
        let mut out = vec![None; keys.len()];
        self.get_many_with(keys, |i, item| out[i] = Some(item));
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::engine::read::{access_due, ACCESS_REFRESH};
    use crate::item::ItemState;
    use crate::record;

    /// `access_due` answers without decoding the access byte in a segment younger than
    /// `ACCESS_REFRESH`: for every access byte, segments created at the clock's extremes and
    /// between, and reads before, around and long after the refresh interval, it says what the
    /// decoded last access time says.
    #[test]
    fn access_due_says_what_the_decoded_last_access_says() {
        for access in 0..=255u8 {
            for created in [0, 1_000, 1_700_000_000, u32::MAX - 100, u32::MAX] {
                let later = [1 << 10, 1 << 20, 1 << 30].map(|d| created.saturating_add(d));
                for now in (created.saturating_sub(5)..=created.saturating_add(130)).chain(later).chain([u32::MAX]) {
                    let state = ItemState { access, created, ..ItemState::default() };
                    let last = created.saturating_add(record::access_age(access)).min(now);
                    assert_eq!(state.last_access(now), last);
                    let want = now.saturating_sub(last) >= ACCESS_REFRESH;
                    assert_eq!(access_due(&state, now), want, "access {access} created {created} now {now}");
                }
            }
        }
    }

    use crate::builder::Builder;
    use crate::eviction::policy::Policy;
    use crate::hash::hash;
    use crate::hashtable::slot;

    /// Two keys in one chain with the same tag: the first tag match is not always the key, so
    /// the batched read must compare keys and fall back to a full scan.
    #[test]
    fn batched_reads_tell_apart_keys_that_share_bucket_and_tag() {
        let mut c = Builder::new()
            .heap_size(4 << 20)
            .segment_size(1 << 20)
            .hash_power(4)
            .eviction(Policy::None)
            .build()
            .unwrap();
        let mask = c.geo.primary_buckets() as u64 - 1;
        let key = |i: u32| format!("collide-{i}").into_bytes();
        let (first, h0) = (key(0), hash(&key(0)));
        let twin = (1..)
            .map(key)
            .find(|k| {
                let h = hash(k);
                slot::tag_of(h) == slot::tag_of(h0) && h & mask == h0 & mask
            })
            .unwrap();
        c.set(&first, b"first", 0, Duration::ZERO).unwrap();
        c.set(&twin, b"twin", 0, Duration::ZERO).unwrap();
        let got: Vec<Option<Vec<u8>>> =
            c.get_many(&[&twin, &first, b"absent"]).into_iter().map(|i| i.map(|i| i.value().to_vec())).collect();
        assert_eq!(got, [Some(b"twin".to_vec()), Some(b"first".to_vec()), None]);
        c.delete(&first).unwrap();
        let got: Vec<Option<Vec<u8>>> =
            c.get_many(&[&first, &twin]).into_iter().map(|i| i.map(|i| i.value().to_vec())).collect();
        assert_eq!(got, [None, Some(b"twin".to_vec())]);
        assert_eq!(c.get(&twin).map(|i| i.value().to_vec()), Some(b"twin".to_vec()));
    }
}
