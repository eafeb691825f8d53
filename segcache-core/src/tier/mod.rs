//! The flash tier: a file of fixed-size flash segments beside the heap, where the live items of a
//! segment that eviction frees go instead of being dropped. Their slots stay in the hash table and
//! name a flash location (`ids.rs`), so a flash item costs DRAM only for its slot.
//!
//! This part owns the file and what describes it: the segment-id space shared with the heap
//! (`ids.rs`), an entry's format and checksum (`entry.rs`), positioned writes of whole segment
//! images and positioned reads of one entry rounded to blocks (`file.rs`), the thread that writes
//! the images without an eviction waiting for it (`writer.rs`), the image an eviction
//! fills (`image.rs`), each flash segment's metadata and the FIFO ring they are written in
//! (`ring.rs`), the file's header and its records of that metadata (`meta.rs`), and the buffers
//! a `&self` read hands out (`crate::arena`). What changes the hash table with them stays in the
//! engine (`engine/demote.rs`, `engine/flash.rs`, `engine/warm.rs`).

pub(crate) mod entry;
pub(crate) mod file;
pub(crate) mod ids;
pub(crate) mod image;
pub(crate) mod meta;
pub(crate) mod ring;
pub(crate) mod wanted;
pub(crate) mod writer;

use std::sync::atomic::AtomicU64;

use crate::arena::Arena;
use crate::tier::file::TierFile;
use crate::tier::ids::Ids;
use crate::tier::image::Image;
use crate::tier::ring::Ring;
use crate::tier::wanted::Wanted;

/// One shard's part of the tier: its slice of the file, its flash segments' metadata, its
/// counters.
#[derive(Debug)]
pub(crate) struct Tier {
    pub(crate) file: TierFile,
    pub(crate) ids: Ids,
    pub(crate) ring: Ring,
    pub(crate) arena: Arena,
    pub(crate) counts: TierCounts,
    /// The image evictions are filling, if one has given up an item since the last was written
    /// (see `Segcache::finish_demotion` for when it is). Its segment's record says free until it
    /// is written, so a crash drops the slots that lead into it.
    pub(crate) image: Option<Image>,
    /// The hash of the key of the latest keyed write (0: none yet). Its items are not demoted:
    /// a write may evict while it runs, after it looked its key up, and an old version demoted
    /// then would live on beside the new one. Dropped instead, as without a tier, they leave the
    /// write what it already handles; the write replaces them, so they are not counted as
    /// evicted (a listener that hears replacements is told of one).
    pub(crate) writing: u64,
    /// The reads an item must have had (its slot's frequency counter, which a read on flash
    /// raises too) for a read on flash to bring it back to DRAM; 0: none does
    /// (`Builder::tier_promote_after`).
    pub(crate) promote_after: u8,
    /// What reads asked to bring back, for the next keyed write.
    pub(crate) wanted: Wanted,
}

/// The tier's counters. Reads count with `&self` (atomics), the rest under `&mut self`.
#[derive(Debug, Default)]
pub(crate) struct TierCounts {
    pub(crate) hits: AtomicU64,
    /// Bytes of the records that reads served.
    pub(crate) bytes_read: AtomicU64,
    pub(crate) bad_reads: AtomicU64,
    pub(crate) demoted: u64,
    /// Bytes of the images written (entries' heads and padding included).
    pub(crate) bytes_written: u64,
    /// Items eviction dropped instead of demoting: the writer's queue was full, or a write
    /// failed.
    pub(crate) demotions_dropped: u64,
    pub(crate) reclaimed: u64,
    /// Items that reads brought back from flash to DRAM.
    pub(crate) promoted: u64,
}

impl Tier {
    /// A tier over `file`, whose flash segments take the ids after the shard's `dram` segments
    /// and are described by `ring` (restored from the file's records, see `engine/warm.rs`).
    pub(crate) fn new(file: TierFile, dram: u32, ring: Ring) -> Tier {
        let ids = Ids::new(dram, file.segments());
        Tier {
            file,
            ids,
            ring,
            arena: Arena::default(),
            counts: TierCounts::default(),
            image: None,
            writing: 0,
            promote_after: 0,
            wanted: Wanted::default(),
        }
    }

    /// Writes flash segment `index`'s record as the ring holds it.
    pub(crate) fn save(&self, index: u32) -> std::io::Result<()> {
        self.file.write_record(index, self.ring.seg(index))
    }

    /// Flash items: those the ring's segments still count live, and the image being filled.
    pub(crate) fn items(&self) -> u64 {
        self.ring.live_items() + self.image.as_ref().map_or(0, |image| u64::from(image.live()))
    }
}
