//! The thread that faults the engine's heap in ahead of the workers
//! (`SharedCache::touch_ahead`), so that no request waits while the kernel clears a segment's
//! memory for its first write (4.6-7 ms per 2 MiB segment on a virtual machine whose host backs
//! memory on first touch). It ends once the heap has been gone through once, or with `-L`,
//! whose heap is in from the start.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::state::Shared;

/// Free segments per shard kept faulted in ahead of the writers: the next new segment, and the
/// one after it for writers that take two before the thread's next turn (a merge can). Memory
/// grows at most this many segments per shard ahead of what the items need.
const SEGMENTS_AHEAD: usize = 2;

/// How long the thread sleeps when nothing was left to fault in: a 2 MiB segment fills in this
/// time only at 200 MiB/s of new items per shard.
const IDLE: Duration = Duration::from_millis(10);

/// Faults in the first segments before the server listens, so that neither the first writes
/// nor a measure of the memory at start race the thread; then starts the thread for the rest,
/// unless there is nothing left to do or `[engine] touch_ahead = false` (`-o no_touch_ahead`).
pub fn spawn(shared: Arc<Shared>) -> io::Result<Option<JoinHandle<()>>> {
    if !shared.settings.touch_ahead || shared.cache.touch_ahead(SEGMENTS_AHEAD).is_none() {
        return Ok(None);
    }
    let thread = std::thread::Builder::new().name("touch-ahead".into()).spawn(move || {
        run_when_idle();
        while !shared.is_stopping() {
            match shared.cache.touch_ahead(SEGMENTS_AHEAD) {
                None => return,
                Some(0) => std::thread::sleep(IDLE),
                Some(_) => {}
            }
        }
    })?;
    Ok(Some(thread))
}

/// Lets the calling thread run only on a core that nothing else wants (`SCHED_IDLE`): a worker
/// woken while this thread faults memory in takes its core back at once. If the workers keep
/// every core busy, the thread waits and the workers fault segments in themselves, as without
/// it. Advisory: where the policy is refused, the thread runs at the normal priority.
fn run_when_idle() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 names the calling thread; `param` is a valid sched_param for SCHED_IDLE,
        // whose priority must be 0.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    }
}
