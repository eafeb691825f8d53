//! Compaction: copying the frequently read live items of source segments into destinations.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::engine::Segcache;
use crate::error::Result;
use crate::eviction::policy::Policy;
use crate::hashtable::bucket::Bucket;
use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table::{Found, Table};
use crate::listener::RemovalCause;
use crate::prefetch::prefetch;
use crate::record::{self, CasForm};
use crate::segments::header::{SegHeader, NONE, POOL_MAIN, POOL_SMALL, SEG_SEALED, SEG_SPARE};
use crate::tier::entry::EntryMeta;

thread_local! {
    /// Live items of the segments being merged. One buffer per thread, not per engine: it grows
    /// to a few segments' worth of entries (about 1.6 MiB for 4 segments of 1 MiB holding 85-byte
    /// items), and a shared cache has many engines (its shards) but few threads writing at once.
    static MOVES: std::cell::Cell<Vec<Move>> = const { std::cell::Cell::new(Vec::new()) };
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Move {
    /// The slot the first pass found: the second pass checks it still holds `loc`.
    pub(crate) slot: &'static AtomicU64,
    pub(crate) loc: Loc,
    pub(crate) hash: u64,
    pub(crate) freq: u8,
    pub(crate) len: u32,
}

/// Items ahead in a merge's moves whose buckets are prefetched.
pub(crate) const MOVE_AHEAD: usize = 8;

/// The CAS base of a merge's new destination that takes the records of `bases[0]`'s source
/// (which it may be, drained in place) and then those of the older sources after it, whose
/// bases are `bases[1..]`; `span`: how far above its base the first source's narrow counters
/// reach. As far below the first source's base as the oldest source's base, so that the older
/// sources' records stay narrow too (neighbours of a chain usually lie within 2^16 counters),
/// but no further than keeps every narrow counter of the first source narrow: a record drained
/// in place must not grow (see `move_record`).
pub(crate) fn dest_base(bases: &[u32], span: u32) -> u32 {
    let first = bases[0];
    // How far below the first base the others lie; a base above it (which wraps) counts as 0.
    let below = bases.iter().map(|&b| first.wrapping_sub(b)).filter(|&d| d < 1 << 31).max().unwrap_or(0);
    first.wrapping_sub(below.min(u32::from(u16::MAX).saturating_sub(span)))
}

impl Segcache {
    /// Copies the live items of `sources` (neighbours in one TTL chain) that are worth keeping
    /// into at most half as many new destination segments, which take the sources' place in the
    /// chain, in `pool`; the rest are evicted and the sources freed.
    ///
    /// `cont` is a sealed segment right before the sources in the chain, with room left (the last
    /// destination of the previous merge of a sweep): it is filled first, so that consecutive
    /// merges pack their destinations full instead of leaving each one's last partly empty.
    ///
    /// What is kept: every live item when they fit (so dead space is compacted away without
    /// losing anything), else the most frequently read ones down to a cut-off (and, of the
    /// items at the cut-off, the newest that still fit), and never items read fewer than
    /// `min_freq` times. Kept items have their counters halved. Items leaving S3-FIFO's small
    /// pool unread are remembered in the ghost. With a flash tier, the items not kept go there
    /// (`demote_item`) rather than out of the cache.
    ///
    /// Destinations need no extra memory. With a file, the first new one is the spare segment
    /// and the next ones are sources already emptied. Crash safety: a destination is linked into
    /// the chain before a source is reused, and a reused source is re-initialised as a spare
    /// first, so a crash leaves every kept item in a linked segment (possibly twice, with the
    /// same value). Without a file nothing has to survive a crash, so no spare is kept (one
    /// segment less idle per shard): the source being drained is compacted in place, each kept
    /// record moving to an offset no higher than its own, so nothing not yet read is overwritten.
    pub(crate) fn compact(&mut self, sources: &[u32], min_freq: u8, pool: u8, cont: Option<u32>) -> Result<()> {
        let mut spare = self.meta().spare;
        let in_place = !self.durable;
        if (spare == NONE && !in_place) || sources.is_empty() {
            return self.evict_by(Policy::Fifo);
        }
        // Newest source first: among items read equally often, the newer ones are kept (they have
        // had less time to prove themselves); and drained sources become destinations.
        let order: Vec<u32> = sources.iter().rev().copied().collect();
        // Read before a source becomes a destination (and takes `pool`).
        let from_small: Vec<bool> = order.iter().map(|&s| self.seg(s).pool == POOL_SMALL).collect();
        // Likewise their creation times, from which their records' access bytes count, and their
        // CAS bases, from which their narrow CAS counters count.
        let created: Vec<u32> = order.iter().map(|&s| self.seg(s).create_at).collect();
        let bases: Vec<u32> = order.iter().map(|&s| self.seg(s).cas_base).collect();
        // And what a flash entry of each source's records carries, for the items given up.
        let entry_meta: Vec<EntryMeta> = order
            .iter()
            .map(|&s| {
                let seg = self.seg(s);
                EntryMeta { cas_base: seg.cas_base, create_at: seg.create_at, expire_at: seg.expire_at }
            })
            .collect();
        // How far above its base each source's narrow counters reach (see `dest_base`).
        let mut spans = vec![0u32; order.len()];
        // Gather live items and their frequencies.
        let mut moves = MOVES.take();
        moves.clear();
        let t = self.table();
        let mut hist = [0u64; 256];
        for (i, &src) in order.iter().enumerate() {
            let span = &mut spans[i];
            self.for_each_live(src, |s, loc, h, len| {
                *span = (*span).max(s.narrow_delta(loc));
                if let Some(f) = t.find_loc(h, loc) {
                    let freq = slot::slot_freq(f.value);
                    hist[freq as usize] += u64::from(len);
                    moves.push(Move { slot: f.slot, loc, hash: h, freq, len });
                }
            });
        }
        // At most half the sources' space is newly used: each merge frees at least half its
        // sources.
        let max_dests = sources.len().div_ceil(2);
        let room = cont.map_or(0, |c| self.geo.segment_size - self.seg(c).write_offset as usize);
        let budget = (room + max_dests * self.geo.segment_size) as u64;
        let mut cutoff = 256usize;
        let mut kept = 0u64;
        while cutoff > usize::from(min_freq) && kept + hist[cutoff - 1] <= budget {
            cutoff -= 1;
            kept += hist[cutoff];
        }
        // Bytes left for the items one step below the cut-off, newest first. Less a record's
        // length per destination: items do not pack destinations to the last byte, and the
        // items above the cut-off (which may come later) must still find room.
        let longest = moves.iter().map(|m| u64::from(m.len)).max().unwrap_or(0);
        let mut partial = budget.saturating_sub(kept + (max_dests as u64 + 1) * longest);
        let first = sources[0];
        let (b, expire_at, create_at) = {
            let s = self.seg(first);
            (s.ttl_bucket as usize, s.expire_at, s.create_at)
        };
        // Destinations go where the first source was: before the first non-source after it.
        let mut before = self.seg(first).next;
        while before != NONE && sources.contains(&before) {
            before = self.seg(before).next;
        }
        // Every live item of the sources leaves the counts now; kept ones come back as written.
        let (mut items, mut bytes) = (0u64, 0u64);
        for &src in sources {
            items += u64::from(self.seg(src).live_items);
            bytes += u64::from(self.seg(src).live_bytes);
        }
        let m = self.meta_mut();
        m.items = m.items.saturating_sub(items);
        m.bytes = m.bytes.saturating_sub(bytes);

        // A new destination's CAS base (see `dest_base`).
        let base = |current: usize| dest_base(&bases[current..], spans[current]);
        let header = |cas_base: u32| SegHeader {
            cas_base,
            create_at,
            expire_at,
            ttl_bucket: b as u16,
            state: SEG_SPARE,
            pool,
            ..SegHeader::EMPTY
        };
        let mut reused = 0usize; // order[..reused] became destinations
                                 // The destination being filled; `cont` is already in the chain, new ones are not yet.
        let mut dest = match cont {
            Some(c) => c,
            None => self.next_dest(&mut spare, &order, &mut reused, header(base(0))),
        };
        let mut new_dests = usize::from(cont.is_none()); // spare and reused sources taken
        let (mut copied, mut dropped, mut unfetched) = (0u64, 0u64, 0u64);
        let mut ghosts = Vec::new();
        let mut current = 0usize; // index in `order` of the segment being drained
        for (i, m) in moves.iter().enumerate() {
            // The buckets were read in the first pass, a few segments' worth of lines ago.
            if let Some(ahead) = moves.get(i + MOVE_AHEAD) {
                prefetch(t.head(ahead.hash) as *const Bucket as *const u8);
            }
            if let Some(ahead) = moves.get(i + MOVE_AHEAD / 2) {
                t.prefetch_chain(ahead.hash);
            }
            while order[current] != m.loc.seg {
                current += 1;
            }
            // The first pass's slot, unless a removal since moved the entry within its chain.
            let v = m.slot.load(Relaxed);
            let slot = if v != 0 && slot::slot_loc(v) == m.loc {
                Found { slot: m.slot, value: v }
            } else {
                let Some(slot) = t.find_loc(m.hash, m.loc) else { continue };
                slot
            };
            let mut keep = m.freq >= min_freq
                && (usize::from(m.freq) >= cutoff
                    || (usize::from(m.freq) + 1 == cutoff && partial >= u64::from(m.len) && {
                        partial -= u64::from(m.len);
                        true
                    }));
            // The copy's length: its CAS may be held narrow in one destination and wide in another.
            let len_in = |s: &Self, dest: u32| s.moved_len(m.loc, bases[current], s.seg(dest).cas_base);
            let mut len = if keep { len_in(self, dest) } else { 0 };
            if keep && self.seg(dest).write_offset as usize + len > self.geo.segment_size {
                let free = spare != NONE || reused < current || (in_place && reused == current);
                if new_dests < max_dests && free {
                    // Seal this destination into the chain, then drain into the next.
                    if Some(dest) != cont {
                        self.seal_dest(dest, b, before);
                    }
                    dest = self.next_dest(&mut spare, &order, &mut reused, header(base(current)));
                    new_dests += 1;
                    len = len_in(self, dest);
                } else {
                    keep = false;
                }
            }
            if keep {
                debug_assert!(self.seg(dest).write_offset as usize + len <= self.geo.segment_size);
                let new = self.segments().move_record(m.loc, bases[current], created[current], dest);
                Table::relocate(slot.slot, slot.value, m.freq / 2, new);
                copied += 1;
            } else if self.tier.is_some() && self.demote_item(m.hash, m.loc, m.len as usize, entry_meta[current]) {
                if from_small[current] && pool == POOL_MAIN {
                    ghosts.push(m.hash);
                }
            } else {
                // A demotion that did not take the item may have reclaimed a flash segment,
                // which moves slots within their chains.
                let slot = match self.tier.is_some() {
                    true => match t.find_loc(m.hash, m.loc) {
                        Some(slot) => slot,
                        None => continue,
                    },
                    false => slot,
                };
                if self.large.chunks != 0 && self.is_chunk_at(m.loc) {
                    self.large.chunks -= 1;
                }
                // (Its segment may be a destination already, with another base.)
                if self.replaced_by_write(m.hash) {
                    if self.hears_replacements() {
                        self.tell_removal_based(m.loc, slot.value, RemovalCause::Replaced, bases[current]);
                    }
                } else {
                    self.tell_removal_based(m.loc, slot.value, RemovalCause::Evicted, bases[current]);
                    dropped += 1;
                    unfetched += u64::from(slot.value & slot::FETCHED == 0);
                }
                self.remove_slot(m.hash, slot.slot);
                if from_small[current] && pool == POOL_MAIN {
                    ghosts.push(m.hash);
                }
            }
        }
        MOVES.set(moves);
        if self.tier.is_some() {
            self.finish_demotion();
        }
        for h in ghosts {
            self.ghost.remember(h);
        }
        // The last new destination joins the chain if anything went into it; otherwise it is
        // spare again.
        let mut leftover = Vec::new();
        if Some(dest) != cont {
            if self.seg(dest).write_offset > 0 {
                self.seal_dest(dest, b, before);
            } else {
                leftover.push(dest);
                new_dests -= 1;
            }
        }
        for &src in &order[reused..] {
            let (mut segments, mut buckets) = self.segments_and_ttl();
            buckets.unlink(&mut segments, src);
            leftover.push(src);
        }
        // One freed segment becomes the next spare (if the spare was used and the shard keeps
        // one), the rest go to the free list.
        let need_spare = self.meta().spare == NONE && self.wants_spare();
        for (i, id) in leftover.into_iter().enumerate() {
            if i == 0 && need_spare {
                *self.seg_mut(id) = SegHeader { state: SEG_SPARE, ..SegHeader::EMPTY };
                self.meta_mut().spare = id;
            } else {
                self.segments().push_free(id);
            }
        }
        let m = self.meta_mut();
        m.evicted_items += dropped;
        m.evicted_unfetched += unfetched;
        m.merged_items += copied;
        m.evicted_segments += (sources.len() - new_dests.min(sources.len())) as u64;
        Ok(())
    }

    /// How far above its segment's CAS base the counter of the record at `loc` lies if it is
    /// narrow; 0 if not.
    pub(crate) fn narrow_delta(&self, loc: Loc) -> u32 {
        let src = &self.seg_bytes(loc.seg)[loc.offset as usize..];
        match record::header(src) {
            Some(h) if h.form() == CasForm::Narrow => h.stamp(src, 0).cas,
            _ => 0,
        }
    }

    /// The next new destination of a merge (see `compact`), initialised as `header` (with the next
    /// sequence number) and out of its chain: the spare while it is unused, else the first source
    /// not yet reused (drained, or being drained when compacting in place).
    pub(crate) fn next_dest(&mut self, spare: &mut u32, order: &[u32], reused: &mut usize, header: SegHeader) -> u32 {
        let next = if *spare != NONE {
            self.meta_mut().spare = NONE;
            std::mem::replace(spare, NONE)
        } else {
            let next = order[*reused];
            *reused += 1;
            let (mut segments, mut buckets) = self.segments_and_ttl();
            buckets.unlink(&mut segments, next);
            next
        };
        let seq = self.segments().next_seq();
        *self.seg_mut(next) = SegHeader { seq, ..header };
        next
    }

    /// Links a filled merge destination into chain `b` before `before`, as sealed.
    pub(crate) fn seal_dest(&mut self, dest: u32, b: usize, before: u32) {
        self.seg_mut(dest).state = SEG_SEALED;
        let (mut segments, mut buckets) = self.segments_and_ttl();
        buckets.link_before(&mut segments, b, dest, before);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::dest_base;
    use crate::builder::Builder;
    use crate::clock::ManualClock;
    use crate::engine::write::Mode;
    use crate::engine::Segcache;
    use crate::eviction::policy::Policy;
    use crate::hash::hash;
    use crate::hashtable::slot::Loc;
    use crate::listener::RemovalListener;
    use crate::record::CasForm;
    use crate::segments::header::POOL_MAIN;

    fn key(i: usize) -> Vec<u8> {
        format!("key-{i:06}").into_bytes()
    }

    /// An engine holding keys 0..1000 (200-byte values, about 300 to a segment) and their CAS
    /// values, and the first two segments of their chain (sealed neighbours, older first).
    fn filled() -> (Segcache, HashMap<usize, u64>, [u32; 2]) {
        let mut c = Builder::new()
            .heap_size(1 << 20)
            .segment_size(64 << 10)
            .eviction(Policy::Merge)
            .clock(ManualClock::new(1_700_000_000))
            .build()
            .unwrap();
        let cas = (0..1000)
            .map(|i| (i, c.store_hashed(&key(i), hash(&key(i)), &[b'v'; 200], 0, Duration::ZERO, Mode::Set).unwrap()));
        let cas: HashMap<usize, u64> = cas.collect();
        let a = c.record_location(&key(0)).unwrap().0;
        let b = c.seg(a).next;
        assert!(c.record_location(&key(999)).unwrap().0 != b, "both sealed");
        (c, cas, [a, b])
    }

    fn form_of(c: &Segcache, key: &[u8]) -> CasForm {
        let (seg, offset) = c.record_location(key).unwrap();
        c.record(Loc { seg, offset }).unwrap().form()
    }

    /// A merge of two neighbours drains the newer in place first, then copies the older's
    /// records after them: the destination's base lies low enough for both to stay narrow.
    #[test]
    fn a_merge_keeps_both_neighbours_counters_narrow() {
        let (mut c, cas, [a, b]) = filled();
        // Half of each dies, so that the merge keeps every other item.
        let in_ab: Vec<usize> =
            (0..1000).filter(|&i| [a, b].contains(&c.record_location(&key(i)).unwrap().0)).collect();
        for &i in in_ab.iter().filter(|&&i| i % 2 == 0) {
            c.delete(&key(i)).unwrap();
        }
        c.compact(&[a, b], 0, POOL_MAIN, None).unwrap();
        let kept: Vec<usize> = in_ab.iter().copied().filter(|&i| i % 2 == 1).collect();
        assert!(kept.iter().any(|&i| c.record_location(&key(i)).unwrap().0 == b), "merged into the newer");
        for &i in &kept {
            let item = c.get(&key(i)).unwrap();
            assert_eq!((item.cas(), item.value()), (cas[&i], &[b'v'; 200][..]), "key {i}");
            assert_eq!(form_of(&c, &key(i)), CasForm::Narrow, "key {i}");
        }
        assert_eq!(c.stats().merged_items, kept.len() as u64);
    }

    /// The items a merge drops from a segment it drains in place reach the listener with their
    /// own CAS values, although the segment's header (and CAS base) is the destination's by then.
    #[test]
    fn items_a_merge_drops_reach_the_listener_with_their_cas() {
        let (mut c, cas, [a, b]) = filled();
        let told = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&told);
        c.set_eviction_listener(Some(RemovalListener::new(move |item, _| {
            log.lock().unwrap().push((item.key().to_vec(), item.cas()));
        })));
        c.compact(&[a, b], 0, POOL_MAIN, None).unwrap();
        let told = told.lock().unwrap();
        assert!(told.len() > 100, "{} dropped", told.len());
        let by_key: HashMap<Vec<u8>, usize> = (0..1000).map(|i| (key(i), i)).collect();
        for (k, v) in told.iter() {
            assert_eq!(*v, cas[&by_key[k]], "{}", String::from_utf8_lossy(k));
        }
    }

    /// A dropped item's slot leaves its chain and the chain's last entry moves into the hole,
    /// so a merge over long chains (a small table) must find again the slots that moved since
    /// its first pass: every item is then kept whole or dropped whole, and no slot is left
    /// pointing into a drained source.
    #[test]
    fn a_merge_over_long_chains_keeps_or_drops_every_item_whole() {
        // Few items past the two sources, so that the chains' last entries are mostly theirs.
        const N: usize = 600;
        let mut c = Builder::new()
            .heap_size(1 << 20)
            .segment_size(64 << 10)
            .hash_power(6)
            .eviction(Policy::Merge)
            .clock(ManualClock::new(1_700_000_000))
            .build()
            .unwrap();
        let mut cas = HashMap::new();
        for i in 0..N {
            let value = [b'a' + (i % 26) as u8; 200];
            cas.insert(i, c.store_hashed(&key(i), hash(&key(i)), &value, 0, Duration::ZERO, Mode::Set).unwrap());
        }
        let a = c.record_location(&key(0)).unwrap().0;
        let b = c.seg(a).next;
        let in_ab: Vec<usize> = (0..N).filter(|&i| [a, b].contains(&c.record_location(&key(i)).unwrap().0)).collect();
        // One item in three is read: the merge keeps those and drops the rest.
        for &i in in_ab.iter().filter(|&&i| i % 3 == 0) {
            assert!(c.get(&key(i)).is_some());
        }
        c.compact(&[a, b], 0, POOL_MAIN, None).unwrap();
        let mut present = 0u64;
        for i in 0..N {
            if let Some(item) = c.get(&key(i)) {
                assert_eq!((item.cas(), item.value()), (cas[&i], &[b'a' + (i % 26) as u8; 200][..]), "key {i}");
                present += 1;
            } else {
                assert!(in_ab.contains(&i) && i % 3 != 0, "key {i} lost");
            }
        }
        assert!(present < N as u64, "the merge dropped nothing");
        assert_eq!(c.stats().items, present, "every slot left leads to its item");
    }

    #[test]
    fn a_destinations_base_reaches_down_to_the_oldest_source_within_the_first_ones_slack() {
        assert_eq!(dest_base(&[1000], 500), 1000);
        assert_eq!(dest_base(&[1000, 700, 400], 500), 400, "down to the oldest");
        assert_eq!(dest_base(&[100_000, 10_000], 30_000), 100_000 - 35_535, "no further than the slack");
        assert_eq!(dest_base(&[100_000, 10_000], 65_535), 100_000, "no slack");
        assert_eq!(dest_base(&[1000, 2000], 500), 1000, "a newer base does not count");
        assert_eq!(dest_base(&[5, u32::MAX - 4], 0), u32::MAX - 4, "across the counter's wrap");
    }
}
