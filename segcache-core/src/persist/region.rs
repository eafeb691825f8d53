//! The mapped memory of a cache: one region for all shards, anonymous or backed by a file (the
//! file itself is opened, verified and closed in `file`, which also closes a region when it drops).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU8};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};
use crate::fork::Origin;
use crate::hashtable::bucket::Bucket;
use crate::layout::{Layout, HUGE_PAGE};
use crate::meta::ShardMeta;
use crate::persist::held::HeldFile;
use crate::persist::resident::Resident;
use crate::segments::header::SegHeader;
use crate::sync::lock::ReaderSlot;
use crate::sync::mapped::MappedLock;
use crate::ttl_buckets::bucket::TtlBucket;

/// A mapping and, when file-backed, the open file that makes it persistent.
pub(crate) struct Region {
    pub map: MmapRaw,
    pub layout: Layout,
    pub file: Option<PersistFile>,
    /// The process that mapped it: a `fork()` child leaves the file alone when it drops its copy.
    pub origin: Origin,
    /// The heap segments this process faulted in ahead of the writers.
    pub resident: Resident,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("layout", &self.layout)
            .field("file", &self.file.as_ref().map(|p| &p.path))
            .finish()
    }
}

/// The open, locked file behind a region.
#[derive(Debug)]
pub(crate) struct PersistFile {
    pub path: PathBuf,
    /// Held open for its lock (released when the region is dropped) and for `sync`.
    pub held: HeldFile,
    /// Set once the contents were accepted (verified, rebuilt or fresh): only then may a close
    /// vouch for them. A file rejected at open is left exactly as it was found.
    pub active: std::sync::atomic::AtomicBool,
    pub closed: bool,
    /// This process's membership, when processes share the file (`Builder::multi_process`).
    pub sharing: Option<crate::persist::share::Sharing>,
}

impl Region {
    /// Anonymous, zero-filled memory for `layout`.
    pub fn anonymous(layout: Layout) -> Result<Region> {
        let len = layout.total_len();
        let map = MmapOptions::new().len(len).map_anon().map_err(|source| Error::Map { bytes: len, source })?;
        let map = MmapRaw::from(map);
        advise_huge_pages(&map, &layout);
        Ok(Region { map, layout, file: None, origin: Origin::here(), resident: Resident::new(layout.heap_segments()) })
    }

    /// Faults in the memory that fills as the cache is used: each shard's primary buckets and
    /// the heap (`Builder::prefault`). Not the overflow pools, which chains reach only as far as
    /// they grow. Called before any engine uses the region.
    pub fn prefault(&self) {
        let l = &self.layout;
        let primary = l.geometry.primary_buckets() * std::mem::size_of::<Bucket>();
        let heap = l.heap_start(0);
        let ranges = (0..l.shards).map(|i| (l.table_start(i), primary)).chain([(heap, l.total_len() - heap)]);
        for (start, len) in ranges {
            if !self.populate(start, len) {
                self.touch(start, len);
            }
        }
        self.resident.insert_all();
    }

    /// Faults segment `id` of shard `shard`'s heap in, unless this process did before: with the
    /// kernel's populate only (never by hand, as writers may be filling the segment meanwhile;
    /// populating reads and writes no byte of it). Whether it faulted the segment in now.
    pub fn fault_in(&self, shard: usize, id: u32) -> bool {
        let g = self.layout.geometry;
        let segment = shard * g.segments + id as usize;
        if self.resident.contains(segment) {
            return false;
        }
        if !self.populate(self.layout.heap_start(shard) + id as usize * g.segment_size, g.segment_size) {
            self.resident.refuse();
            return false;
        }
        self.resident.insert(segment)
    }

    /// Asks the kernel to fault `len` bytes from `start` in (writable for anonymous memory, as a
    /// read for a file, whose pages a write fault would mark dirty); whether it did.
    fn populate(&self, start: usize, len: usize) -> bool {
        #[cfg(target_os = "linux")]
        {
            let advice =
                if self.file.is_some() { memmap2::Advice::PopulateRead } else { memmap2::Advice::PopulateWrite };
            self.map.advise_range(advice, start, len).is_ok()
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (start, len);
            false
        }
    }

    /// `populate` by hand, a byte per page: anonymous memory is written (a read would map the
    /// shared zero page), a file's only read.
    fn touch(&self, start: usize, len: usize) {
        for off in (start..start + len).step_by(4096) {
            // SAFETY: `off` lies inside the mapping (the ranges of `prefault` are parts of the
            // layout). Anonymous memory is this process's fresh mapping, which no engine uses
            // yet: it still holds the zeroes it was mapped with, so writing a zero changes
            // nothing. A file's byte is only read (processes sharing the file may be writing
            // it: the value is discarded).
            unsafe {
                let p = self.base().add(off);
                match self.file {
                    Some(_) => drop(std::ptr::read_volatile(p)),
                    None => std::ptr::write_volatile(p, 0),
                }
            }
        }
    }

    pub fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Pointers into shard `i`'s parts.
    pub fn shard(self: &Arc<Self>, i: usize) -> ShardMem {
        let g = self.layout.geometry;
        let meta = self.layout.meta_start(i);
        // SAFETY: every offset is inside the mapping (`Layout::total_len` covers them), aligned
        // for its type (page-aligned shard starts; offsets rounded to 64 bytes or more).
        unsafe {
            let base = self.base();
            ShardMem {
                region: Arc::clone(self),
                meta: base.add(meta) as *mut ShardMeta,
                ttl: base.add(meta + g.ttl_offset()) as *mut TtlBucket,
                segs: base.add(meta + g.segs_offset()) as *mut SegHeader,
                buckets: base.add(self.layout.table_start(i)) as *const Bucket,
                summary: base.add(self.layout.summary_start(i)) as *const AtomicU8,
                ghost: base.add(self.layout.ghost_start(i)) as *const AtomicU32,
                lock: base.add(self.layout.lock_start(i)) as *mut MappedLock,
                slots: base.add(self.layout.slots_start(i)) as *const ReaderSlot,
                heap: base.add(self.layout.heap_start(i)),
                index: i,
            }
        }
    }
}

pub(crate) fn advise_huge_pages(map: &MmapRaw, layout: &Layout) {
    // A random get pays a TLB miss on top of the DRAM miss with 4 KiB pages; huge pages remove
    // most of it. Advisory: failure (no THP support) changes nothing but speed.
    #[cfg(target_os = "linux")]
    {
        let _ = map.advise(memmap2::Advice::HugePage);
        // Except the file header and shard metadata before the tables: a few pages that would
        // otherwise make a whole huge page resident (2 MiB, 0.7 bytes an item at 256 MiB). The
        // segment headers there are few and hot, so their 4 KiB pages stay in the TLB.
        let _ = map.advise_range(memmap2::Advice::NoHugePage, 0, layout.table_start(0));
        // Except the overflow pools when they fill whole huge pages of their own: each is
        // touched only as far as its chains have grown, and a huge page would make 2 MiB
        // resident for the first bucket a shard takes (megabytes per cache when there are many
        // shards). Chains reach them on few lookups. Smaller pools share huge pages with the
        // primary buckets beside them, and cost at most their own size.
        let g = layout.geometry;
        let primary = g.primary_buckets() * std::mem::size_of::<Bucket>();
        if primary >= HUGE_PAGE {
            for i in 0..layout.shards {
                let _ = map.advise_range(
                    memmap2::Advice::NoHugePage,
                    layout.table_start(i) + primary,
                    g.table_len() - primary,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (map, layout);
}

/// Raw pointers to one shard's parts of a region, which it keeps alive.
#[derive(Debug)]
pub(crate) struct ShardMem {
    pub region: Arc<Region>,
    pub meta: *mut ShardMeta,
    pub ttl: *mut TtlBucket,
    pub segs: *mut SegHeader,
    pub buckets: *const Bucket,
    /// The tag summary, one byte per primary bucket.
    pub summary: *const AtomicU8,
    /// The S3-FIFO ghost, `Geometry::ghost_entries` fingerprints.
    pub ghost: *const AtomicU32,
    /// The shard's lock and reader slots for processes that share the cache.
    pub lock: *mut MappedLock,
    pub slots: *const ReaderSlot,
    pub heap: *mut u8,
    /// The shard's index in the region.
    pub index: usize,
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::Region;
    use crate::layout::{Geometry, Layout};

    /// Pages of `len` bytes from `start` in the region that are resident, by `mincore`.
    fn resident(r: &Region, start: usize, len: usize) -> usize {
        let mut vec = vec![0u8; len.div_ceil(4096)];
        // SAFETY: the range lies inside the mapping, which is page-aligned (and `start` is a
        // multiple of 2 MiB); `vec` has a byte per page of it.
        let rc = unsafe { libc::mincore(r.base().add(start).cast(), len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    /// `prefault` makes the heap and the primary buckets resident, every page of them, and
    /// leaves them zero; the `touch` fallback does the same.
    #[test]
    fn prefault_makes_the_heap_and_buckets_resident() {
        let layout = Layout { geometry: Geometry { hash_power: 10, segment_size: 1 << 20, segments: 8 }, shards: 2 };
        let (heap, heap_len) = (layout.heap_start(0), layout.total_len() - layout.heap_start(0));
        let primary = layout.geometry.primary_buckets() * 64;
        for by_hand in [false, true] {
            let r = Region::anonymous(layout).unwrap();
            assert_eq!(resident(&r, heap, heap_len), 0, "a fresh heap is not resident");
            match by_hand {
                false => r.prefault(),
                true => {
                    r.touch(heap, heap_len);
                    (0..2).for_each(|i| r.touch(layout.table_start(i), primary));
                }
            }
            assert_eq!(resident(&r, heap, heap_len), heap_len / 4096, "by hand: {by_hand}");
            for i in 0..2 {
                assert_eq!(resident(&r, layout.table_start(i), primary), primary / 4096, "shard {i}");
            }
            // SAFETY: the whole mapping is readable and no engine uses it.
            let bytes = unsafe { std::slice::from_raw_parts(r.base(), layout.total_len()) };
            assert!(bytes.iter().all(|&b| b == 0), "contents unchanged");
        }
    }
}
