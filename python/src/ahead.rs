//! The background thread behind `Cache(touch_ahead=True)`: it faults the heap in a few segments
//! ahead of the writers (`SharedCache::touch_ahead`), so that no `set` waits while the kernel
//! provides a new segment's pages. A Python thread cannot do it as well: it would take the GIL
//! from the writers between calls.
//!
//! The thread reads the engine through a pointer, not a reference count: the `Cache` that owns
//! the engine stops and joins it before the engine moves or drops. A reference count would
//! outlive the thread in a `fork()` child (which copies the count but not the thread) and keep a
//! child sharing the cache from ever closing it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use segcache_core::SharedCache;

/// Free segments per shard kept faulted in ahead of the writers, as the server does.
const SEGMENTS_AHEAD: usize = 2;

/// The first sleep after a turn that found nothing to fault in: a 1 MiB segment fills in about
/// 5 ms at the rate of a Python loop of `set`s.
const FIRST_IDLE: Duration = Duration::from_millis(1);

/// The longest sleep, reached by doubling while the cache takes no new segment, so that an idle
/// cache costs ten wake-ups a second.
const LONGEST_IDLE: Duration = Duration::from_millis(100);

/// The engine, as the thread sees it.
struct EnginePtr(*const SharedCache);
// SAFETY: `SharedCache` is `Sync`, and the pointee outlives the thread: `Toucher::stop` joins
// it, and the owner calls `stop` before the engine moves or drops (see `Toucher::spawn`).
unsafe impl Send for EnginePtr {}

/// The running thread and the flag that stops it.
pub struct Toucher {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    /// The process that started the thread: a `fork()` child has the handle but not the thread.
    opener: u32,
}

impl Toucher {
    /// Starts the thread, unless there is nothing to do (the heap prefaulted, every segment
    /// used, or a kernel that cannot populate memory). The first segments are faulted in here,
    /// so that the first writes do not race the thread for them.
    ///
    /// The caller must call [`Toucher::stop`] before `engine` moves or drops; keeping it in a
    /// `Box` lets the box itself move meanwhile.
    pub fn spawn(engine: &SharedCache) -> Option<Toucher> {
        engine.touch_ahead(SEGMENTS_AHEAD)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let ptr = EnginePtr(engine);
        let thread = std::thread::Builder::new()
            .name("segcache-ahead".into())
            .spawn(move || {
                let ptr = ptr;
                // SAFETY: see `EnginePtr`: the engine outlives this thread.
                let engine = unsafe { &*ptr.0 };
                run(engine, &flag)
            })
            .ok()?;
        Some(Toucher { stop, thread, opener: std::process::id() })
    }

    /// Stops the thread and waits for it (one fault-in at most). In a `fork()` child, where the
    /// thread does not exist, it only lets the handle go.
    pub fn stop(self) {
        if self.opener != std::process::id() {
            std::mem::forget(self.thread);
            return;
        }
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

fn run(engine: &SharedCache, stop: &AtomicBool) {
    run_when_idle();
    let mut idle = FIRST_IDLE;
    while !stop.load(Ordering::Relaxed) {
        match engine.touch_ahead(SEGMENTS_AHEAD) {
            None => return,
            Some(0) => {
                std::thread::park_timeout(idle);
                idle = (idle * 2).min(LONGEST_IDLE);
            }
            Some(_) => idle = FIRST_IDLE,
        }
    }
}

/// Lets the thread run only on a core that nothing else wants (`SCHED_IDLE`): a thread of the
/// program woken meanwhile takes the core back at once, and where every core is busy the
/// writers fault their segments in themselves, as without the thread. Advisory.
fn run_when_idle() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param for SCHED_IDLE,
        // whose priority must be 0.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    }
}
