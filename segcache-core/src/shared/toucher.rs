//! The thread that `Builder::touch_ahead` starts with a cache: it faults the heap in a few
//! segments ahead of the writers (as `SharedCache::touch_ahead` does once), so that no write
//! waits for a new segment's pages.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::persist::region::Region;
use crate::sync::lock::ShardLock;
use crate::Segcache;

/// Which shards a turn of touching ahead serves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shards {
    All,
    /// Those holding items: the ones writers use. A fresh cache then faults nothing in until it
    /// is written, and a small heap of many shards (Python's default 256 MiB in 16 shards on 2
    /// cores, in 128 on 16) does not become resident at once for a few keys.
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
