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
//! Beside the flag, on its cache line, a sequence number is bumped when a writer takes the lock
//! (to odd) and again when it leaves, so a reader can also go without the lock altogether
//! (`read_optimistic`): it notes the number, reads, and keeps what it read only if the number
//! did not move meanwhile (a seqlock). Such a read writes no shared memory at all, and a writer
//! does not wait for it; the price is that it may see a write half done, which it must survive
//! (see `peek`) and then throw away.
//!
//! The trade-off of the slots is the writer's cost: it loads every slot (`slots` cache lines, a
//! handful per core), and the lines of recent readers come from their caches. Writes stay short
//! (one append and one slot update), and reads outnumber them in a cache.
//!
//! Waiting spins briefly, then yields the processor: critical sections are short. A reader
//! cannot take the lock again while it holds it if a writer is waiting (the writer waits for
//! it, and it waits for the writer); neither can a writer.
//!
//! Each slot also carries its reader's hit and miss counters, on a line of their own so that
//! counting a read writes no line that writers load.
//!
//! In a cache that processes share (`Builder::multi_process`), the lock is the shard's
//! [`MappedLock`] in the mapping instead, taken exclusively by readers and writers alike, its
//! sequence number serves the optimistic readers, and the reader slots (for their counters) lie
//! in the mapping too, indexed by thread and process.
//!
//! The protocol is checked with loom: `RUSTFLAGS="--cfg loom" cargo test -p segcache-core --lib lock`.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};

use crate::meta::ReadCounters;
use crate::sync::mapped::{MappedLock, Taken};
#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize};
#[cfg(loom)]
use std::sync::atomic::Ordering::AcqRel;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize};

/// One reader's slot, on cache lines of its own (128 bytes: adjacent-line prefetch pairs lines).
/// All zeroes is an empty slot, as the mapping of a shared cache holds them.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct ReaderSlot {
    /// Read guards held through this slot.
    readers: AtomicUsize,
    /// Reads through this slot that found their key / did not, and stores rewritten in place
    /// under a read guard: apart from `readers`, which writers load, since reads that take no
    /// guard still count here.
    pub counters: Padded<SlotCounters>,
}

/// The counters of one reader slot.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SlotCounters {
    pub reads: ReadCounters,
    /// Counted with a locked add: threads may share a slot, and stores are counted exactly.
    pub sets: AtomicU64,
}

/// A value on cache lines of its own.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl Default for ReaderSlot {
    fn default() -> Self {
        Self::new()
    }
}

impl ReaderSlot {
    fn new() -> Self {
        ReaderSlot { readers: AtomicUsize::new(0), counters: Padded::default() }
    }
}

/// Makes a shard's value whole again after a process died holding its mapped lock.
pub type Repair<T> = fn(&mut T);

/// A reader-writer lock over `T` with one reader slot per thread (see the module docs).
#[repr(align(128))]
pub struct ShardLock<T> {
    /// The writer flag, and the sequence number of a lock that is not mapped: leaked from a box
    /// by the constructors (freed on drop).
    line: &'static LockLine,
    /// Bumped by each writer as it takes the lock (to odd) and as it leaves (to even), for
    /// optimistic readers: `line`'s, or the mapping's (`MappedLock::seq`) in a cache that
    /// processes share. A reference either way, so that a read finds it with one load rather
    /// than a test of `mapped`.
    seq: &'static AtomicU64,
    /// In a cache that processes share: the lock in the mapping, and how to repair `T` after
    /// a process died holding it.
    mapped: Option<(&'static MappedLock, Repair<T>)>,
    /// Leaked from a box by `new` (freed on drop), or in the mapping when `mapped`.
    slots: &'static [ReaderSlot],
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

/// A lock's writer flag and (unless the lock is mapped) its sequence number, on a line of their
/// own: a writer that takes the flag has the number's line too.
#[repr(align(128))]
struct LockLine {
    writer: AtomicBool,
    seq: AtomicU64,
}

impl LockLine {
    fn leak() -> &'static LockLine {
        Box::leak(Box::new(LockLine { writer: AtomicBool::new(false), seq: AtomicU64::new(0) }))
    }
}

impl<T> ShardLock<T> {
    /// `slots` is rounded up to a power of two.
    pub fn new(value: T, slots: usize) -> Self {
        let n = slots.max(1).next_power_of_two();
        let slots: Box<[ReaderSlot]> = (0..n).map(|_| ReaderSlot::new()).collect();
        let line = LockLine::leak();
        ShardLock { line, seq: &line.seq, mapped: None, slots: Box::leak(slots), value: UnsafeCell::new(value) }
    }

    /// A lock shared with other processes: `lock` and `slots` (a power of two of them) lie in
    /// the mapping that `value` keeps alive; `repair` makes `value` whole again after a process
    /// died holding the lock.
    pub fn mapped(value: T, lock: &'static MappedLock, slots: &'static [ReaderSlot], repair: Repair<T>) -> Self {
        assert!(slots.len().is_power_of_two(), "reader slots: {}", slots.len());
        ShardLock {
            line: LockLine::leak(),
            seq: &lock.seq,
            mapped: Some((lock, repair)),
            slots,
            value: UnsafeCell::new(value),
        }
    }

    /// The sequence number optimistic readers watch.
    #[inline]
    fn seq(&self) -> &AtomicU64 {
        self.seq
    }

    pub fn read(&self) -> ReadGuard<'_, T> {
        if let Some((m, repair)) = self.mapped {
            self.take_mapped(m, repair);
            return ReadGuard { lock: self, slot: self.own_slot() };
        }
        self.read_in(own_index())
    }

    /// Takes the mapped lock; after a holder died, repairs the shard first, with the sequence
    /// number odd so that optimistic readers throw away what they read meanwhile.
    fn take_mapped(&self, m: &MappedLock, repair: Repair<T>) {
        if m.lock() == Taken::OwnerDied {
            let s = m.seq.load(Relaxed);
            // The dead holder may have left it odd; it must move either way.
            m.seq.store((s | 1) + 2, Relaxed);
            fence(Release);
            // SAFETY: the mutex is ours: no other guard of this lock exists in any process.
            repair(unsafe { &mut *self.value.get() });
            m.seq.store((s | 1) + 3, Release);
            m.mark_consistent();
        }
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
            if !self.line.writer.load(SeqCst) {
                return ReadGuard { lock: self, slot };
            }
            slot.readers.fetch_sub(1, Release);
            while self.line.writer.load(Relaxed) {
                relax(&mut spins);
            }
        }
    }

    /// Runs `read` without taking the lock, and returns what it read only if no writer held
    /// the lock meanwhile; `None` after `tries` attempts that a writer overlapped. A writer
    /// already in is waited for.
    ///
    /// `read` may run while a writer changes `T`'s memory, so it must not go through `&T`: it
    /// reads through raw pointers, takes each value once, and survives any value it sees (no
    /// panic, no unbounded loop, no access outside the memory it knows). What it returns is
    /// thrown away unless the sequence number is unchanged after it.
    #[inline]
    pub fn read_optimistic<R>(&self, tries: u32, mut read: impl FnMut() -> R) -> Option<R> {
        let mut spins = 0;
        let mut failed = 0;
        let seq = self.seq();
        while failed < tries {
            let before = seq.load(Acquire);
            if before & 1 != 0 {
                // A writer holds the lock: wait for it rather than read what it is changing.
                // Not for long: a writer in another process may have died holding it, and only
                // taking the lock repairs that.
                let mut waited = 0;
                while seq.load(Relaxed) == before {
                    if waited >= ODD_WAIT {
                        return None;
                    }
                    waited += 1;
                    relax(&mut spins);
                }
                continue;
            }
            let r = read();
            // Pairs with the writer's release fence: if `read` saw anything a writer stored
            // after making `seq` odd, the load below sees `seq` moved.
            fence(Acquire);
            if seq.load(Relaxed) == before {
                return Some(r);
            }
            failed += 1;
        }
        None
    }

    pub fn write(&self) -> WriteGuard<'_, T> {
        if let Some((m, repair)) = self.mapped {
            self.take_mapped(m, repair);
            let seq = m.seq.load(Relaxed) + 1;
            m.seq.store(seq, Relaxed);
            fence(Release);
            return WriteGuard { lock: self, seq: seq + 1 };
        }
        let mut spins = 0;
        // Straight to the read-modify-write: loading the flag first would fetch its line shared,
        // then again exclusive, two transfers from the last writer's core instead of one.
        while self.line.writer.compare_exchange_weak(false, true, SeqCst, Relaxed).is_err() {
            // Wait with loads: a compare-and-swap would take the line from the holder, which
            // writes `seq` on it twice more and would have to fetch it back each time.
            while self.line.writer.load(Relaxed) {
                relax(&mut spins);
            }
        }
        // On the flag's line, which is now this core's: a plain load and store.
        let seq = self.seq.load(Relaxed) + 1;
        self.seq.store(seq, Relaxed);
        // Orders the odd `seq` before every store the writer makes: an optimistic reader that
        // sees one of them sees `seq` moved (its acquire fence pairs with this one).
        fence(Release);
        for slot in self.slots.iter() {
            if slot_readers(slot) != 0 {
                while slot.readers.load(Acquire) != 0 {
                    relax(&mut spins);
                }
            }
        }
        WriteGuard { lock: self, seq: seq + 1 }
    }

    /// The value, without locking: `&mut self` proves no guard is alive.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Exclusive locks taken so far (tests: which path a write took).
    #[cfg(test)]
    pub(crate) fn writes(&self) -> u64 {
        self.seq().load(Acquire) / 2
    }

    /// The slot that this thread counts its reads in: by thread and by process, so that the
    /// first threads of two processes sharing a mapped lock rarely share one (the salt only
    /// spreads the threads of an unmapped lock, which one process uses, the same way).
    #[inline]
    pub fn own_slot(&self) -> &ReaderSlot {
        // SAFETY: both constructors hold a power of two of slots (one at least), so the index,
        // masked by their count less one, is below it.
        unsafe { self.slots.get_unchecked(own_index() & (self.slots.len() - 1)) }
    }

    /// Every reader slot, for summing their counters.
    pub fn slots(&self) -> &[ReaderSlot] {
        self.slots
    }
}

impl<T> Drop for ShardLock<T> {
    fn drop(&mut self) {
        if self.mapped.is_none() {
            // SAFETY: without `mapped`, `slots` came from `Box::leak` in `new` (the only such
            // constructor) and is released once, here.
            drop(unsafe { Box::from_raw(self.slots as *const [ReaderSlot] as *mut [ReaderSlot]) });
        }
        // SAFETY: `line` came from `Box::leak` in a constructor and is released once, here.
        drop(unsafe { Box::from_raw(self.line as *const LockLine as *mut LockLine) });
    }
}

/// How long an optimistic reader waits for a writer before it takes the lock instead (looks,
/// the later ones yielding the processor): bounded, since only taking the lock repairs a shard
/// whose writer died.
const ODD_WAIT: u32 = 10_000;

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
        // the lock when it was counted (or, when `mapped`, it holds the mutex), so no `&mut T`
        // exists while it lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> Drop for ReadGuard<'_, T> {
    fn drop(&mut self) {
        match self.lock.mapped {
            Some((m, _)) => m.unlock(),
            None => {
                self.slot.readers.fetch_sub(1, Release);
            }
        }
    }
}

pub struct WriteGuard<'a, T> {
    lock: &'a ShardLock<T>,
    /// The sequence number that releases the lock.
    seq: u64,
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the writer flag is ours and every reader slot was seen empty after raising it
        // (or, when `mapped`, the mutex is ours).
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
        if let Some((m, _)) = self.lock.mapped {
            m.seq.store(self.seq, Release);
            m.unlock();
            return;
        }
        self.lock.seq.store(self.seq, Release);
        self.lock.line.writer.store(false, Release);
    }
}

/// A word with a lock bit that also versions what it guards: each hash chain's info word (see
/// `Table::info`), which a rewrite in place locks while it changes a value and bumps as it
/// leaves. Readers without a lock take a snapshot (`word_snapshot`), read, and keep what they
/// read only if the word is unchanged (`word_unchanged`), as with the shard's sequence number.
///
/// Generic over the atomic type so that loom can check the same functions the table calls.
pub(crate) trait Word {
    fn load(&self, order: std::sync::atomic::Ordering) -> u64;
    fn store(&self, value: u64, order: std::sync::atomic::Ordering);
    fn fetch_or(&self, bits: u64, order: std::sync::atomic::Ordering) -> u64;
}

macro_rules! impl_word {
    ($t:ty) => {
        impl Word for $t {
            #[inline]
            fn load(&self, order: std::sync::atomic::Ordering) -> u64 {
                <$t>::load(self, order)
            }
            #[inline]
            fn store(&self, value: u64, order: std::sync::atomic::Ordering) {
                <$t>::store(self, value, order)
            }
            #[inline]
            fn fetch_or(&self, bits: u64, order: std::sync::atomic::Ordering) -> u64 {
                <$t>::fetch_or(self, bits, order)
            }
        }
    };
}
impl_word!(std::sync::atomic::AtomicU64);
#[cfg(loom)]
impl_word!(loom::sync::atomic::AtomicU64);

/// Sets `bit` in `word`, waiting while another holder has it; returns the word as it was.
/// Holders change a few hundred bytes at most.
#[inline]
pub(crate) fn lock_word(word: &impl Word, bit: u64) -> u64 {
    let mut spins = 0;
    loop {
        // Straight to the read-modify-write, which fetches the line once, exclusive; setting a
        // bit that is already set changes nothing.
        let old = word.fetch_or(bit, Acquire);
        if old & bit == 0 {
            // Orders the set bit before every store the holder makes: a reader that sees one of
            // them sees the word changed (its acquire fence pairs with this one).
            fence(Release);
            return old;
        }
        // Wait with loads, which leave the line shared with the holder, who writes it once more
        // to leave.
        while word.load(Relaxed) & bit != 0 {
            relax(&mut spins);
        }
    }
}

/// Clears the lock: `new`, without `bit`, is the old word when nothing changed, else a word that
/// the guarded data never had with it before (the caller bumps a counter in it).
#[inline]
pub(crate) fn unlock_word(word: &impl Word, new: u64) {
    word.store(new, Release);
}

/// A reader's look at the word before it reads; `None` while a holder has `bit`.
#[inline]
pub(crate) fn word_snapshot(word: &impl Word, bit: u64) -> Option<u64> {
    let v = word.load(Acquire);
    (v & bit == 0).then_some(v)
}

/// Whether the word still is `snapshot` after the reads: then no holder changed what they read.
#[inline]
pub(crate) fn word_unchanged(word: &impl Word, snapshot: u64) -> bool {
    // Pairs with the holder's release fence in `lock_word`.
    fence(Acquire);
    word.load(Relaxed) == snapshot
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
pub(crate) fn relax(spins: &mut u32) {
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

/// This thread's reader slot index, before it is taken modulo the slots (see `own_slot`).
#[inline]
fn own_index() -> usize {
    thread_index().wrapping_add(crate::fork::process_salt())
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

    /// A writer that died mid-write leaves `seq` odd for good: an optimistic reader must give up
    /// and take the lock (which repairs the shard) instead of waiting for it forever.
    #[test]
    fn an_optimistic_reader_gives_up_on_a_writer_that_never_finishes() {
        let lock = crate::sync::mapped::tests::shared_lock();
        lock.seq.store(3, std::sync::atomic::Ordering::Relaxed);
        let slots: &'static [ReaderSlot] = Box::leak((0..2).map(|_| ReaderSlot::default()).collect());
        let shard = ShardLock::mapped(7u32, lock, slots, |v| *v += 1);
        assert_eq!(shard.read_optimistic(2, || 1), None);
        assert_eq!(*shard.read(), 7, "the lock itself was free: nothing to repair");
    }

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
    fn optimistic_reads_keep_only_what_no_writer_overlapped() {
        use std::sync::atomic::AtomicU64;
        // The pair is atomics, so that reading it while the writer changes it is defined: the
        // test is whether `read_optimistic` lets a half-done write through.
        let lock = Arc::new(ShardLock::new((AtomicU64::new(0), AtomicU64::new(0)), 2));
        const WRITES: u64 = 20_000;
        let writer = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                for _ in 0..WRITES {
                    let g = lock.write();
                    g.0.store(g.0.load(Relaxed) + 1, Relaxed);
                    for _ in 0..50 {
                        std::hint::spin_loop();
                    }
                    g.1.store(g.1.load(Relaxed) + 1, Relaxed);
                }
            })
        };
        // SAFETY: the value is only read, through atomics, while writers change it the same way.
        let v = unsafe { &*lock.value.get() };
        // Reads until one sees the last write, all the while the writer runs.
        loop {
            if let Some((a, b)) = lock.read_optimistic(2, || (v.0.load(Relaxed), v.1.load(Relaxed))) {
                assert_eq!(a, b, "an optimistic read kept a write half done");
                if a == WRITES {
                    break;
                }
            }
        }
        writer.join().unwrap();
    }

    /// Holders of a chain word's lock bit, one at a time: increments made by plain loads and
    /// stores while holding it are never lost. (loom explores the waiting loop's loads without
    /// end, so this one runs on threads; loom checks what readers keep.)
    #[test]
    fn word_holders_exclude_each_other() {
        use std::sync::atomic::AtomicU64;
        const BIT: u64 = 1 << 24;
        let (word, count) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let old = lock_word(&word, BIT);
                        count.store(count.load(Relaxed) + 1, Relaxed);
                        unlock_word(&word, old + (1 << 32));
                    }
                });
            }
        });
        assert_eq!(count.load(Relaxed), 80_000);
        assert_eq!(word.load(Relaxed), 80_000 << 32);
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

    /// The lock bit of the word tests (the chain info word's).
    const WORD_BIT: u64 = 1 << 24;

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

    /// Optimistic reads of a pair that a writer changes together: whatever a read keeps is
    /// whole. The pair is atomics (relaxed), which loom can model racing; the fences and the
    /// sequence number are what is checked.
    #[test]
    fn optimistic_readers_keep_no_write_half_done() {
        use loom::sync::atomic::AtomicU32;
        model(|| {
            let lock = Arc::new(ShardLock::new((AtomicU32::new(0), AtomicU32::new(0)), 2));
            let w = {
                let lock = Arc::clone(&lock);
                loom::thread::spawn(move || {
                    let g = lock.write();
                    g.0.store(1, Relaxed);
                    g.1.store(1, Relaxed);
                })
            };
            // SAFETY: the pair is read through atomics only, as the writer writes it.
            let v = unsafe { &*lock.value.get() };
            if let Some((a, b)) = lock.read_optimistic(2, || (v.0.load(Relaxed), v.1.load(Relaxed))) {
                assert_eq!(a, b, "an optimistic read kept a write half done");
            }
            w.join().unwrap();
        });
    }

    /// A chain word's holder rewrites a pair while a reader reads it without a lock: what the
    /// reader keeps is whole.
    #[test]
    fn lock_free_readers_of_a_word_keep_no_rewrite_half_done() {
        use loom::sync::atomic::{AtomicU32, AtomicU64};
        model(|| {
            let word = Arc::new(AtomicU64::new(0));
            let pair = Arc::new((AtomicU32::new(0), AtomicU32::new(0)));
            let holder = {
                let (word, pair) = (Arc::clone(&word), Arc::clone(&pair));
                loom::thread::spawn(move || {
                    let old = lock_word(&*word, WORD_BIT);
                    pair.0.store(1, Relaxed);
                    pair.1.store(1, Relaxed);
                    unlock_word(&*word, old + (1 << 32));
                })
            };
            if let Some(snap) = word_snapshot(&*word, WORD_BIT) {
                let (a, b) = (pair.0.load(Relaxed), pair.1.load(Relaxed));
                if word_unchanged(&*word, snap) {
                    assert_eq!(a, b, "a lock-free read kept a rewrite half done");
                }
            }
            holder.join().unwrap();
            assert_eq!(word_snapshot(&*word, WORD_BIT), Some(1 << 32));
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
