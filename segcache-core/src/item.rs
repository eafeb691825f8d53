//! What a read returns: a borrowed view of an item, and an owned copy.

use std::time::Duration;

/// A borrowed view of a stored item. From [`crate::Segcache`] no copy is made: it borrows the
/// cache, so writes wait until it is dropped. Through [`crate::SharedCache::get_with`] it borrows
/// either the reader's own copy (items up to 512 bytes) or, under the shard's read lock, the cache.
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, Item};
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// cache.set(b"k", b"v", 1, Duration::ZERO)?;
/// let item: Item<'_> = cache.get(b"k").unwrap();
/// assert_eq!((item.key(), item.value(), item.flags(), item.ttl()), (&b"k"[..], &b"v"[..], 1, None));
/// drop(item); // the borrow ends: writes may go on
/// cache.delete(b"k")?;
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
    pub(crate) flags: u32,
    pub(crate) cas: u64,
    /// Absolute expiry, Unix seconds; 0 for never.
    pub(crate) expire_at: u32,
    pub(crate) now: u32,
    /// The item's state as this read found it (see the methods).
    pub(crate) state: ItemState,
}

/// What a read found of an item's state, before the read changed it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ItemState {
    pub(crate) fetched: bool,
    pub(crate) stale: bool,
    /// Another read already holds the recache token.
    pub(crate) token_sent: bool,
    /// This read won the recache token.
    pub(crate) won: bool,
    /// The record's access byte (`record::access_code`) and its segment's creation time (Unix
    /// seconds): the last store or fetch, refreshed at most every `ACCESS_REFRESH`, decoded only
    /// when asked (`last_access`), since a plain read never asks.
    pub(crate) access: u8,
    pub(crate) created: u32,
}

impl ItemState {
    /// Unix seconds of the last store or fetch, never after `now`: the time the access byte
    /// stands for, counted from the segment's creation.
    #[inline]
    pub(crate) fn last_access(&self, now: u32) -> u32 {
        self.created.saturating_add(crate::record::access_age(self.access)).min(now)
    }
}

impl<'a> Item<'a> {
    /// The item's key.
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut cache = segcache_core::Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"user:1", b"v", 0, Duration::ZERO)?;
    /// assert_eq!(cache.get(b"user:1").unwrap().key(), b"user:1");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn key(&self) -> &'a [u8] {
        self.key
    }
    /// The item's value.
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut cache = segcache_core::Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"hello", 0, Duration::ZERO)?;
    /// assert_eq!(cache.get(b"k").unwrap().value(), b"hello");
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn value(&self) -> &'a [u8] {
        self.value
    }
    /// The 32-bit client flags given at `set` (0 if none).
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut cache = segcache_core::Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0xdead_beef, Duration::ZERO)?;
    /// assert_eq!(cache.get(b"k").unwrap().flags(), 0xdead_beef);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn flags(&self) -> u32 {
        self.flags
    }
    /// The CAS value to pass to `cas`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut cache = segcache_core::Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// let before = cache.get(b"k").unwrap().cas();
    /// cache.append(b"k", b"w")?;
    /// assert_ne!(cache.get(b"k").unwrap().cas(), before); // every modification changes it
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn cas(&self) -> u64 {
        self.cas
    }
    /// Time left to live; `None` when the item never expires.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// cache.set(b"k", b"v", 0, Duration::from_secs(100))?;
    /// clock.advance(40);
    /// let left = cache.get(b"k").unwrap().ttl().unwrap();
    /// assert!(left <= Duration::from_secs(60));
    /// cache.set(b"forever", b"v", 0, Duration::ZERO)?;
    /// assert_eq!(cache.get(b"forever").unwrap().ttl(), None);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn ttl(&self) -> Option<Duration> {
        (self.expire_at != 0).then(|| Duration::from_secs(u64::from(self.expire_at.saturating_sub(self.now))))
    }
    /// Absolute expiry time in Unix seconds; `None` when the item never expires.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// cache.set(b"k", b"v", 0, Duration::from_secs(100))?;
    /// let at = cache.get(b"k").unwrap().expire_at().unwrap();
    /// assert!(at > 1_000 && at <= 1_100); // never later than asked
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn expire_at(&self) -> Option<u32> {
        (self.expire_at != 0).then_some(self.expire_at)
    }
    /// Whether the item was read before this read since it was stored (memcached's `h`).
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut cache = segcache_core::Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// assert!(!cache.get(b"k").unwrap().fetched()); // the first read
    /// assert!(cache.get(b"k").unwrap().fetched());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn fetched(&self) -> bool {
        self.state.fetched
    }
    /// Time since the item was last stored or read, before this read (memcached's `l`): in whole
    /// seconds, refreshed at most once a minute as memcached does, and rounded (down) to within
    /// an eighth of the time since its segment was opened.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ManualClock};
    ///
    /// let clock = ManualClock::new(1_000);
    /// let mut cache = Builder::new().heap_size(4 << 20).clock(clock.clone()).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// clock.advance(120);
    /// let idle = cache.get(b"k").unwrap().last_access();
    /// assert!(idle > Duration::from_secs(100) && idle <= Duration::from_secs(120));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn last_access(&self) -> Duration {
        Duration::from_secs(u64::from(self.now.saturating_sub(self.state.last_access(self.now))))
    }
    /// Whether the item was marked stale ([`crate::Segcache::invalidate`], memcached's `X`).
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut cache = segcache_core::Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// assert!(!cache.get(b"k").unwrap().is_stale());
    /// cache.invalidate(b"k", None, None, None)?;
    /// assert!(cache.get(b"k").unwrap().is_stale());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn is_stale(&self) -> bool {
        self.state.stale
    }
    /// Whether this read won the item's recache token (memcached's `W`): it was stale, or
    /// its TTL left was below the read's [`crate::ReadOptions::recache_below`], and no read had the token.
    /// Only reads that ask for it ([`crate::ReadOptions::claim_token`]) take a token.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ReadOptions};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.invalidate(b"k", None, None, None)?;
    /// let claim = ReadOptions { claim_token: true, ..ReadOptions::default() };
    /// assert!(!cache.get(b"k").unwrap().won()); // a plain read takes no token
    /// assert!(cache.get_with_options(b"k", claim).unwrap().won());
    /// assert!(!cache.get_with_options(b"k", claim).unwrap().won()); // exactly one read wins
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn won(&self) -> bool {
        self.state.won
    }
    /// Whether another read holds the item's recache token (memcached's `Z`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::{Builder, ReadOptions};
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 0, Duration::ZERO)?;
    /// cache.invalidate(b"k", None, None, None)?;
    /// let claim = ReadOptions { claim_token: true, ..ReadOptions::default() };
    /// assert!(!cache.get_with_options(b"k", claim).unwrap().token_sent());
    /// assert!(cache.get_with_options(b"k", claim).unwrap().token_sent());
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn token_sent(&self) -> bool {
        self.state.token_sent
    }
    /// Copies the item out.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::OwnedItem;
    ///
    /// let mut cache = segcache_core::Builder::new().heap_size(4 << 20).build()?;
    /// cache.set(b"k", b"v", 2, Duration::ZERO)?;
    /// let owned: OwnedItem = cache.get(b"k").unwrap().to_owned();
    /// cache.delete(b"k")?; // the copy outlives the item
    /// assert_eq!((owned.value, owned.flags), (b"v".to_vec(), 2));
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn to_owned(&self) -> OwnedItem {
        OwnedItem { value: self.value.to_vec(), flags: self.flags, cas: self.cas, ttl: self.ttl() }
    }
}

/// An item copied out of the cache.
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, OwnedItem};
///
/// let cache = Builder::new().heap_size(8 << 20).build_shared()?;
/// cache.set(b"k", b"v", 5, Duration::ZERO)?;
/// let OwnedItem { value, flags, cas, ttl } = cache.get(b"k").unwrap();
/// assert_eq!((value, flags, ttl), (b"v".to_vec(), 5, None));
/// assert!(cas > 0);
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedItem {
    /// The value.
    pub value: Vec<u8>,
    /// The client flags stored with it.
    pub flags: u32,
    /// Its CAS value: changes exactly when the item is modified.
    pub cas: u64,
    /// Time left to live; `None` when the item never expires.
    pub ttl: Option<Duration>,
}

impl OwnedItem {
    /// The item a loaded value becomes: stored when the cache takes it (its CAS value then), or
    /// handed back unstored (CAS value 0).
    pub(crate) fn loaded(value: Vec<u8>, ttl: Duration, stored: Option<u64>) -> OwnedItem {
        OwnedItem { value, flags: 0, cas: stored.unwrap_or(0), ttl: (!ttl.is_zero()).then_some(ttl) }
    }
}
