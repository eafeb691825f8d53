//! A whole-shard consistency check, for soaks and tests: every item slot leads to a live record
//! of a key of its chain, in a segment in use, and each segment's live count is the number of
//! slots that lead into it; then the segments' and the TTL chains' own invariants
//! (`Segments::check`, `TtlBuckets::check`). A slot that leads to a dead record is an item the next reuse of its
//! segment loses without a trace (scans of live records skip it), so this is what a soak checks.

use crate::engine::Segcache;
use crate::hash::hash;
use crate::hashtable::slot;
use crate::record;
use crate::segments::header::{SEG_OPEN, SEG_SEALED};
use crate::segments::Segments;
use crate::ttl_buckets::TtlBuckets;

impl Segcache {
    /// Checks the shard's hash table against its segments (see the module); the first
    /// inconsistency found, described. Walks the whole table: for tests and soaks only.
    #[doc(hidden)]
    pub fn verify(&self) -> Result<(), String> {
        let t = self.table();
        let mut slots_in = vec![0u32; self.geo.segments];
        let (mut items, mut chunks) = (0u64, 0u64);
        let mut bad = None;
        let ids = self.tier.as_deref().map(|t| t.ids);
        let mut flash_slots = vec![0u32; self.tier.as_deref().map_or(0, |t| t.file.segments() as usize)];
        for chain in 0..=t.mask() {
            // A chain's index serves as its hash: `head` only uses the masked bits.
            t.scan(chain, |_, v| {
                let loc = slot::slot_loc(v);
                // A flash slot's item is not in the heap: only its segment's count is checked.
                if let Some(i) = ids.and_then(|ids| ids.flash_index(loc.seg)) {
                    flash_slots[i as usize] += 1;
                    return false;
                }
                let why = if loc.seg as usize >= self.geo.segments {
                    Some("a segment out of range".to_string())
                } else if !matches!(self.seg(loc.seg).state, SEG_OPEN | SEG_SEALED) {
                    Some(format!("segment {} in state {}", loc.seg, self.seg(loc.seg).state))
                } else {
                    let data = self.seg_data(loc.seg);
                    let base = self.seg(loc.seg).cas_base;
                    match data.get(loc.offset as usize..).and_then(|src| record::parse(src, base)) {
                        None => Some(format!("no record at {loc:?}")),
                        Some(r) if r.dead => Some(format!("a dead record of key {:?}", String::from_utf8_lossy(r.key))),
                        Some(r)
                            if hash(r.key) & t.mask() != chain || slot::slot_tag(v) != slot::tag_of(hash(r.key)) =>
                        {
                            Some(format!("key {:?} of another chain", String::from_utf8_lossy(r.key)))
                        }
                        Some(_) => None,
                    }
                };
                if let Some(why) = why {
                    bad = Some(format!("chain {chain}: a slot ({loc:?}) leads to {why}"));
                    return true;
                }
                slots_in[loc.seg as usize] += 1;
                items += 1;
                chunks += u64::from(self.is_chunk_at(loc));
                false
            });
            if let Some(bad) = bad {
                return Err(bad);
            }
        }
        for id in 0..self.geo.segments as u32 {
            let s = self.seg(id);
            if matches!(s.state, SEG_OPEN | SEG_SEALED) && s.live_items != slots_in[id as usize] {
                return Err(format!(
                    "segment {id}: {} live records counted, {} slots lead into it",
                    s.live_items, slots_in[id as usize]
                ));
            }
        }
        if let Some(tier) = self.tier.as_deref() {
            for (i, &n) in flash_slots.iter().enumerate() {
                let live = match tier.image.as_ref().filter(|image| image.index() == i as u32) {
                    Some(image) => image.live(),
                    None => tier.ring.seg(i as u32).live,
                };
                if n != live {
                    return Err(format!("flash segment {i}: {live} live items counted, {n} slots lead into it"));
                }
            }
        }
        if self.meta().items != items {
            return Err(format!("{} items counted, {items} slots", self.meta().items));
        }
        // (A cache opened without `max_item_size` counts a file's chunks as items.)
        if self.large.max() > 0 && self.large.chunks != chunks {
            return Err(format!("{} chunks counted, {chunks} slots lead to chunks", self.large.chunks));
        }
        let headers = self.headers();
        Segments::check(headers, self.meta(), self.geo.segment_size).map_err(|e| e.to_string())?;
        TtlBuckets::check(self.ttl_buckets(), headers).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::engine::Segcache;

    /// A cache of several segments in use, in two TTL chains.
    fn filled() -> Segcache {
        let mut c = Segcache::builder().heap_size(1 << 20).segment_size(64 << 10).build().unwrap();
        for i in 0..1000 {
            let ttl = Duration::from_secs(if i % 2 == 0 { 0 } else { 3600 });
            c.set(format!("key-{i}").as_bytes(), &[b'v'; 200], 0, ttl).unwrap();
        }
        c
    }

    #[test]
    fn verify_checks_the_parts_invariants_too() {
        let mut c = filled();
        assert_eq!(c.verify(), Ok(()));
        let id = c.record_location(b"key-0").unwrap().0;
        let next = c.seg(id).next;
        c.seg_mut(id).next = crate::segments::header::NONE;
        let err = c.verify().unwrap_err();
        assert!(err.contains("TTL bucket") && err.contains("tail"), "{err}");
        c.seg_mut(id).next = next;
        c.meta_mut().free_count += 1;
        assert!(c.verify().unwrap_err().contains("the free list holds"));
    }
}
