//! What a read returns: a borrowed view of an item, and an owned copy.

use std::time::Duration;

/// A borrowed view of a stored item. From [`crate::Segcache`] no copy is made: it borrows the
/// cache, so writes wait until it is dropped. Through [`crate::SharedCache::get_with`] it borrows
/// either the reader's own copy (items up to 512 bytes) or, under the shard's read lock, the cache.
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
    /// Unix seconds of the last store or fetch (refreshed at most every `ACCESS_REFRESH`).
    pub(crate) last_access: u32,
}

impl<'a> Item<'a> {
    /// The item's key.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }
    /// The item's value.
    pub fn value(&self) -> &'a [u8] {
        self.value
    }
    /// The 32-bit client flags given at `set` (0 if none).
    pub fn flags(&self) -> u32 {
        self.flags
    }
    /// The CAS value to pass to `cas`.
    pub fn cas(&self) -> u64 {
        self.cas
    }
    /// Time left to live; `None` when the item never expires.
    pub fn ttl(&self) -> Option<Duration> {
        (self.expire_at != 0).then(|| Duration::from_secs(u64::from(self.expire_at.saturating_sub(self.now))))
    }
    /// Absolute expiry time in Unix seconds; `None` when the item never expires.
    pub fn expire_at(&self) -> Option<u32> {
        (self.expire_at != 0).then_some(self.expire_at)
    }
    /// Whether the item was read before this read since it was stored (memcached's `h`).
    pub fn fetched(&self) -> bool {
        self.state.fetched
    }
    /// Time since the item was last stored or read, before this read (memcached's `l`): in whole
    /// seconds, refreshed at most once a minute as memcached does, and rounded (down) to within
    /// an eighth of the time since its segment was opened.
    pub fn last_access(&self) -> Duration {
        Duration::from_secs(u64::from(self.now.saturating_sub(self.state.last_access)))
    }
    /// Whether the item was marked stale ([`crate::Segcache::invalidate`], memcached's `X`).
    pub fn is_stale(&self) -> bool {
        self.state.stale
    }
    /// Whether this read won the item's recache token (memcached's `W`): it was stale, or
    /// its TTL left was below the read's [`crate::ReadOptions::recache_below`], and no read had the token.
    /// Only reads that ask for it ([`crate::ReadOptions::claim_token`]) take a token.
    pub fn won(&self) -> bool {
        self.state.won
    }
    /// Whether another read holds the item's recache token (memcached's `Z`).
    pub fn token_sent(&self) -> bool {
        self.state.token_sent
    }
    /// Copies the item out.
    pub fn to_owned(&self) -> OwnedItem {
        OwnedItem { value: self.value.to_vec(), flags: self.flags, cas: self.cas, ttl: self.ttl() }
    }
}

/// An item copied out of the cache.
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
