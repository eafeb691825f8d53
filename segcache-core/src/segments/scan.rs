//! Walking a segment's records: the live ones, a batch at a time.

use crate::hash::hash;
use crate::hashtable::bucket::Bucket;
use crate::hashtable::slot::Loc;
use crate::hashtable::table::Table;
use crate::prefetch::prefetch;
use crate::record;
use crate::segments::Segments;

/// Records parsed per batch of `Segments::live_batch`.
pub(crate) const BATCH: usize = 16;

/// Bytes ahead of the parse that are prefetched: a batch of typical records.
const AHEAD: usize = 1024;

/// A live record found by a scan: its location, its key's hash and its length.
pub(crate) type Live = (Loc, u64, u32);

impl Segments<'_> {
    /// Fills `batch` with the next records of segment `id` (parsed with CAS base `base`, the
    /// segment's when the scan began) from byte `*off` on that are not
    /// marked dead, in order, and moves `*off` past them; returns how many it found (fewer than
    /// `BATCH` at the segment's end). Segments scanned whole (eviction, expiry, recovery) are
    /// mostly old and out of cache, and a scan that waited on each record's line, then on its
    /// bucket, was bound by memory latency. So the segment's lines are prefetched ahead of the
    /// parse, and each record's head bucket in `table` as it is found; the chains' overflow
    /// buckets are prefetched once the batch is whole.
    pub(crate) fn live_batch(
        &self,
        id: u32,
        base: u32,
        off: &mut usize,
        table: &Table<'_>,
        batch: &mut [Live; BATCH],
    ) -> usize {
        let data = self.data(id);
        let mut n = 0;
        while n < BATCH {
            prefetch(data.as_ptr().wrapping_add(*off + AHEAD));
            let Some(r) = data.get(*off..).and_then(|src| record::parse(src, base)) else { break };
            if !r.dead {
                let h = hash(r.key);
                prefetch(table.head(h) as *const Bucket as *const u8);
                batch[n] = (Loc { seg: id, offset: *off as u32 }, h, r.len as u32);
                n += 1;
            }
            *off += r.len;
        }
        // The heads have been fetched meanwhile: fetch the chains' overflow buckets together
        // too (a quarter of the chains have one in a full table; removing an item walks to its
        // chain's tail).
        for &(_, h, _) in &batch[..n] {
            table.prefetch_chain(h);
        }
        n
    }
}
