//! Read-modify-write: append, prepend, incr, decr and touch, which rewrite an item from its
//! current value.

use std::time::Duration;

use crate::engine::write::check_key;
use crate::engine::write::{Mode, NewState};
use crate::engine::Segcache;
use crate::error::{Error, Result};
use crate::eviction::policy::Policy;
use crate::hash::hash;
use crate::hashtable::slot::{self};
use crate::hashtable::table::Table;
use crate::record::{self};
use crate::segments::append::expiry_fits;
use crate::segments::header::{NONE, POOL_MAIN};
use crate::ttl_buckets::expire::expiry_of;
use crate::ttl_buckets::expire::ttl_secs;
use crate::ttl_buckets::ttl;

/// `TooLarge` when `old` joined with `added` under `key` would be over `max` (see `max_item_size`).
pub(crate) fn fits_joined(key: &[u8], old: &[u8], added: &[u8], max: usize) -> Result<()> {
    let size = key.len().saturating_add(old.len()).saturating_add(added.len());
    if size > max {
        return Err(Error::TooLarge { size, max });
    }
    Ok(())
}

/// A decimal ASCII unsigned 64-bit number, as memcached's incr/decr accept it (`safe_strtoull`
/// over the value, which memcached stores followed by "\r\n"): leading white space and a sign
/// allowed, at least one digit, no overflow, then white space, a NUL or the end; a minus sign
/// only when the result is below 2^63 read as signed (so "-0" is 0, "-1" is refused). memcached's
/// `incr` leaves a shrunk number padded with spaces ("5 "), which reads back as 5.
///
/// ```
/// use segcache_core::parse_decimal;
/// assert_eq!(parse_decimal(b"42"), Some(42));
/// assert_eq!(parse_decimal(b" 7 "), Some(7)); // spaces around, as memcached's padded numbers
/// assert_eq!(parse_decimal(b"-0"), Some(0));
/// assert_eq!(parse_decimal(b"-1"), None);
/// assert_eq!(parse_decimal(b"12ab"), None);
/// assert_eq!(parse_decimal(b"18446744073709551616"), None); // 2^64 overflows
/// ```
pub fn parse_decimal(v: &[u8]) -> Option<u64> {
    // C's isspace in the "C" locale.
    let space = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let i = v.iter().position(|&c| !space(c))?;
    let (negative, i) = match v[i] {
        b'-' => (true, i + 1),
        b'+' => (false, i + 1),
        _ => (false, i),
    };
    let digits = v[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let n = v[i..i + digits].iter().try_fold(0u64, |n, &c| n.checked_mul(10)?.checked_add(u64::from(c - b'0')))?;
    match v.get(i + digits) {
        None | Some(0) => {}
        Some(&c) if space(c) => {}
        Some(_) => return None,
    }
    if negative {
        let n = n.wrapping_neg();
        return ((n as i64) >= 0).then_some(n);
    }
    Some(n)
}

/// `n` in decimal ASCII, written into the end of `buf`.
pub(crate) fn format_decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// What an increment or decrement did (see [`Segcache::add_delta`]).
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, Delta};
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// cache.set(b"n", b"9", 0, Duration::ZERO)?;
/// let Delta { value, grew, cas } = cache.add_delta(b"n", true, 1)?;
/// assert_eq!((value, grew), (10, true)); // "10" is longer than "9"
/// assert_eq!(cache.get(b"n").unwrap().cas(), cas);
/// assert!(!cache.add_delta(b"n", true, 1)?.grew);
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    /// The new value.
    pub value: u64,
    /// The result is longer than the old value was (memcached writes it as a new item).
    pub grew: bool,
    /// The CAS value the item took.
    pub cas: u64,
}

/// Conditions of a read-modify-write (append, prepend, incr, decr), checked under the same lock
/// as the write (memcached's meta `C` and `E`, and its `-I` item size limit).
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, Error, RmwOptions};
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// cache.set(b"log", b"a", 0, Duration::ZERO)?;
/// let token = cache.get(b"log").unwrap().cas();
/// // memcached's `ma`/`ms ... MA` with `C<cas>`: only if nobody wrote since the read.
/// let only_if = RmwOptions { compare: Some(token), ..RmwOptions::default() };
/// let cas = cache.append_with(b"log", b"b", only_if)?;
/// assert!(matches!(cache.append_with(b"log", b"c", only_if), Err(Error::Exists)));
/// let item = cache.get(b"log").unwrap();
/// assert_eq!((item.value(), item.cas()), (&b"ab"[..], cas));
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Clone, Copy, Default)]
pub struct RmwOptions<'a> {
    /// Only if the item's CAS value is this ([`Error::Exists`] otherwise).
    pub compare: Option<u64>,
    /// The CAS value the new version takes (else the next one counted).
    pub cas: Option<u64>,
    /// A size limit of the caller's own on the joined item of an append or prepend, asked with
    /// the item's client flags and the joined value's length: `false` refuses the write with
    /// [`Error::NotStored`] (the engine's own limit gives [`Error::TooLarge`]).
    pub fits: Option<&'a dyn Fn(u32, usize) -> bool>,
}

impl std::fmt::Debug for RmwOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmwOptions")
            .field("compare", &self.compare)
            .field("cas", &self.cas)
            .field("fits", &self.fits.is_some())
            .finish()
    }
}

impl Segcache {
    /// Appends to the value, keeping flags and expiry ([`Error::NotStored`] if absent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"log", b"a", 5, Duration::ZERO)?;
    /// cache.append(b"log", b"b")?;
    /// let item = cache.get(b"log").unwrap();
    /// assert_eq!((item.value(), item.flags()), (&b"ab"[..], 5));
    /// assert!(matches!(cache.append(b"absent", b"x"), Err(Error::NotStored)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn append(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.append_with(key, value, RmwOptions::default()).map(drop)
    }

    /// Prepends to the value, keeping flags and expiry ([`Error::NotStored`] if absent).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"log", b"b", 0, Duration::ZERO)?;
    /// cache.prepend(b"log", b"a")?;
    /// assert_eq!(cache.get(b"log").unwrap().value(), b"ab");
    /// assert!(matches!(cache.prepend(b"absent", b"x"), Err(Error::NotStored)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn prepend(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.prepend_with(key, value, RmwOptions::default()).map(drop)
    }

    /// `append` under `opts`; returns the CAS value the item took.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error, RmwOptions};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"abc", 0, Duration::ZERO)?;
    /// // A size limit of the caller's own (memcached's -I): the joined value may be 4 bytes.
    /// let small = |_flags: u32, len: usize| len <= 4;
    /// let opts = RmwOptions { fits: Some(&small), ..RmwOptions::default() };
    /// cache.append_with(b"k", b"d", opts)?;
    /// assert!(matches!(cache.append_with(b"k", b"e", opts), Err(Error::NotStored)));
    /// assert_eq!(cache.get(b"k").unwrap().value(), b"abcd");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn append_with(&mut self, key: &[u8], value: &[u8], opts: RmwOptions<'_>) -> Result<u64> {
        self.join(key, value, false, opts)
    }

    /// `prepend` under `opts`; returns the CAS value the item took.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, RmwOptions};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"b", 0, Duration::ZERO)?;
    /// // memcached's `E`: the new version takes a CAS value of the caller's choice.
    /// let cas = cache.prepend_with(b"k", b"a", RmwOptions { cas: Some(500), ..RmwOptions::default() })?;
    /// assert_eq!(cas, 500);
    /// let item = cache.get(b"k").unwrap();
    /// assert_eq!((item.value(), item.cas()), (&b"ab"[..], 500));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn prepend_with(&mut self, key: &[u8], value: &[u8], opts: RmwOptions<'_>) -> Result<u64> {
        self.join(key, value, true, opts)
    }

    fn join(&mut self, key: &[u8], value: &[u8], front: bool, opts: RmwOptions<'_>) -> Result<u64> {
        let max = self.joined_size_limit(key, value)?;
        self.rewrite(key, Error::NotStored, opts, |old, flags, out| {
            if opts.fits.is_some_and(|fits| !fits(flags, old.len() + value.len())) {
                return Err(Error::NotStored);
            }
            fits_joined(key, old, value, max)?;
            let parts = if front { [value, old] } else { [old, value] };
            parts.iter().for_each(|p| out.extend_from_slice(p));
            Ok(false)
        })
    }

    /// The largest item an append or prepend of `value` to `key` may make, or `TooLarge` when
    /// `value` alone is over it: checked before anything is copied, so that an oversized argument
    /// costs no allocation of its size.
    pub(crate) fn joined_size_limit(&self, key: &[u8], value: &[u8]) -> Result<usize> {
        let max = self.max_item_size();
        fits_joined(key, &[], value, max)?;
        Ok(max)
    }

    /// Adds `delta` to a decimal value, wrapping at 2^64; returns the new value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"hits", b"41", 0, Duration::ZERO)?;
    /// assert_eq!(cache.incr(b"hits", 1)?, 42);
    /// assert_eq!(cache.get(b"hits").unwrap().value(), b"42");
    /// cache.set(b"max", u64::MAX.to_string().as_bytes(), 0, Duration::ZERO)?;
    /// assert_eq!(cache.incr(b"max", 2)?, 1); // wraps
    /// cache.set(b"name", b"alice", 0, Duration::ZERO)?;
    /// assert!(matches!(cache.incr(b"name", 1), Err(Error::NotNumeric)));
    /// assert!(matches!(cache.incr(b"absent", 1), Err(Error::NotFound)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn incr(&mut self, key: &[u8], delta: u64) -> Result<u64> {
        self.add_delta(key, true, delta).map(|d| d.value)
    }

    /// Subtracts `delta` from a decimal value, stopping at 0; returns the new value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"stock", b"3", 0, Duration::ZERO)?;
    /// assert_eq!(cache.decr(b"stock", 2)?, 1);
    /// assert_eq!(cache.decr(b"stock", 5)?, 0); // stops at zero
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn decr(&mut self, key: &[u8], delta: u64) -> Result<u64> {
        self.add_delta(key, false, delta).map(|d| d.value)
    }

    /// `incr` (or `decr` when `!incr`), also telling whether the result outgrew the old value
    /// (memcached then writes a new item, and counts it in `total_items`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"n", b"10", 0, Duration::ZERO)?;
    /// let down = cache.add_delta(b"n", false, 1)?;
    /// assert_eq!((down.value, down.grew), (9, false));
    /// let up = cache.add_delta(b"n", true, 91)?;
    /// assert_eq!((up.value, up.grew), (100, true));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn add_delta(&mut self, key: &[u8], incr: bool, delta: u64) -> Result<Delta> {
        self.add_delta_with(key, incr, delta, RmwOptions::default())
    }

    /// `add_delta` under `opts` (`fits` does not apply: a number always fits).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, Error, RmwOptions};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"n", b"1", 0, Duration::ZERO)?;
    /// let token = cache.get(b"n").unwrap().cas();
    /// let only_if = RmwOptions { compare: Some(token), ..RmwOptions::default() };
    /// let delta = cache.add_delta_with(b"n", true, 1, only_if)?;
    /// assert_eq!(delta.value, 2);
    /// assert_eq!(cache.get(b"n").unwrap().cas(), delta.cas);
    /// assert!(matches!(cache.add_delta_with(b"n", true, 1, only_if), Err(Error::Exists)));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn add_delta_with(&mut self, key: &[u8], incr: bool, delta: u64, opts: RmwOptions<'_>) -> Result<Delta> {
        if incr {
            self.arith(key, opts, |n| n.wrapping_add(delta))
        } else {
            self.arith(key, opts, |n| n.saturating_sub(delta))
        }
    }

    /// Sets a new TTL ([`Error::NotFound`] if absent), keeping the value, flags and CAS value.
    ///
    /// An item's expiry is its segment's. If that segment's expiry suits the new TTL as it would
    /// suit an append (`expiry_fits`: not later than asked, less than a TTL bucket width
    /// earlier), nothing changes; otherwise the record moves once, copied heap to heap into the
    /// open segment of the new TTL's bucket, and is published like any append.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// cache.set(b"session", b"v", 0, Duration::from_secs(10))?;
    /// cache.touch(b"session", Duration::from_secs(100))?;
    /// clock.advance(50);
    /// assert!(cache.get(b"session").is_some());
    /// assert!(cache.touch(b"absent", Duration::ZERO).is_err());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn touch(&mut self, key: &[u8], ttl: Duration) -> Result<()> {
        check_key(key)?;
        self.origin.check()?;
        let h = hash(key);
        let now = self.prepare_keyed_write(key, h);
        self.touch_at(key, h, ttl_secs(ttl), now, true)
    }

    /// `touch` that does not count as an access: the item's fetched bit stays as it is
    /// (memcached's meta commands set TTLs so: `ma T`, `ma N`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"a", b"v", 0, Duration::ZERO)?;
    /// cache.set(b"b", b"v", 0, Duration::ZERO)?;
    /// cache.set_ttl(b"a", Duration::from_secs(60))?;
    /// cache.touch(b"b", Duration::from_secs(60))?;
    /// assert!(!cache.get(b"a").unwrap().fetched()); // set_ttl is no access
    /// assert!(cache.get(b"b").unwrap().fetched()); // touch is one
    /// assert!(cache.get(b"a").unwrap().ttl().is_some());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn set_ttl(&mut self, key: &[u8], ttl: Duration) -> Result<()> {
        check_key(key)?;
        self.origin.check()?;
        let h = hash(key);
        let now = self.prepare_keyed_write(key, h);
        self.touch_at(key, h, ttl_secs(ttl), now, false)
    }

    /// `touch` (`access`: marking the item fetched, as memcached's touch does) or `set_ttl`.
    pub(crate) fn touch_at(&mut self, key: &[u8], h: u64, ttl: u32, now: u32, access: bool) -> Result<()> {
        let Some((item, found)) = self.lookup(key, h, now) else {
            return Err(Error::NotFound);
        };
        let old_loc = slot::slot_loc(found.value);
        let Some((form, cas, large)) = self.record(old_loc).map(|r| (r.form(), r.stamp.cas, r.stamp.large)) else {
            return Err(Error::NotFound);
        };
        // A large item's chunks take the new TTL too: the item is stored again whole, with its
        // CAS value and state (see `engine::large`).
        if large {
            let kept = item.value.to_vec();
            let state = NewState {
                explicit: Some(item.cas),
                stale: item.state.stale,
                won: item.state.token_sent,
                ..NewState::default()
            };
            let fetched = access || found.value & slot::FETCHED != 0;
            return self.restore_touched(key, h, &kept, item.flags, ttl, now, state, fetched);
        }
        let (key_len, value_len, flags) = (item.key.len(), item.value.len(), item.flags);
        // The copy's length where it goes: its CAS is re-expressed for that segment's base.
        let len_in = move |base| record::record_len(key_len, value_len, flags, form.moved(cas, base));
        let (expire_at, width) = (expiry_of(ttl, now), ttl::width_of(ttl));
        let seg = slot::slot_loc(found.value).seg;
        // A touch is an access, as memcached's (it marks the item fetched).
        let fetched = if access { slot::FETCHED } else { 0 };
        if found.value | fetched != found.value {
            found.slot.store(found.value | fetched, std::sync::atomic::Ordering::Relaxed);
        }
        if expiry_fits(self.seg(seg), expire_at, width) {
            return Ok(());
        }
        let pool = if self.policy == Policy::S3Fifo { self.seg(seg).pool } else { POOL_MAIN };
        // Making room may evict the item itself: kept here, it is then stored again as it was.
        let kept = item.value.to_vec();
        let state = NewState {
            explicit: Some(item.cas),
            stale: item.state.stale,
            won: item.state.token_sent,
            ..NewState::default()
        };
        let was_fetched = found.value & slot::FETCHED != 0;
        let (dest, len) = self.segment_for(len_in, ttl, expire_at, width, pool, now)?;
        // Opening a segment may have evicted the record or moved it (a merge): look again.
        let Some(found) = self.find_key(key, h) else {
            return self.restore_touched(key, h, &kept, flags, ttl, now, state, access || was_fetched);
        };
        let old = slot::slot_loc(found.value);
        // Wherever it lies now, its copy takes `len` bytes in `dest` (`segment_for` found room),
        // which depends on its CAS value only, not on its current form.
        let (old_base, old_create) = (self.seg(old.seg).cas_base, self.seg(old.seg).create_at);
        debug_assert!(old.seg != dest && self.moved_len(old, old_base, self.seg(dest).cas_base) == len);
        let new = self.segments().move_record(old, old_base, old_create, dest);
        // Published as `store_at` publishes a replacement, so a crash keeps one of the copies.
        if self.durable {
            let meta = self.meta_mut();
            meta.intent_seg = new.seg;
            meta.intent_offset = new.offset;
        }
        self.kill(old);
        Table::relocate(found.slot, found.value | fetched, slot::slot_freq(found.value), new);
        self.table().touch_info(h, now);
        if self.durable {
            self.meta_mut().intent_seg = NONE;
        }
        Ok(())
    }

    /// Stores a touched item again that the room for its new copy evicted: the same value,
    /// flags, CAS value and stale and token state, the new TTL, and fetched if it was or the
    /// touch is an access. A touch never loses the item it touches (memcached's touch bumps it).
    #[allow(clippy::too_many_arguments)]
    fn restore_touched(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[u8],
        flags: u32,
        ttl: u32,
        now: u32,
        state: NewState,
        fetched: bool,
    ) -> Result<()> {
        self.store_at(key, h, &[value], flags, ttl, Mode::Set, now, state, false)?;
        if let Some(found) = self.find_key(key, h).filter(|_| fetched) {
            found.slot.store(found.value | slot::FETCHED, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    fn arith(&mut self, key: &[u8], opts: RmwOptions<'_>, op: impl FnOnce(u64) -> u64) -> Result<Delta> {
        let (mut result, mut grew, pad) = (0, false, self.pad_numbers);
        let cas = self.rewrite(key, Error::NotFound, opts, |old, _, out| {
            let n = parse_decimal(old).ok_or(Error::NotNumeric)?;
            result = op(n);
            let mut buf = [0; 20];
            let digits = format_decimal(result, &mut buf);
            grew = digits.len() > old.len();
            out.extend_from_slice(digits);
            if pad {
                // As memcached: a number that got shorter keeps the old length, padded with
                // spaces (memcached writes it in place; here too the record keeps its size).
                out.resize(old.len().max(digits.len()), b' ');
            }
            // memcached writes a number that does not grow in place, so the item keeps its
            // state (fetched, stale, token); here too when it pads or keeps its length.
            Ok(!grew && (pad || digits.len() == old.len()))
        })?;
        Ok(Delta { value: result, grew, cas })
    }

    /// Reads the item, builds its new value in `scratch` (from the old value and the client
    /// flags), and stores it with the same flags and expiry: a new version (not fetched yet, not
    /// stale), unless `build` says it changed the value in place as memcached would (then the
    /// item keeps its state). `opts`: the CAS value compared and the one taken.
    pub(crate) fn rewrite(
        &mut self,
        key: &[u8],
        missing: Error,
        opts: RmwOptions<'_>,
        build: impl FnOnce(&[u8], u32, &mut Vec<u8>) -> Result<bool>,
    ) -> Result<u64> {
        check_key(key)?;
        self.origin.check()?;
        let h = hash(key);
        let now = self.prepare_keyed_write(key, h);
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let (flags, expire_at, st) = match self.lookup(key, h, now) {
            None => {
                self.scratch = scratch;
                return Err(missing);
            }
            Some((item, _)) if opts.compare.is_some_and(|c| c != item.cas) => {
                self.scratch = scratch;
                return Err(Error::Exists);
            }
            Some((item, _)) => match build(item.value, item.flags, &mut scratch) {
                Err(e) => {
                    self.scratch = scratch;
                    return Err(e);
                }
                Ok(false) => (
                    item.flags,
                    item.expire_at,
                    NewState { explicit: opts.cas, keep_expiry: true, ..NewState::default() },
                ),
                Ok(true) => {
                    let s = &item.state;
                    let st = NewState {
                        explicit: opts.cas,
                        stale: s.stale,
                        won: s.token_sent,
                        keep_fetched: true,
                        keep_expiry: true,
                        large: false,
                    };
                    (item.flags, item.expire_at, st)
                }
            },
        };
        let ttl = if expire_at == 0 { 0 } else { expire_at.saturating_sub(now).max(1) };
        let res = self.store_at(key, h, &[&scratch], flags, ttl, Mode::Set, now, st, false);
        self.scratch = scratch;
        res
    }
}
