//! `ShardLock`: the reader-writer lock of one shard, built so that a read writes nothing that
//! another core reads or writes.
//!
//! A plain reader-writer lock keeps its reader count in one word, so every read of a shard moves
//! that cache line to the reading core: two cores reading one shard pass it back and forth at the
//! cost of a cache miss each time. Here each thread counts itself in a reader slot of its own
//! (threads are numbered as they first read, modulo the slots), so a read only touches a line that
//! stays in the reader's cache, plus the writer flag, which readers only load. A writer raises
//! the flag, then waits until every slot is empty; a reader that sees the flag backs off.
//!
//! The trade-off is the writer's cost: it loads every slot (`slots` cache lines, a handful per
//! core), and the lines of recent readers come from their caches. Writes stay short (one append
//! and one slot update), and reads outnumber them in a cache.
//!
//! Waiting spins briefly, then yields the processor: critical sections are short. A reader
//! cannot take the lock again while it holds it if a writer is waiting (the writer waits for
//! it, and it waits for the writer); neither can a writer.
//!
//! Each slot also carries its reader's hit and miss counters, so counting a read writes only
//! that line.
//!
//! The protocol is checked with loom: `RUSTFLAGS="--cfg loom" cargo test -p segcache-core --lib lock`.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicUsize};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicUsize};
use crate::layout::ReadCounters;
#[cfg(loom)]
use std::sync::atomic::Ordering::AcqRel;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// One reader's slot, on cache lines of its own (128 bytes: adjacent-line prefetch pairs lines).
#[repr(align(128))]
#[derive(Debug)]
pub struct ReaderSlot {
    /// Read guards held through this slot.
    readers: AtomicUsize,
    /// Reads through this slot that found their key / did not.
    pub counters: ReadCounters,
}

impl ReaderSlot {
    fn new() -> Self {
        ReaderSlot { readers: AtomicUsize::new(0), counters: ReadCounters::default() }
    }
}

/// A reader-writer lock over `T` with one reader slot per thread (see the module docs).
#[repr(align(128))]
pub struct ShardLock<T> {
    writer: AtomicBool,
    slots: Box<[ReaderSlot]>,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out `&T` to readers only while no writer holds it, and `&mut T` to one
// writer only while no reader or other writer holds it (see `read` and `write`), so sharing the
// lock is sharing `T` the way `RwLock<T>` does.
unsafe impl<T: Send + Sync> Sync for ShardLock<T> {}
// SAFETY: the lock owns its `T`.
unsafe impl<T: Send> Send for ShardLock<T> {}

impl<T> std::fmt::Debug for ShardLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardLock").field("slots", &self.slots.len()).finish_non_exhaustive()
    }
}

/// Reader slots per lock: twice the cores, so that threads (numbered in the order they first
/// read) rarely share one, within a bound on what a writer has to scan.
pub fn default_slots() -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (2 * cores).next_power_of_two().min(64)
}

impl<T> ShardLock<T> {
    /// `slots` is rounded up to a power of two.
    pub fn new(value: T, slots: usize) -> Self {
        let n = slots.max(1).next_power_of_two();
        ShardLock { writer: AtomicBool::new(false), slots: (0..n).map(|_| ReaderSlot::new()).collect(), value: UnsafeCell::new(value) }
    }

    pub fn read(&self) -> ReadGuard<'_, T> {
        self.read_in(thread_index())
    }

    /// A read counted in slot `index` (modulo the slots).
    fn read_in(&self, index: usize) -> ReadGuard<'_, T> {
        let slot = &self.slots[index & (self.slots.len() - 1)];
        let mut spins = 0;
        loop {
            // Announce the reader, then look for a writer; a writer raises its flag, then looks
            // at every slot (`slot_readers`). All four steps are SeqCst, so they fall in one
            // total order and one of the two sees the other.
            slot.readers.fetch_add(1, SeqCst);
            if !self.writer.load(SeqCst) {
                return ReadGuard { lock: self, slot };
            }
            slot.readers.fetch_sub(1, Release);
            while self.writer.load(Relaxed) {
                relax(&mut spins);
            }
        }
    }

    pub fn write(&self) -> WriteGuard<'_, T> {
        let mut spins = 0;
        while self.writer.compare_exchange_weak(false, true, SeqCst, Relaxed).is_err() {
            relax(&mut spins);
        }
        for slot in self.slots.iter() {
            if slot_readers(slot) != 0 {
                while slot.readers.load(Acquire) != 0 {
                    relax(&mut spins);
                }
            }
        }
        WriteGuard { lock: self }
    }

    /// The value, without locking: `&mut self` proves no guard is alive.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Every reader slot, for summing their counters.
    pub fn slots(&self) -> &[ReaderSlot] {
        &self.slots
    }
}

pub struct ReadGuard<'a, T> {
    lock: &'a ShardLock<T>,
    slot: &'a ReaderSlot,
}

impl<T> ReadGuard<'_, T> {
    /// The reader slot this read counts in.
    pub fn slot(&self) -> &ReaderSlot {
        self.slot
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is counted in a slot that the writer waits on, and no writer held
        // the lock when it was counted, so no `&mut T` exists while it lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        self.slot.readers.fetch_sub(1, Release);
    }
}

pub struct WriteGuard<'a, T> {
    lock: &'a ShardLock<T>,
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the writer flag is ours and every reader slot was seen empty after raising it.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` keeps this the only reference made through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for WriteGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.writer.store(false, Release);
    }
}

/// The writer's look at a slot's reader count, after raising its flag.
///
/// A SeqCst load: with the reader's SeqCst increment and flag load and the writer's SeqCst
/// flag swap, the single total order of SeqCst operations makes one side see the other. It is
/// a plain load on x86, and a slot nobody reads stays shared in every writer's cache instead of
/// moving to each writer in turn. loom models SeqCst accesses as acquire/release only (its
/// documentation says so), which cannot show this, so the model checks the protocol with a
/// read-modify-write here instead, which is correct under acquire/release alone: it either
/// reads the reader's increment, or the increment reads from it and so sees the raised flag.
#[inline]
fn slot_readers(slot: &ReaderSlot) -> usize {
    #[cfg(not(loom))]
    return slot.readers.load(SeqCst);
    #[cfg(loom)]
    return slot.readers.fetch_add(0, AcqRel);
}

/// Waits one `pause`, then looks again: a lock is held for a few hundred nanoseconds, and one
/// `pause` takes up to ~140 cycles on recent x86 (an exponential back-off to 64 of them slept
/// microseconds past the release). After ~100 looks the holder is likely descheduled, so the
/// processor is yielded.
#[inline]
fn relax(spins: &mut u32) {
    #[cfg(loom)]
    {
        let _ = spins;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if *spins < 100 {
            std::hint::spin_loop();
            *spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

/// This thread's number, given in the order threads first take a read lock.
#[inline]
fn thread_index() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    std::thread_local!(static INDEX: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) });
    INDEX.with(|i| match i.get() {
        usize::MAX => {
            let n = NEXT.fetch_add(1, Relaxed);
            i.set(n);
            n
        }
        n => n,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn readers_share_and_writers_exclude() {
        let lock = Arc::new(ShardLock::new((0u64, 0u64), 4));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        if (i + t) % 4 == 0 {
                            let mut g = lock.write();
                            g.0 += 1;
                            std::hint::black_box(&mut *g);
                            g.1 += 1;
                        } else {
                            let g = lock.read();
                            assert_eq!(g.0, g.1, "a reader saw a write half done");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.read(), (20_000, 20_000));
    }

    #[test]
    fn reads_nest_without_a_writer_and_slots_count_readers() {
        let lock = ShardLock::new(7, 3);
        assert_eq!(lock.slots().len(), 4);
        let a = lock.read();
        let b = lock.read();
        assert_eq!(*a + *b, 14);
        let held: usize = lock.slots().iter().map(|s| s.readers.load(Relaxed)).sum();
        assert_eq!(held, 2);
        drop((a, b));
        *lock.write() += 1;
        assert_eq!(*lock.read(), 8);
    }

    #[test]
    fn a_writer_waits_for_a_reader_to_leave() {
        let lock = Arc::new(ShardLock::new(0, 2));
        let reader = lock.read();
        let writer = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || *lock.write() = 1)
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(*reader, 0, "the writer ran while a reader held the lock");
        drop(reader);
        writer.join().unwrap();
        assert_eq!(*lock.read(), 1);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell as Cell;
    use loom::sync::Arc;

    /// Two cells a writer changes together: a reader must never see them differ, and loom
    /// reports any access to them that the lock does not order.
    struct Pair(Cell<u32>, Cell<u32>);

    /// Explores every interleaving with up to `preemptions` forced thread switches.
    fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemptions);
        b.max_branches = 100_000;
        b.check(f);
    }

    fn model(f: impl Fn() + Sync + Send + 'static) {
        model_bounded(2, f)
    }

    fn read_pair(lock: &ShardLock<Pair>, index: usize) -> u32 {
        let g = lock.read_in(index);
        // SAFETY: the lock orders this access against the writer's; that is what loom checks.
        let (a, b) = (g.0.with(|p| unsafe { *p }), g.1.with(|p| unsafe { *p }));
        assert_eq!(a, b, "a reader saw a write half done");
        a
    }

    fn spawn_writer(lock: &Arc<ShardLock<Pair>>) -> loom::thread::JoinHandle<()> {
        let lock = Arc::clone(lock);
        loom::thread::spawn(move || {
            let g = lock.write();
            // SAFETY: as in `read_pair`.
            g.0.with_mut(|p| unsafe { *p += 1 });
            g.1.with_mut(|p| unsafe { *p += 1 });
        })
    }

    /// loom runs its threads on one OS thread, so the tests choose the reader slots themselves.
    #[test]
    fn readers_never_see_a_write_half_done() {
        for (slots, index) in [(1, 0), (4, 0), (4, 3)] {
            model(move || {
                let lock = Arc::new(ShardLock::new(Pair(Cell::new(0), Cell::new(0)), slots));
                let w = spawn_writer(&lock);
                read_pair(&lock, index);
                w.join().unwrap();
                assert_eq!(read_pair(&lock, index), 1);
            });
        }
    }

    #[test]
    fn readers_sharing_a_slot_never_see_a_write_half_done() {
        // Three threads: one preemption keeps the search to minutes.
        model_bounded(1, || {
            let lock = Arc::new(ShardLock::new(Pair(Cell::new(0), Cell::new(0)), 2));
            let r = {
                let lock = Arc::clone(&lock);
                loom::thread::spawn(move || read_pair(&lock, 1))
            };
            let w = spawn_writer(&lock);
            read_pair(&lock, 1);
            r.join().unwrap();
            w.join().unwrap();
        });
    }

    #[test]
    fn writers_exclude_each_other() {
        model(|| {
            let lock = Arc::new(ShardLock::new(Pair(Cell::new(0), Cell::new(0)), 2));
            let (a, b) = (spawn_writer(&lock), spawn_writer(&lock));
            a.join().unwrap();
            b.join().unwrap();
            assert_eq!(read_pair(&lock, 0), 2);
        });
    }
}
