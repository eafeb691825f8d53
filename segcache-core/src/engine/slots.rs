//! Slot upkeep: room in a key's chain, and killing records (their slot and the segment's live
//! counts).

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::Segcache;
use crate::error::{Error, Result};
use crate::eviction::policy::Policy;
use crate::hashtable::slot::{self, Loc};
use crate::listener::RemovalCause;
use crate::record::{self};

impl Segcache {
    /// The chain is full and the overflow pool is spent: drop its least used item, unless
    /// eviction is off.
    pub(crate) fn make_room_in_chain(&mut self, h: u64) -> Result<&'static std::sync::atomic::AtomicU64> {
        if self.policy == Policy::None {
            return Err(Error::NoMemory);
        }
        let victim = self.table().least_used(h).ok_or(Error::NoMemory)?;
        if !self.flash_victim(slot::slot_loc(victim.value)) {
            self.tell_removal(slot::slot_loc(victim.value), victim.value, RemovalCause::Evicted);
            self.kill(slot::slot_loc(victim.value));
        }
        let m = self.meta_mut();
        m.evicted_items += 1;
        m.evicted_unfetched += u64::from(victim.value & slot::FETCHED == 0);
        victim.slot.store(0, Relaxed);
        Ok(victim.slot)
    }

    /// Empties a slot, keeping its chain compact (see `Table::remove`).
    pub(crate) fn remove_slot(&mut self, h: u64, slot: &std::sync::atomic::AtomicU64) {
        let mut pool = self.meta().overflow;
        self.table().remove(h, slot, &mut pool);
        self.meta_mut().overflow = pool;
    }

    pub(crate) fn kill_at(&mut self, loc: Loc) {
        self.kill(loc)
    }

    /// Sets the record's dead bit without touching counts (it was never counted live).
    pub(crate) fn mark_dead_only(&mut self, loc: Loc) {
        let off = loc.offset as usize + record::FLAGS_BYTE;
        self.seg_space(loc.seg)[off] |= record::DEAD;
    }

    /// Counts a record as live in its segment and the shard.
    pub(crate) fn count_live(&mut self, seg: u32, len: u32) {
        let s = self.seg_mut(seg);
        s.live_items += 1;
        s.live_bytes += len;
        let m = self.meta_mut();
        m.items += 1;
        m.bytes += u64::from(len);
    }

    /// Marks the record at `loc` dead and takes it out of the live counts.
    pub(crate) fn kill(&mut self, loc: Loc) {
        let live_len = self.record(loc).and_then(|r| r.live_len());
        self.kill_parsed(loc, live_len);
    }

    /// `kill` for a caller that has just parsed the record at `loc`: `live_len` is its
    /// `Record::live_len` (`None`: already dead, nothing to do).
    #[inline]
    pub(crate) fn kill_parsed(&mut self, loc: Loc, live_len: Option<u32>) {
        let Some(len) = live_len else { return };
        // A cache without live chunks tests one word here, the rest out of line.
        if self.large.chunks != 0 {
            self.uncount_chunk(loc);
        }
        let off = loc.offset as usize + record::FLAGS_BYTE;
        self.seg_space(loc.seg)[off] |= record::DEAD;
        let s = self.seg_mut(loc.seg);
        s.live_items = s.live_items.saturating_sub(1);
        s.live_bytes = s.live_bytes.saturating_sub(len);
        let m = self.meta_mut();
        m.items = m.items.saturating_sub(1);
        m.bytes = m.bytes.saturating_sub(u64::from(len));
    }

    /// One live chunk fewer, if the record at `loc` is a large item's chunk.
    #[cold]
    #[inline(never)]
    fn uncount_chunk(&mut self, loc: Loc) {
        if self.is_chunk_at(loc) {
            self.large.chunks -= 1;
        }
    }
}
