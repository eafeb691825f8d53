//! Reads of a shard that take no lock: `ShardView::peek` looks a key up while a writer may be
//! changing the shard, copying what it finds into the reader's own buffer, and
//! `ShardLock::read_optimistic` keeps the copy only if no writer held the lock meanwhile (a
//! seqlock read).
//!
//! Such a read writes nothing that another core uses (neither a lock word nor a reader count),
//! so reads on different cores do not slow each other or the writers down; with a writer, the
//! read is simply done again.
//!
//! `peek` may therefore see any state a writer passes through: slots, chains, headers and
//! records half changed, or reused for another key. It survives every one of them:
//! - it reads shard memory only through raw pointers or atomics (never through a reference that
//!   promises the memory does not change), and only inside the region's tables, segment headers
//!   and segments, whatever the values it reads: each segment id and offset is bounds-checked
//!   before it is used, and a record is copied only up to its segment's end;
//! - it reads each value once into local memory, and takes every decision on that copy, so a
//!   value cannot change between its check and its use;
//! - chains are followed as `Table::find` follows them, a bounded number of buckets, each index
//!   checked;
//! - nothing it saw is handed out before the lock's sequence number confirms that no writer ran,
//!   and the info word of the key's chain that no rewrite in place changed the value meanwhile
//!   (rewrites hold the lock shared, so the sequence number does not see them).
//!
//! Before any of it, a key whose chain's summary lacks its tag is a miss (`ShardView::may_hold`):
//! one atomic byte that no write leaves without the bit of a key in the chain, so that miss
//! needs no sequence number.
//!
//! Records are read by relaxed atomic loads of the aligned words that hold them (the first 128
//! bytes, on x86-64, by vector loads in assembly), the other fields by volatile loads; writers
//! store with plain writes. That is the seqlock's bargain: formally, a plain write racing a
//! read is a data race in Rust's memory model, as in every seqlock over plain data
//! (crossbeam's `AtomicCell` reads its fallback the same way); what may have raced is never
//! used. The lock's protocol itself is checked with loom.
//!
//! Items too large for the reader's buffer, and shards whose segments a lazily verified reopen
//! has not checked yet, are read under the lock instead.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::clock::Clock;
use crate::engine::cas_token;
use crate::engine::write::valid_key;
use crate::engine::Segcache;
use crate::hashtable::slot::{self, Loc};
use crate::hashtable::table::{Found, Table};
use crate::item::Item;
use crate::item::ItemState;
use crate::meta::{Gone, ShardMeta};
use crate::prefetch::prefetch;
use crate::record::PEEK_BYTES;
use crate::record::{self, Header};
use crate::segments::header::SegHeader;
use crate::sync::lock::{relax, word_snapshot, word_unchanged};
use crate::ttl_buckets::bucket::TtlBucket;
use crate::ttl_buckets::expire::{flushed_by, live_until};

/// The reader's copy of a record: the heap's aligned words that hold it (see `copy_record`).
pub(crate) type PeekBuf = [MaybeUninit<u64>; PEEK_WORDS];
/// Words enough for `PEEK_BYTES` that start anywhere in a word, and for the last group of
/// `copy_record` to run past them.
pub(crate) const PEEK_WORDS: usize = (PEEK_BYTES / 8 + 1).next_multiple_of(GROUP) + GROUP;
/// Words `copy_record` copies at a time.
const GROUP: usize = 4;
/// Words `copy_record` copies before it knows the record's length.
const WINDOW: usize = 16;
const _: () = assert!(WINDOW <= PEEK_WORDS);

/// What `peek` found.
#[derive(Clone, Copy)]
pub(crate) enum Peeked {
    Miss,
    /// The key's item expired or was flushed.
    Gone(Gone),
    /// The record is in the buffer from byte `at`. Of the item's state only the access byte and
    /// the segment's creation time are read (every read asks whether to refresh the access
    /// time); `state` builds the rest from the slot and the header when an item is made.
    Hit {
        found: Found<'static>,
        at: usize,
        header: Header,
        cas: u64,
        expire_at: u32,
        now: u32,
        access: u8,
        created: u32,
    },
    /// The item needs the lock: too large for the buffer.
    Locked,
    /// A rewrite in place held or changed the key's chain meanwhile: read again.
    Busy,
}

/// Where one shard's memory lies: fixed for the engine's life, so read without its lock.
pub(crate) struct ShardView {
    table: Table<'static>,
    heap: *const u8,
    segs: *const SegHeader,
    meta: *const ShardMeta,
    ttl: *const TtlBucket,
    segments: usize,
    segment_size: usize,
    clock: Arc<dyn Clock>,
    /// `clock` is the system clock: read without a call through the trait object.
    system_clock: bool,
    /// False while a lazily verified reopen has segments no read has checked (reads under the
    /// lock check them); `peek` then leaves every read to the lock.
    checked: AtomicBool,
    /// Stores may rewrite values in place under the read lock (`Segcache::rewrite_shared`).
    rewrites: bool,
    /// The engine's `cas_stride` and `cas_offset`.
    cas_stride: u64,
    cas_offset: u64,
}

impl std::fmt::Debug for ShardView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardView").field("segments", &self.segments).finish_non_exhaustive()
    }
}

// SAFETY: the pointers lead into the region, which the shard's engine keeps alive as long as
// the `SharedCache` that holds both; `peek` only reads through them (see the module docs).
unsafe impl Send for ShardView {}
// SAFETY: as above.
unsafe impl Sync for ShardView {}

impl ShardView {
    pub(crate) fn of(engine: &Segcache) -> Self {
        // Region mappings are page-aligned; `copy_record` reads the heap by words.
        assert!((engine.mem.heap as usize).is_multiple_of(8) && engine.geo.segment_size.is_multiple_of(8));
        ShardView {
            table: engine.table(),
            heap: engine.mem.heap,
            segs: engine.mem.segs,
            meta: engine.mem.meta,
            ttl: engine.mem.ttl,
            segments: engine.geo.segments,
            segment_size: engine.geo.segment_size,
            clock: Arc::clone(&engine.clock),
            system_clock: engine.clock.is_system(),
            checked: AtomicBool::new(engine.unchecked.is_none()),
            rewrites: engine.rewrites_shared(),
            cas_stride: engine.cas_stride,
            cas_offset: engine.cas_offset,
        }
    }

    /// Prefetches, before the lock is taken, the lines that a store of a key with hash `h` and
    /// TTL `ttl` (seconds) reads first: its bucket, the shard's counters and the open segment's
    /// header. When another core wrote them last, their transfers then overlap the lock's
    /// instead of following it one by one (50:50 on two threads: +4%). The open segment is read
    /// without the lock, so it may be stale: a wrong guess costs one useless prefetch.
    #[inline]
    pub(crate) fn prefetch_store(&self, h: u64, ttl: u32) {
        prefetch(self.table.head(h) as *const _ as *const u8);
        prefetch((self.meta as *const u8).wrapping_add(std::mem::offset_of!(ShardMeta, items)));
        let b = crate::ttl_buckets::ttl::bucket_of(ttl);
        // SAFETY: `b < BUCKETS`, so the field lies in the region's TTL bucket array; a volatile
        // read of a value a writer may be changing (only a hint, bounds-checked below).
        let open = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.ttl.add(b)).open[0])) };
        if (open as usize) < self.segments {
            let header = self.segs.wrapping_add(open as usize) as *const u8;
            prefetch(header.wrapping_add(std::mem::offset_of!(SegHeader, write_offset)));
        }
    }

    /// Prefetches the first two lines of the record at `loc` (read without a lock: a stale or
    /// wrong location costs one useless prefetch), so that a rewrite's record miss overlaps the
    /// locks it takes before it reads the record.
    #[inline]
    pub(crate) fn prefetch_record(&self, loc: Loc) {
        let at = (loc.seg as usize).wrapping_mul(self.segment_size).wrapping_add(loc.offset as usize);
        let p = self.heap.wrapping_add(at);
        prefetch(p);
        prefetch(p.wrapping_add(64));
    }

    /// Prefetches the record of the first slot in the key's chain whose tag is the hash `h`'s:
    /// nearly always the key's record, when it is present. Reads the chain without a lock, as a
    /// hint only: a slot a writer is changing costs one useless prefetch.
    #[inline]
    pub(crate) fn prefetch_match(&self, h: u64) {
        if !self.may_hold(h) {
            return;
        }
        let tag = slot::tag_of(h);
        let mut value = 0;
        let matched = self.table.scan(h, |_, v| {
            value = v;
            slot::slot_tag(v) == tag
        });
        if matched.is_some() {
            self.prefetch_record(slot::slot_loc(value));
        }
    }

    /// The clock's time.
    #[inline]
    fn now(&self) -> u32 {
        if self.system_clock {
            crate::clock::system_now()
        } else {
            self.clock.now()
        }
    }

    pub(crate) fn table(&self) -> &Table<'static> {
        &self.table
    }

    /// Whether stores rewrite values in place under the read lock: then readers under the read
    /// lock copy small items as `peek` does rather than reference them.
    #[inline]
    pub(crate) fn rewrites(&self) -> bool {
        self.rewrites
    }

    /// `peek` for a reader that holds the shard's read lock, where only rewrites in place can
    /// overlap it: reads again until none did.
    #[inline]
    pub(crate) fn peek_settled(&self, key: &[u8], h: u64, buf: &mut PeekBuf) -> Peeked {
        if !self.may_hold(h) {
            return Peeked::Miss;
        }
        let mut spins = 0;
        loop {
            match self.peek_in::<true>(key, h, buf) {
                Peeked::Busy => relax(&mut spins),
                p => return p,
            }
        }
    }

    /// Whether the key with hash `h` may be present; `false`: certainly absent, by its chain's
    /// summary alone. Most misses stop here, on a byte that stays in cache, without the lock's sequence number or
    /// the key's bucket. A single atomic load decides, so it needs no validation: at every
    /// moment of every write, a chain's summary holds the bit of each item in the chain (`put`
    /// sets it before the slot is stored; a refresh, which alone clears bits, recomputes them
    /// from the slots the writer sees), so a clear bit means the key was absent when it was
    /// read. `peek` itself does not ask: its callers do, first (a miss then counts as one).
    #[inline(always)]
    pub(crate) fn may_hold(&self, h: u64) -> bool {
        self.table.may_hold(h)
    }

    /// Whether `peek` may read; `false` until a read under the lock has seen every segment
    /// checked (`mark_checked`).
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.checked.load(Relaxed)
    }

    /// Called under the shard's lock: enables `peek` once no segment is left unchecked.
    #[inline]
    pub(crate) fn mark_checked(&self, engine: &Segcache) {
        if engine.unchecked.is_none() {
            self.checked.store(true, Relaxed);
        }
    }

    /// Looks the key up as `Segcache::get` does, copying the record into `buf`. The result is
    /// meaningful only if no writer ran meanwhile (`ShardLock::read_optimistic` checks that);
    /// rewrites in place, which do not take the lock exclusively, are checked here, by the info
    /// word of the key's chain (see `lock::lock_word`).
    #[inline(always)]
    pub(crate) fn peek(&self, key: &[u8], h: u64, buf: &mut PeekBuf) -> Peeked {
        self.peek_in::<false>(key, h, buf)
    }

    /// `peek`'s body. `peek_settled` calls its own instance (`UNDER_LOCK`): with one shared
    /// instance, the lookup it calls has two callers, and the compiler stops inlining it into
    /// the lock-free path (10% slower read-only).
    #[inline(always)]
    fn peek_in<const UNDER_LOCK: bool>(&self, key: &[u8], h: u64, buf: &mut PeekBuf) -> Peeked {
        if !valid_key(key) {
            return Peeked::Miss;
        }
        // A copy in registers: the info word's acquire load would otherwise have every later use
        // load the table's fields again.
        let table = self.table;
        let clock_now = self.now();
        let info_word = table.info(h);
        // Only a shard that rewrites under the read lock sets the lock bit.
        let bit = if self.rewrites { slot::INFO_LOCKED } else { 0 };
        let Some(info) = word_snapshot(info_word, bit) else { return Peeked::Busy };
        let mut copied = None;
        let found = table.find_in_chain(h, |loc| {
            copied = self.copy_record(loc, buf);
            match copied {
                // Too large to copy: it may not even be this key, but the lock will tell.
                Some((_, header)) if header.total_len() > PEEK_BYTES => true,
                // SAFETY: `copy_record` initialised the record's bytes, at most `PEEK_BYTES`
                // (checked above) from `at` < 8.
                Some((at, header)) => record::same_key(key, unsafe { init(buf, at + header.key_at(), header.key_len) }),
                // A segment id past the heap's names the flash tier, read only under the lock.
                None => loc.seg as usize >= self.segments,
            }
        });
        let Some(found) = found else { return Peeked::Miss };
        let Some((at, header)) = copied else { return Peeked::Locked };
        if header.total_len() > PEEK_BYTES {
            return Peeked::Locked;
        }
        // SAFETY: `meta` is the shard's metadata in the live region; a volatile load of each
        // `u32` field, which a writer may be changing (then `read_optimistic` discards this read).
        let (flush_at, last_expire) =
            unsafe { (read(&raw const (*self.meta).flush_at), read(&raw const (*self.meta).last_expire)) };
        // As `Segcache::now`: never before the last expiry run.
        let now = clock_now.max(last_expire);
        if flushed_by(flush_at, now) {
            return Peeked::Gone(Gone::Flushed);
        }
        let seg = slot::slot_loc(found.value).seg as usize;
        // `copy_record` checked `seg` against the segment count.
        // SAFETY: header `seg` of the live region's `segments`; read as above.
        let expire_at = unsafe { read(&raw const (*self.segs.add(seg)).expire_at) };
        if !live_until(expire_at, now) {
            return Peeked::Gone(Gone::Expired);
        }
        // A rewrite changes a value, its flags and its CAS counter only, never a slot or a key, so
        // only a hit needs the check.
        if self.rewrites && !word_unchanged(info_word, info) {
            return Peeked::Busy;
        }
        // SAFETY: as `expire_at` above.
        let cas_base = unsafe { read(&raw const (*self.segs.add(seg)).cas_base) };
        // SAFETY: `copy_record` initialised the record's bytes, the header among them, at most
        // `PEEK_BYTES` (checked above) from `at` < 8.
        let stamp = header.stamp(unsafe { init(buf, at, header.key_at()) }, cas_base);
        let cas = match stamp.cas_hi {
            Some(hi) => u64::from(hi) << 32 | u64::from(stamp.cas),
            None => cas_token(self.cas_stride, self.cas_offset, stamp.cas),
        };
        // SAFETY: as `expire_at` above.
        let created = unsafe { read(&raw const (*self.segs.add(seg)).create_at) };
        // SAFETY: as for `stamp`: every header holds at least `HEADER_LEN` bytes. (Read here at a
        // fixed place rather than from the stamp, whose index into a header of any length is
        // checked.)
        let access = unsafe { init(buf, at, record::HEADER_LEN) }[record::ACCESS_AT];
        Peeked::Hit { found, at, header, cas, expire_at, now, access, created }
    }

    /// The smallest read this layout allows: the key's chain walked for a tag match, the record
    /// it points at decoded only as far as its key and value, the key compared, the value handed
    /// to `f`. No lock, no expiry, no state, no counters, no copy: for measuring the real read
    /// against, from one thread with no writer (then every slot leads to a whole record).
    #[cfg(feature = "floor")]
    #[inline(always)]
    pub(crate) fn floor<R>(&self, key: &[u8], h: u64, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let tag = slot::tag_of(h);
        let mut value: Option<&[u8]> = None;
        self.table.scan(h, |_, v| {
            if slot::slot_tag(v) != tag {
                return false;
            }
            let loc = slot::slot_loc(v);
            let offset = loc.offset as usize;
            // SAFETY: with no writer, a slot names a whole record inside its segment, and the
            // segment lies in the heap (`floor_get`'s contract).
            let rec = unsafe {
                std::slice::from_raw_parts(
                    self.heap.add(loc.seg as usize * self.segment_size + offset),
                    self.segment_size - offset,
                )
            };
            let Some(header) = record::header(rec) else { return false };
            let (k, rest) = rec[header.key_at()..].split_at(header.key_len);
            if !record::same_key(key, k) {
                return false;
            }
            value = Some(&rest[..header.value_len]);
            true
        });
        value.map(f)
    }

    /// Copies the record at `loc` into `buf` (unless it is longer than `PEEK_BYTES`) and returns
    /// where it starts there and its header; `None` if `loc` or the header cannot be an item's
    /// (a slot or segment a writer is changing).
    ///
    /// It copies the aligned 8-byte words that hold the record, inlined, where a `memcpy` call
    /// costs more than the copy. The first `WINDOW` words go straight (`copy_window`), before
    /// the header says how long the record is (a few words of the next record, never used, cost
    /// less than a loop); a longer record's rest, and a record near its segment's end, go in
    /// groups of `GROUP` (`copy_rest`).
    #[inline]
    fn copy_record(&self, loc: slot::Loc, buf: &mut PeekBuf) -> Option<(usize, Header)> {
        let (seg, offset) = (loc.seg as usize, loc.offset as usize);
        let at = offset % 8;
        // Most records lie whole in the `WINDOW` words from their first: copied straight, with no
        // loop and before the length is known, where the segment has them all.
        if seg >= self.segments || offset - at + WINDOW * 8 > self.segment_size {
            return self.copy_rest(loc, buf, 0);
        }
        // SAFETY: the heap is 8-aligned (checked in `of`) and segments are multiples of 8 bytes;
        // `seg` < `segments`, and the `WINDOW` words from the record's first lie in its segment
        // (checked above).
        let first = unsafe { self.heap.add(seg * self.segment_size + offset - at) };
        // SAFETY: the `WINDOW` words from `first` lie in the segment (see above), and `buf` has
        // `WINDOW` words or more.
        unsafe { copy_window(first, buf) };
        // SAFETY: the first `WINDOW` words were just written; `at` < 8, so `at + MAX_ANY_HEADER_LEN`
        // lies in them.
        let header = record::header(unsafe { init(buf, at, record::MAX_ANY_HEADER_LEN) })?;
        let len = header.total_len();
        // A record that the window holds lies in the segment, as the window does.
        if at + len <= WINDOW * 8 {
            return Some((at, header));
        }
        if len > self.segment_size - offset {
            return None;
        }
        if len <= PEEK_BYTES {
            return self.copy_rest(loc, buf, WINDOW);
        }
        Some((at, header))
    }

    /// `copy_record` for a record that the first `WINDOW` words do not hold (`copied` is then
    /// `WINDOW`: they are in `buf`), or that lies near its segment's end (`copied` is 0), or for
    /// a location no record has. The last group runs past the record's end where the segment
    /// has room (a word or three of the next record, never used): a group's loop step costs
    /// about what one word's did.
    #[inline(never)]
    fn copy_rest(&self, loc: slot::Loc, buf: &mut PeekBuf, copied: usize) -> Option<(usize, Header)> {
        let (seg, offset) = (loc.seg as usize, loc.offset as usize);
        if seg >= self.segments || offset + record::HEADER_LEN > self.segment_size {
            return None;
        }
        let at = offset % 8;
        // Words from the record's first to its segment's end (segments are multiples of 8 bytes).
        let segment_words = (self.segment_size - (offset - at)) / 8;
        // SAFETY: the heap is 8-aligned (checked in `of`) and segments are multiples of 8 bytes;
        // `seg` < `segments` and `offset` lies inside the segment (checked above), so the record's
        // first word lies in the heap, and so do the `segment_words` words from it.
        let words = unsafe { self.heap.add(seg * self.segment_size + offset - at) }.cast::<AtomicU64>();
        // Copies words `from..to` at least, and returns where it stopped.
        let copy = |buf: &mut PeekBuf, from: usize, to: usize| -> usize {
            assert!(to <= segment_words && to <= PEEK_WORDS, "a record copy past its segment or buffer");
            let end = from + to.saturating_sub(from).div_ceil(GROUP) * GROUP;
            if end <= segment_words {
                let mut w = from;
                while w < end {
                    for (i, b) in buf[w..w + GROUP].iter_mut().enumerate() {
                        // SAFETY: word `w + i` < `end` <= `segment_words` (see `words`).
                        let word = unsafe { &*words.add(w + i) };
                        *b = MaybeUninit::new(word.load(Relaxed));
                    }
                    w += GROUP;
                }
                end
            } else {
                for (w, b) in buf.iter_mut().enumerate().take(to).skip(from) {
                    // SAFETY: word `w` < `to` <= `segment_words` (asserted above).
                    let word = unsafe { &*words.add(w) };
                    *b = MaybeUninit::new(word.load(Relaxed));
                }
                to.max(from)
            }
        };
        // The longest header, or what the segment has left of it (`header` checks the length).
        let head_len = record::MAX_ANY_HEADER_LEN.min(self.segment_size - offset);
        let copied = if copied == 0 { copy(buf, 0, (at + head_len).div_ceil(8)) } else { copied };
        // SAFETY: the first `copied` words, which hold the header, were just written; `at` < 8
        // and `head_len` <= `MAX_ANY_HEADER_LEN`.
        let header = record::header(unsafe { init(buf, at, head_len) })?;
        let len = header.total_len();
        if len > self.segment_size - offset {
            return None;
        }
        // A record shorter than what was copied is already whole.
        if len <= PEEK_BYTES {
            copy(buf, copied, (at + len).div_ceil(8));
        }
        Some((at, header))
    }
}

/// The state of a hit's item, as `state_of` gives it: the fetched bit from the slot, the stale
/// and won bits from the header's control byte (which `stamp` reads them from), and the access
/// byte and segment creation time that `peek` read.
#[inline]
pub(crate) fn state(slot_value: u64, header: &Header, access: u8, created: u32) -> ItemState {
    ItemState {
        fetched: slot_value & slot::FETCHED != 0,
        stale: header.ctl & record::STALE != 0,
        token_sent: header.ctl & record::WON != 0,
        won: false,
        access,
        created,
    }
}

/// The item a validated `Peeked::Hit` describes, borrowing `buf`.
///
/// # Safety
/// `buf`, `at` and `header` must be a hit's: `at` < 8, `header.total_len()` <= `PEEK_BYTES`,
/// and the record's bytes written (as `copy_record` leaves them for every hit).
#[inline]
pub(crate) unsafe fn item_in(
    buf: &PeekBuf,
    at: usize,
    header: Header,
    cas: u64,
    expire_at: u32,
    now: u32,
    state: ItemState,
) -> Item<'_> {
    debug_assert!(at < 8 && header.total_len() <= PEEK_BYTES);
    // SAFETY: per the contract, the record's bytes lie in `buf` (7 + `PEEK_BYTES` bytes fit in
    // `PEEK_WORDS` words) and are written; the key, the value and the flags lie in the record
    // (`total_len` is `key_at` + `key_len` + `value_len`; the flags precede the key).
    let (key, value, flags) = unsafe {
        let start = buf.as_ptr().cast::<u8>().add(at);
        let key = std::slice::from_raw_parts(start.add(header.key_at()), header.key_len);
        let value = std::slice::from_raw_parts(start.add(header.key_at() + header.key_len), header.value_len);
        let flags = match header.has_flags() {
            false => 0,
            true => u32::from_le_bytes(start.add(header.flags_at()).cast::<[u8; 4]>().read()),
        };
        (key, value, flags)
    };
    Item { key, value, flags, cas, expire_at, now, state }
}

/// Copies the `WINDOW` words from `src` into `buf`'s first, without a loop. On x86-64 it moves
/// 16 bytes at a time through vector registers, in assembly: half the instructions of word by
/// word loads, and the compiler cannot see the load race a writer's stores (what raced is never
/// used: see the module docs).
///
/// # Safety
/// `src` must be 8-aligned, and the `WINDOW` words from it in the region.
#[inline(always)]
unsafe fn copy_window(src: *const u8, buf: &mut PeekBuf) {
    const _: () = assert!(WINDOW == 16);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `src` holds `WINDOW` words (the contract) and `buf` at least as many; the block
    // reads only those and writes only `buf`'s, through the registers it names.
    unsafe {
        std::arch::asm!(
            "movdqu {a}, [{s}]",
            "movdqu {b}, [{s} + 16]",
            "movdqu {c}, [{s} + 32]",
            "movdqu {d}, [{s} + 48]",
            "movdqu [{t}], {a}",
            "movdqu [{t} + 16], {b}",
            "movdqu [{t} + 32], {c}",
            "movdqu [{t} + 48], {d}",
            "movdqu {a}, [{s} + 64]",
            "movdqu {b}, [{s} + 80]",
            "movdqu {c}, [{s} + 96]",
            "movdqu {d}, [{s} + 112]",
            "movdqu [{t} + 64], {a}",
            "movdqu [{t} + 80], {b}",
            "movdqu [{t} + 96], {c}",
            "movdqu [{t} + 112], {d}",
            s = in(reg) src,
            t = in(reg) buf.as_mut_ptr(),
            a = out(xmm_reg) _,
            b = out(xmm_reg) _,
            c = out(xmm_reg) _,
            d = out(xmm_reg) _,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let words = src.cast::<AtomicU64>();
        for (i, b) in buf[..WINDOW].iter_mut().enumerate() {
            // SAFETY: word `i` < `WINDOW` lies in the region (the contract), 8-aligned.
            let word = unsafe { &*words.add(i) };
            *b = MaybeUninit::new(word.load(Relaxed));
        }
    }
}

/// Bytes `at..at + len` of `buf`.
///
/// # Safety
/// They must lie in `buf`, and the words holding them must have been written. Every caller's
/// bytes lie in a record's first `at + PEEK_BYTES` bytes, with `at` < 8, which `PEEK_WORDS`
/// words hold.
#[inline]
unsafe fn init(buf: &PeekBuf, at: usize, len: usize) -> &[u8] {
    debug_assert!(at + len <= std::mem::size_of::<PeekBuf>());
    // SAFETY: in bounds and initialised, per the contract; `u64` words are bytes.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>().add(at), len) }
}

/// A `u32` that a writer may be changing, read once (volatile, so the compiler neither repeats
/// nor elides the load).
///
/// # Safety
/// `p` must be valid for reads and aligned.
#[inline]
unsafe fn read(p: *const u32) -> u32 {
    // SAFETY: per the contract.
    unsafe { std::ptr::read_volatile(p) }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::builder::Builder;

    /// A hit's state, built from the slot and the header when its item is made, is the state
    /// `state_of` gives from the record's stamp, for every control byte and fetched bit.
    #[test]
    fn a_hit_builds_the_state_that_state_of_gives() {
        use crate::engine::read::state_of;
        use crate::hashtable::slot::{pack, Loc, FETCHED};
        for ctl in 0..=255u8 {
            for fetched in [0, FETCHED] {
                let mut rec = [0u8; 32];
                rec[0] = ctl;
                rec[1] = 20; // the access byte
                rec[2] = 3; // key length
                rec[3] = 1; // value length (one byte, when the control byte says so)
                let Some(header) = crate::record::header(&rec) else { continue };
                let slot = pack(5, 3, Loc { seg: 1, offset: 8 }) | fetched;
                let want = state_of(&header.stamp(&rec, 0), 1_000_000, slot);
                assert_eq!(super::state(slot, &header, rec[1], 1_000_000), want, "control byte {ctl:#04x}");
            }
        }
    }

    /// `copy_record` copies a window of words, then groups of words, that may run past the
    /// record (never past its segment or the buffer): records of every length from 1 to past the
    /// window, starting at every byte of a word, with and without client flags, and the longest
    /// that a lock-free read copies, read back whole and exactly, the last ones of each segment
    /// among them.
    #[test]
    fn records_of_every_length_and_alignment_read_back_exactly() {
        const SEGMENT: usize = 64 << 10;
        let c = Builder::new()
            .heap_size(8 * SEGMENT)
            .segment_size(SEGMENT)
            .shards(1)
            .eviction(crate::eviction::policy::Policy::None)
            .build_shared()
            .unwrap();
        let key = |i: usize| format!("k{i}");
        let len = |i: usize| match i % 97 {
            96 => 512 - 12,                         // about the longest record the lock-free read copies
            n @ 80.. => 100 + (n - 80) * 3 + i % 3, // around the window's end
            n => n * 3 % 80,
        };
        let value = |i: usize| (0..len(i)).map(|j| (i * 7 + j) as u8).collect::<Vec<u8>>();
        let flags = |i: usize| if i.is_multiple_of(3) { 0 } else { i as u32 };
        // Until the heap is full: nothing is evicted.
        let mut n = 0;
        while c.set(key(n).as_bytes(), &value(n), flags(n), Duration::ZERO).is_ok() {
            n += 1;
        }
        assert!(n > 5000, "{n} items");
        for i in 0..n {
            let got = c.get_with(key(i).as_bytes(), |item| (item.value().to_vec(), item.flags(), item.key().to_vec()));
            assert_eq!(got, Some((value(i), flags(i), key(i).into_bytes())), "key {i}");
        }
    }

    /// `copy_record` copies whole words, never past the record's segment (it asserts so):
    /// records that end exactly where their segment ends (64-byte records in 64 KiB segments)
    /// read back whole through the lock-free path, the heap's last segment's among them.
    #[test]
    fn records_that_end_their_segment_read_back_whole() {
        const SEGMENT: usize = 64 << 10;
        let c = Builder::new().heap_size(4 * SEGMENT).segment_size(SEGMENT).shards(1).build_shared().unwrap();
        let key = |i: usize| format!("k{i:05}");
        let value = |i: usize| vec![(i % 251) as u8; 52];
        // 6 bytes of header, 6 of key and 52 of value: 1024 records fill a segment exactly.
        let n = 4 * SEGMENT / 64;
        for i in 0..n {
            c.set(key(i).as_bytes(), &value(i), 0, Duration::ZERO).unwrap();
        }
        let engine = c.shard_at(0).read();
        let ends = (0..n)
            .filter(|&i| engine.record_location(key(i).as_bytes()).is_some_and(|(_, at)| at as usize + 64 == SEGMENT))
            .count();
        drop(engine);
        assert!(ends >= 3, "records ending a segment: {ends}");
        for i in 0..n {
            let got = c.get_with(key(i).as_bytes(), |item| item.value().to_vec());
            assert_eq!(got, Some(value(i)), "key {i}");
        }
    }
}
