//! The tier's writer: one thread per tier file that writes the flash segment images evictions
//! hand it, so that an eviction never waits for the device. Its queue is bounded in bytes: an
//! eviction reserves a segment's room before it fills an image, and one that finds the queue
//! full drops its items instead of waiting (`Writer::reserve`). Until an image is written, reads
//! of its entries are served from it in memory (`TierFile::read_entry`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::tier::image::Image;
use crate::tier::meta::RECORD_LEN;

/// Where a queued image stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Queued,
    Written,
    Failed,
}

/// An image on its way to the file: at byte `at`, then its segment's record (where it goes, and
/// its bytes), with the room it reserved.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) image: Image,
    pub(crate) generation: u64,
    at: u64,
    record: (u64, [u8; RECORD_LEN]),
    reserved: usize,
    state: Mutex<State>,
    done: Condvar,
}

impl Job {
    pub(crate) fn state(&self) -> State {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self, state: State) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
        self.done.notify_all();
    }

    /// Waits until the writer is done with it.
    pub(crate) fn wait(&self) -> State {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while *state == State::Queued {
            state = self.done.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        *state
    }
}

/// What the thread and the evictions share.
#[derive(Debug)]
struct Shared {
    /// Bytes reserved by images being filled or queued.
    queued: AtomicUsize,
    limit: usize,
    /// Held by a test to stall the device.
    #[cfg(test)]
    gate: Mutex<()>,
    /// Set by a test to fail every write, as a failing device does.
    #[cfg(test)]
    failing: std::sync::atomic::AtomicBool,
}

/// The writer of one tier file, shared by its shards.
#[derive(Debug)]
pub(crate) struct Writer {
    shared: Arc<Shared>,
    sender: Mutex<Option<Sender<Arc<Job>>>>,
    thread: Option<JoinHandle<()>>,
    /// The process that started the thread: a child of a fork has no such thread to wait for.
    pid: u32,
}

impl Writer {
    /// A writer of `file` whose queue holds at most `limit` bytes (at least one image always
    /// fits). With a `limit` of 0, or where no thread can be started, images are written as they
    /// are handed over, by the eviction itself.
    pub(crate) fn spawn(file: Arc<File>, limit: usize) -> Writer {
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            limit,
            #[cfg(test)]
            gate: Mutex::new(()),
            #[cfg(test)]
            failing: std::sync::atomic::AtomicBool::new(false),
        });
        let (sender, receiver) = mpsc::channel();
        // No queue: the evictions write their images themselves.
        let thread = (limit > 0).then(|| {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new().name("segcache-tier".into()).spawn(move || run(&file, &shared, receiver)).ok()
        });
        let thread = thread.flatten();
        let sender = Mutex::new(thread.as_ref().map(|_| sender));
        Writer { shared, sender, thread, pid: std::process::id() }
    }

    /// Whether the queue has no room for an image of `bytes` (the device is behind), so that
    /// none should be started. An empty queue always has room. Images being filled hold none:
    /// each shard fills at most one at a time, so the queue holds at most its limit plus one
    /// image per shard.
    pub(crate) fn behind(&self, bytes: usize) -> bool {
        let now = self.shared.queued.load(Acquire);
        now > 0 && now + bytes > self.shared.limit
    }

    /// Whether images are written as they are handed over, by the eviction itself: the queue's
    /// limit is 0, or no thread could be started.
    pub(crate) fn inline(&self) -> bool {
        self.thread.is_none()
    }

    /// Queues `image` (generation `generation`, taking `reserved` bytes of the queue until it is
    /// written) to be written at byte `at` of `file`, then `record` (at its offset) once the
    /// image is there. Without a thread (or after a fork, or once it is gone) both are written
    /// here.
    pub(crate) fn submit(
        &self,
        file: &File,
        image: Image,
        generation: u64,
        at: u64,
        record: (u64, [u8; RECORD_LEN]),
        reserved: usize,
    ) -> Arc<Job> {
        self.shared.queued.fetch_add(reserved, AcqRel);
        let state = Mutex::new(State::Queued);
        let job = Arc::new(Job { image, generation, at, record, reserved, state, done: Condvar::new() });
        let sent = std::process::id() == self.pid
            && self
                .sender
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .is_some_and(|s| s.send(Arc::clone(&job)).is_ok());
        if !sent {
            write(file, &job, &self.shared);
        }
        job
    }

    /// Makes every write fail from now on, as a failing device does.
    #[cfg(test)]
    pub(crate) fn fail_writes(&self) {
        self.shared.failing.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether `fail_writes` was called.
    #[cfg(test)]
    pub(crate) fn failing(&self) -> bool {
        self.shared.failing.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stalls the device while the guard lives.
    #[cfg(test)]
    pub(crate) fn stall(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Writer {
    /// Writes what is queued before the file is closed, so a graceful stop leaves every image
    /// on the file.
    fn drop(&mut self) {
        self.sender.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(thread) = self.thread.take() {
            if std::process::id() == self.pid {
                let _ = thread.join();
            }
        }
    }
}

fn run(file: &File, shared: &Shared, jobs: Receiver<Arc<Job>>) {
    for job in jobs {
        write(file, &job, shared);
    }
}

fn write(file: &File, job: &Job, shared: &Shared) {
    #[cfg(test)]
    let _stalled = shared.gate.lock().unwrap_or_else(PoisonError::into_inner);
    #[cfg(test)]
    let failing = shared.failing.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(test))]
    let failing = false;
    let from = job.image.written();
    let ok = !failing && file.write_all_at(&job.image.bytes()[from..], job.at + from as u64).is_ok();
    // The record says the segment is in use only once its image is there. Should its write fail,
    // the record still says free (or in use up to the part an eviction without a queue wrote
    // earlier), and a reopen drops the slots past it: nothing else is lost.
    if ok {
        let _ = file.write_all_at(&job.record.1, job.record.0);
    }
    shared.queued.fetch_sub(job.reserved, AcqRel);
    job.finish(if ok { State::Written } else { State::Failed });
}
