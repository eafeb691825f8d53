//! Faulting the heap in ahead of the writers.
//!
//! The first write to a segment that was never used faults its memory in: with the heap on huge
//! pages, 2 MiB at once, which the kernel clears before the write goes on. On a virtual machine
//! whose host backs guest memory on first touch, that stopped a writer for 4.6-7 ms per 2 MiB
//! segment (`stalls`, docs/benchmarks.md), and a server's requests queued behind it. Faulting
//! the whole heap in at build (`Builder::prefault`) avoids it at the price of the heap's memory
//! from the start; [`SharedCache::touch_ahead`](crate::SharedCache::touch_ahead) faults in only
//! the segments that the writers will take next, so the memory still grows as items come.
//! `Builder::touch_ahead` runs it on a thread of the cache's own ([`Toucher`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::engine::Segcache;
use crate::persist::region::Region;
use crate::sync::lock::ShardLock;

/// Which shards a turn of touching ahead serves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shards {
    All,
    /// Those holding items: the ones writers use. A fresh cache then faults nothing in until it
    /// is written, and a small heap of many shards (a few MiB a shard) does not become resident
    /// at once for a few keys.
    Written,
}

/// `SharedCache::touch_ahead` over the parts of a cache that stay in place while it moves.
pub(crate) fn touch_ahead_in(
    shards: &[ShardLock<Segcache>],
    region: &Region,
    per_shard: usize,
    which: Shards,
) -> Option<usize> {
    if region.resident.done() {
        return None;
    }
    let mut faulted = 0;
    for (i, shard) in shards.iter().enumerate() {
        let next = {
            let engine = shard.read();
            if which == Shards::Written && engine.is_empty() {
                continue;
            }
            engine.next_free(per_shard)
        };
        faulted += next.into_iter().filter(|&id| region.fault_in(i, id)).count();
    }
    (!region.resident.done() || faulted > 0).then_some(faulted)
}

/// Free segments per written shard that the thread keeps faulted in ahead of the writers: the
/// next new segment, and the one after it for writers that take two before the thread's next
/// turn (a merge can). Memory grows at most this many segments per shard ahead of what the
/// items need.
const SEGMENTS_AHEAD: usize = 2;

/// The thread's first sleep after a turn that found nothing to fault in: a 1 MiB segment fills
/// in about 5 ms at the rate of a Python loop of `set`s.
const FIRST_IDLE: Duration = Duration::from_millis(1);

/// Its longest sleep, reached by doubling while the writers take no new segment, so that an
/// idle cache costs it ten wake-ups a second.
const LONGEST_IDLE: Duration = Duration::from_millis(100);

/// What the thread reads: the shards' locks and the region, which stay where they are while
/// the `SharedCache` that owns them moves (a boxed slice, an `Arc`'s allocation). Pointers, not
/// reference counts: a `fork()` child copies the counts but not the thread, and would then never
/// see its region's last reference go (which is how a closing cache knows it may seal the file).
struct Parts {
    shards: *const [ShardLock<Segcache>],
    region: *const Region,
}
// SAFETY: both pointees are `Sync` (as `SharedCache` is), and outlive the thread: the cache stops
// and joins it before they drop (see `Toucher::stop`).
unsafe impl Send for Parts {}

/// The thread that `Builder::touch_ahead` starts with a cache, and the flag that stops it.
#[derive(Debug)]
pub(crate) struct Toucher {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    /// The process that started the thread: a `fork()` child has the handle but not the thread.
    /// Not the cache's `Origin`, which a child sharing the cache adopts once it joins.
    opener: i32,
}

impl Toucher {
    /// Starts the thread, unless there is nothing to do (the heap prefaulted, or a kernel that
    /// cannot populate memory). Shards that already hold items (a file reopened warm) have
    /// their next segments faulted in first, so that their first writes do not race the thread.
    /// The cache must call [`Toucher::stop`] before `shards` or `region` drop.
    pub(crate) fn spawn(shards: &[ShardLock<Segcache>], region: &Region) -> Option<Toucher> {
        touch_ahead_in(shards, region, SEGMENTS_AHEAD, Shards::Written)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let parts = Parts { shards, region };
        let thread = std::thread::Builder::new()
            .name("segcache-ahead".into())
            .spawn(move || {
                let parts = parts;
                // SAFETY: see `Parts`: they outlive this thread.
                let (shards, region) = unsafe { (&*parts.shards, &*parts.region) };
                run(shards, region, &flag)
            })
            .ok()?;
        Some(Toucher { stop, thread, opener: crate::persist::share::pid() })
    }

    /// Whether the thread still runs (it ends by itself once there is nothing left to do).
    #[cfg(test)]
    pub(crate) fn running(&self) -> bool {
        !self.thread.is_finished()
    }

    /// Stops the thread and waits for it (one segment's fault-in at most). In a `fork()` child,
    /// where the thread does not exist, it only lets the handle go.
    pub(crate) fn stop(self) {
        if self.opener != crate::persist::share::pid() {
            std::mem::forget(self.thread);
            return;
        }
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

fn run(shards: &[ShardLock<Segcache>], region: &Region, stop: &AtomicBool) {
    run_when_idle();
    let mut idle = FIRST_IDLE;
    while !stop.load(Ordering::Relaxed) {
        match touch_ahead_in(shards, region, SEGMENTS_AHEAD, Shards::Written) {
            None => return,
            Some(0) => {
                std::thread::park_timeout(idle);
                idle = (idle * 2).min(LONGEST_IDLE);
            }
            Some(_) => idle = FIRST_IDLE,
        }
    }
}

/// Lets the calling thread run only on a core that nothing else wants (`SCHED_IDLE`): a thread
/// of the program woken while this one faults memory in takes the core back at once, and where
/// every core is busy the writers fault their segments in themselves, as without the thread.
/// Advisory: where the policy is refused, the thread runs at the normal priority.
fn run_when_idle() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param for SCHED_IDLE,
        // whose priority must be 0.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::time::Duration;

    use crate::builder::Builder;

    use crate::shared::handle::SharedCache;

    const SEGMENT: usize = 2 << 20;

    /// Two shards of 16 segments of 2 MiB (a huge page each, so that residency is per segment).
    fn cache() -> SharedCache {
        Builder::new().heap_size(64 << 20).segment_size(SEGMENT).shards(2).build_shared().unwrap()
    }

    /// Pages of segment `id` of shard `shard` that are resident, by `mincore`.
    fn resident_pages(c: &SharedCache, shard: usize, id: u32) -> usize {
        let start = c.region().layout.heap_start(shard) + id as usize * SEGMENT;
        let mut vec = vec![0u8; SEGMENT / 4096];
        // SAFETY: the segment lies inside the mapping and starts on a page; `vec` has a byte per
        // page of it.
        let rc = unsafe { libc::mincore(c.region().base().add(start).cast(), SEGMENT, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    fn next_free(c: &SharedCache, shard: usize, n: usize) -> Vec<u32> {
        c.shard_at(shard).read().next_free(n)
    }

    /// Whether this kernel populates anonymous memory on request (Linux 5.14 and later).
    fn kernel_populates() -> bool {
        let map = memmap2::MmapOptions::new().len(4096).map_anon().unwrap();
        map.advise(memmap2::Advice::PopulateWrite).is_ok()
    }

    /// `touch_ahead` faults in exactly the next free segments of each shard, once, leaving them
    /// zero, and follows the writers as they take segments.
    #[test]
    fn faults_in_the_segments_the_writers_take_next() {
        let c = cache();
        if !kernel_populates() {
            assert_eq!(c.touch_ahead(2), None, "nothing to do without the kernel's populate");
            return;
        }
        let ahead: Vec<Vec<u32>> = (0..2).map(|s| next_free(&c, s, 3)).collect();
        for (s, ids) in ahead.iter().enumerate() {
            assert!(ids.iter().all(|&id| resident_pages(&c, s, id) == 0), "a fresh heap is not resident");
        }
        assert_eq!(c.touch_ahead(2), Some(4));
        for (s, ids) in ahead.iter().enumerate() {
            assert_eq!(resident_pages(&c, s, ids[0]), SEGMENT / 4096, "shard {s}: the next free segment");
            assert_eq!(resident_pages(&c, s, ids[1]), SEGMENT / 4096, "shard {s}: the one after");
            assert_eq!(resident_pages(&c, s, ids[2]), 0, "shard {s}: no further than asked");
        }
        assert_eq!(c.touch_ahead(2), Some(0), "each segment once");
        for (s, ids) in ahead.iter().enumerate() {
            for &id in &ids[..2] {
                let start = c.region().layout.heap_start(s) + id as usize * SEGMENT;
                // SAFETY: the segment lies in the mapping; nothing writes it (no item was stored yet).
                let bytes = unsafe { std::slice::from_raw_parts(c.region().base().add(start), SEGMENT) };
                assert!(bytes.iter().all(|&b| b == 0), "faulting in wrote nothing");
            }
        }

        // Items fill the first segment of each shard and take the second: the toucher then
        // faults in the third.
        let mut i = 0;
        while next_free(&c, 0, 1) != ahead[0][1..2] || next_free(&c, 1, 1) != ahead[1][1..2] {
            c.set(format!("key{i}").as_bytes(), &[1; 1000], 0, Duration::ZERO).unwrap();
            i += 1;
        }
        while next_free(&c, 0, 1) == ahead[0][1..2] || next_free(&c, 1, 1) == ahead[1][1..2] {
            c.set(format!("key{i}").as_bytes(), &[1; 1000], 0, Duration::ZERO).unwrap();
            i += 1;
        }
        assert!(c.touch_ahead(2).unwrap() >= 1);
        assert_eq!(resident_pages(&c, 0, ahead[0][2]), SEGMENT / 4096);
    }

    /// The value the tests store under key `i`: 300 bytes that differ from key to key.
    fn value(i: u64) -> Vec<u8> {
        (0..300).map(|j| (i.wrapping_mul(31) + j) as u8).collect()
    }

    /// Asserts that every key of `0..n` still in `c` holds its own value, and that more than
    /// 50,000 are there.
    fn values_intact(c: &SharedCache, n: u64) {
        let mut found = 0;
        for i in 0..n {
            if let Some(item) = c.get(&i.to_le_bytes()) {
                assert_eq!(item.value, value(i), "item {i}");
                found += 1;
            }
        }
        assert!(found > 50_000, "{found} items kept");
    }

    /// Polls `done` for up to ten seconds.
    fn eventually(done: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// `Builder::touch_ahead`: the cache's own thread faults nothing in before a shard is
    /// written, then keeps the next two free segments of each written shard in as the writers
    /// take segments, and ends once they have taken every segment. A file-backed cache with it
    /// closes clean (the thread holds no reference that would keep the file from being sealed)
    /// and reopens warm with every value intact; dropping caches while their threads fault
    /// memory in stops each thread first.
    #[test]
    fn the_caches_own_thread_follows_the_writers_and_ends() {
        let path = std::env::temp_dir().join(format!("segcache-test-{}-own-toucher", std::process::id()));
        let builder = |file: bool| {
            let b = Builder::new().heap_size(64 << 20).segment_size(SEGMENT).shards(2).touch_ahead(true);
            if file {
                b.path(&path)
            } else {
                b
            }
        };
        for file in [false, true] {
            let _ = std::fs::remove_file(&path);
            let c = builder(file).build_shared().unwrap();
            if !kernel_populates() {
                assert!(!c.touch_ahead_running(), "no thread where the kernel cannot populate memory");
                return;
            }
            assert!(c.touch_ahead_running());
            std::thread::sleep(Duration::from_millis(20));
            for s in 0..2 {
                for id in next_free(&c, s, 2) {
                    assert_eq!(resident_pages(&c, s, id), 0, "shard {s}, segment {id}: not in before a write");
                }
            }
            // About 12 MB: each shard's writers take three segments or so; the thread faults in
            // the next two of each.
            for i in 0..40_000u64 {
                c.set(&i.to_le_bytes(), &value(i), 0, Duration::ZERO).unwrap();
            }
            let ahead_of_writers =
                || (0..2).all(|s| next_free(&c, s, 2).iter().all(|&id| resident_pages(&c, s, id) == SEGMENT / 4096));
            assert!(eventually(ahead_of_writers), "the thread follows the writers (file: {file})");
            assert!(c.touch_ahead_running());
            // Twice the heap: the writers take every segment, and the thread ends.
            for i in 40_000..440_000u64 {
                c.set(&i.to_le_bytes(), &value(i), 0, Duration::ZERO).unwrap();
            }
            assert!(eventually(|| !c.touch_ahead_running()), "the thread ends by itself (file: {file})");
            let last = 439_999u64;
            assert_eq!(c.get(&last.to_le_bytes()).unwrap().value, value(last));
            if file {
                c.close().unwrap();
                let header = crate::persist::header::Header::decode(&std::fs::read(&path).unwrap()).unwrap();
                assert_eq!(header.clean, 1, "closed clean");
                let reopened = builder(true).build_shared().unwrap();
                assert_eq!(reopened.get(&last.to_le_bytes()).unwrap().value, value(last));
                values_intact(&reopened, 440_000);
            }
        }
        let _ = std::fs::remove_file(&path);
        for _ in 0..20 {
            let c = builder(false).build_shared().unwrap();
            for i in 0..5_000u64 {
                c.set(&i.to_le_bytes(), &value(i), 0, Duration::ZERO).unwrap();
            }
            drop(c);
        }
    }

    /// A cache prefaulted at build has nothing to fault in ahead.
    #[test]
    fn nothing_to_do_after_a_prefault() {
        let c =
            Builder::new().heap_size(8 << 20).segment_size(SEGMENT).shards(2).prefault(true).build_shared().unwrap();
        assert_eq!(c.touch_ahead(2), None);
    }

    /// Faulting in while writers fill the very segments being faulted in loses no byte: every
    /// item read back afterwards holds its own value, in anonymous memory and in a file (read
    /// back again after a reopen). The toucher ends once the writers have taken every segment.
    #[test]
    fn writers_beside_the_toucher_lose_nothing() {
        let path = std::env::temp_dir().join(format!("segcache-test-{}-touch-ahead", std::process::id()));
        let _ = std::fs::remove_file(&path);
        for file in [false, true] {
            let mut b = Builder::new().heap_size(64 << 20).segment_size(SEGMENT).shards(2);
            if file {
                b = b.path(&path);
            }
            let c = b.build_shared().unwrap();
            let writing = AtomicBool::new(true);
            let faulted = std::thread::scope(|s| {
                let toucher = s.spawn(|| {
                    let mut faulted = 0;
                    while let Some(n) = c.touch_ahead(2) {
                        faulted += n;
                        if n == 0 && !writing.load(Relaxed) {
                            break;
                        }
                    }
                    faulted
                });
                // About twice the heap: every segment is taken at least once.
                for i in 0..400_000u64 {
                    c.set(&i.to_le_bytes(), &value(i), 0, Duration::ZERO).unwrap();
                }
                writing.store(false, Relaxed);
                toucher.join().unwrap()
            });
            values_intact(&c, 400_000);
            if kernel_populates() {
                assert!(faulted > 0, "the toucher ran ahead of the writers (file: {file})");
            }
            assert_eq!(c.touch_ahead(2), None, "every segment was taken (file: {file})");
            if file {
                c.close().unwrap();
                let reopened = Builder::new().heap_size(64 << 20).segment_size(SEGMENT).shards(2).path(&path);
                values_intact(&reopened.build_shared().unwrap(), 400_000);
            }
        }
        let _ = std::fs::remove_file(&path);
    }
}
