//! Moving a cache's items into a cache of other sizes: what reopening a file with another heap
//! size, segment size, shard count or hash power does (`Builder::resize_file`).

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::write::{Mode, NewState};
use crate::engine::{cas_token, Segcache};
use crate::error::Error;
use crate::hash::shard_of;
use crate::hashtable::slot::Loc;
use crate::segments::header::{SEG_OPEN, SEG_SEALED};

/// What a move kept and left behind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moved {
    pub(crate) items: u64,
    /// Items larger than the new segments hold.
    pub(crate) too_large: u64,
}

impl Segcache {
    /// The highest CAS value this shard has handed out.
    pub(crate) fn last_cas(&self) -> u64 {
        cas_token(self.cas_stride, self.cas_offset, self.meta().next_cas.load(Relaxed))
    }

    /// Starts `dest`'s CAS values above `last`, so that no CAS value a client holds from the old
    /// cache matches an item of this one.
    pub(crate) fn cas_above(&mut self, last: u64) {
        let next = u32::try_from(last / self.cas_stride + 1).unwrap_or(u32::MAX);
        let counter = &self.meta().next_cas;
        counter.store(counter.load(Relaxed).max(next), Relaxed);
    }

    /// Stores every live item of this engine into `dests`, the shards of another cache (by key
    /// hash, as `SharedCache` shards), oldest segment first: a smaller cache evicts the oldest
    /// and keeps the newest. Items keep their value, client flags and expiry; their CAS values
    /// are new (see `cas_above`), their read counts start over.
    pub(crate) fn move_items_into(&mut self, dests: &mut [Segcache]) -> crate::error::Result<Moved> {
        let mut ids: Vec<u32> =
            (0..self.geo.segments as u32).filter(|&id| matches!(self.seg(id).state, SEG_OPEN | SEG_SEALED)).collect();
        ids.sort_by_key(|&id| self.seg(id).seq);
        let mut moved = Moved::default();
        let mut live: Vec<(Loc, u64)> = Vec::new();
        for id in ids {
            live.clear();
            self.for_each_live(id, |_, loc, h, _| live.push((loc, h)));
            for &(loc, h) in &live {
                let Some(record) = self.record(loc) else { continue };
                // A read, so that what expired or was flushed stays behind; it finds this copy,
                // the key's only live one.
                let Some(item) = self.get(record.key) else { continue };
                let dest = &mut dests[shard_of(h, dests.len())];
                let now = dest.prepare_write();
                // The same expiry second, not the TTL left rounded down once more.
                let ttl = match item.expire_at() {
                    None => 0,
                    Some(at) if at <= now => continue,
                    Some(at) => at - now,
                };
                let keep = NewState { keep_expiry: true, ..NewState::default() };
                let stored =
                    dest.store_at(item.key(), h, &[item.value()], item.flags(), ttl, Mode::Set, now, keep, false);
                // A large item's value was assembled for the move: freed before the next.
                if self.large.holds() {
                    self.large.release();
                }
                match stored {
                    Ok(_) => moved.items += 1,
                    Err(Error::TooLarge { .. }) => moved.too_large += 1,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(moved)
    }
}
