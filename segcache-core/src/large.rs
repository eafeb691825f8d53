//! Items larger than a segment holds, as records: the head's descriptor, the chunks' keys, and
//! the values that reads assembled (see `engine::large` for how they are stored and read).
//!
//! A head is an ordinary record of the user's key, marked `record::LARGE_HEAD`, whose value is a
//! `Descriptor` padded to `HEAD_VALUE_LEN`. A chunk is an ordinary record whose key is
//! `CHUNK_KEY_LEN` bytes long, one more than any user key may be, so that no user command can
//! name one.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

use crate::arena::Arena;
use crate::record::{MAX_KEY_LEN, PEEK_BYTES};

/// Bytes of a chunk's key: one more than the longest user key, so that none can name a chunk.
pub(crate) const CHUNK_KEY_LEN: usize = MAX_KEY_LEN + 1;
/// Bytes of a head's value: the descriptor, padded so that the record is longer than a
/// lock-free read copies (and to a length of its own, which reads test before the mark).
pub(crate) const HEAD_VALUE_LEN: usize = PEEK_BYTES + 9;
/// Bytes of the descriptor proper, at the start of the head's value (the rest is zeros).
const DESCRIPTOR_LEN: usize = 32;
const _: () = assert!(DESCRIPTOR_LEN <= HEAD_VALUE_LEN);
/// Segments of a shard that no large item may take (see `shard_large_max`).
pub(crate) const SPARE_SEGMENTS: usize = 4;
/// Most bytes of assembled values a `&self` read holds until a write frees them (`Segcache::get`
/// of a large item): two of the largest items.
const HELD_BYTES: usize = 2 << 30;

/// Most heads that reads found broken (a chunk missing) kept for the next write to remove; more
/// are left to eviction, as before any was noted.
const MAX_BROKEN: usize = 64;

/// The engine's state for large items: the largest item allowed, the assembled values that
/// reads hand out borrowed from the engine, the live chunk records (which item counts leave
/// out) and the heads that reads found broken.
#[derive(Debug)]
pub(crate) struct Large {
    /// `Builder::max_item_size`, or 0 when items must fit a segment.
    max: usize,
    /// Values `item_in` assembled, held until a write frees them (`release`: the first write of
    /// each second, and every store of a large item).
    held: Arena,
    /// Live chunk records in the shard's heap: the records that `items` counts but that are no
    /// item a user stored. Kept by this process (rebuilt at an open: `Segcache::recount_chunks`),
    /// and 0 whenever no chunk is live, so that a cache without large items tests one word.
    pub(crate) chunks: u64,
    /// Keys of heads that a read (through `&self`, so unable to remove them) found with a chunk
    /// missing, for the next write to remove (`Segcache::remove_broken_heads`).
    broken: Mutex<Vec<Vec<u8>>>,
    /// `broken` is not empty: a relaxed load tells a writer whether there is work, without the
    /// mutex.
    any_broken: AtomicBool,
}

impl Large {
    pub(crate) fn new(max: Option<usize>) -> Large {
        Large {
            max: max.unwrap_or(0),
            held: Arena::with_limit(HELD_BYTES),
            chunks: 0,
            broken: Mutex::default(),
            any_broken: AtomicBool::new(false),
        }
    }

    /// Notes that the head of `key` lacks a chunk, for the next write to remove.
    #[cold]
    pub(crate) fn note_broken(&self, key: &[u8]) {
        let mut broken = self.broken.lock().unwrap_or_else(PoisonError::into_inner);
        if broken.len() < MAX_BROKEN && !broken.iter().any(|k| k == key) {
            broken.push(key.to_vec());
            self.any_broken.store(true, Relaxed);
        }
    }

    /// Whether a read noted a broken head since the last `take_broken`.
    #[inline(always)]
    pub(crate) fn has_broken(&self) -> bool {
        self.any_broken.load(Relaxed)
    }

    /// The keys of the heads noted broken, taken.
    pub(crate) fn take_broken(&mut self) -> Vec<Vec<u8>> {
        *self.any_broken.get_mut() = false;
        std::mem::take(self.broken.get_mut().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether a read holds assembled values that the next write frees.
    #[inline(always)]
    pub(crate) fn holds(&self) -> bool {
        self.held.in_use()
    }

    /// The largest item allowed (`Builder::max_item_size`), or 0 when items must fit a segment.
    #[inline]
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Keeps an assembled value until `release` and returns it, borrowed for as long as `self`
    /// is; `None` when too much is held already.
    pub(crate) fn hold(&self, value: Vec<u8>) -> Option<&[u8]> {
        self.held.hold(value)
    }

    /// Frees the assembled values: the caller holds the engine exclusively, so none is borrowed.
    #[cold]
    #[inline(never)]
    pub(crate) fn release(&mut self) {
        self.held.clear();
    }
}

/// What a head's value says of its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Descriptor {
    /// The value's length.
    pub(crate) total: u64,
    /// The chunk count, and each chunk's length but the last's.
    pub(crate) chunks: u32,
    pub(crate) chunk_len: u32,
    /// The key's hash: with `id`, the chunk keys.
    pub(crate) key_hash: u64,
    /// This version's id: a replaced version's chunks are never taken for the new one's.
    pub(crate) id: u64,
}

impl Descriptor {
    pub(crate) fn encode(&self) -> [u8; HEAD_VALUE_LEN] {
        let mut v = [0u8; HEAD_VALUE_LEN];
        let d = &mut v[..DESCRIPTOR_LEN];
        d[0..8].copy_from_slice(&self.total.to_le_bytes());
        d[8..12].copy_from_slice(&self.chunks.to_le_bytes());
        d[12..16].copy_from_slice(&self.chunk_len.to_le_bytes());
        d[16..24].copy_from_slice(&self.key_hash.to_le_bytes());
        d[24..32].copy_from_slice(&self.id.to_le_bytes());
        v
    }

    /// The descriptor in a head's value; `None` if it cannot be one (a damaged record).
    pub(crate) fn decode(v: &[u8]) -> Option<Descriptor> {
        if v.len() != HEAD_VALUE_LEN {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(v[at..at + 8].try_into().expect("8 bytes"));
        let half = |at: usize| u32::from_le_bytes(v[at..at + 4].try_into().expect("4 bytes"));
        let d = Descriptor { total: word(0), chunks: half(8), chunk_len: half(12), key_hash: word(16), id: word(24) };
        let whole = u64::from(d.chunks) * u64::from(d.chunk_len);
        let fits = d.chunks > 0 && d.chunk_len > 0 && whole >= d.total && whole - d.total < u64::from(d.chunk_len);
        fits.then_some(d)
    }

    /// Chunk `index`'s length.
    pub(crate) fn len_of(&self, index: u32) -> usize {
        let start = u64::from(index) * u64::from(self.chunk_len);
        (self.total - start).min(u64::from(self.chunk_len)) as usize
    }

    /// Chunk `index`'s key.
    pub(crate) fn chunk_key(&self, index: u32) -> [u8; CHUNK_KEY_LEN] {
        let mut k = [0u8; CHUNK_KEY_LEN];
        k[0..8].copy_from_slice(&self.key_hash.to_le_bytes());
        k[8..16].copy_from_slice(&self.id.to_le_bytes());
        k[16..20].copy_from_slice(&index.to_le_bytes());
        k
    }
}

/// Whether a record's key is a chunk's (no user key is that long): scans and listeners skip it.
#[inline]
pub(crate) fn is_chunk_key(key: &[u8]) -> bool {
    key.len() > MAX_KEY_LEN
}

/// Whether the record at the start of `src` is part of a large item, a head or a chunk.
pub(crate) fn is_large_part(src: &[u8]) -> bool {
    crate::record::header(src).is_some_and(|h| h.is_large() || h.key_len > MAX_KEY_LEN)
}

/// The parts of `value` (given in `parts`) that lie in bytes `from..to`.
pub(crate) fn parts_in<'a>(parts: &[&'a [u8]], from: usize, to: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(2);
    let mut at = 0;
    for p in parts {
        let (start, end) = (at, at + p.len());
        at = end;
        if end <= from || start >= to {
            continue;
        }
        out.push(&p[from.max(start) - start..to.min(end) - start]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_round_trips_and_a_damaged_one_is_refused() {
        let d = Descriptor { total: 9_500_001, chunks: 10, chunk_len: 1_000_000, key_hash: 7, id: 99 };
        assert_eq!(Descriptor::decode(&d.encode()), Some(d));
        assert_eq!((d.len_of(0), d.len_of(9)), (1_000_000, 500_001));
        assert_eq!((0..10).map(|i| d.len_of(i) as u64).sum::<u64>(), d.total);
        let mut short = d;
        short.chunks = 9;
        assert_eq!(Descriptor::decode(&short.encode()), None);
        assert_eq!(Descriptor::decode(&d.encode()[..HEAD_VALUE_LEN - 1]), None);
        assert_ne!(d.chunk_key(0), d.chunk_key(1));
        assert!(is_chunk_key(&d.chunk_key(0)));
    }

    #[test]
    fn parts_in_slices_across_parts() {
        let parts: [&[u8]; 3] = [b"abc", b"defg", b"hi"];
        let cat = |v: Vec<&[u8]>| v.concat();
        assert_eq!(cat(parts_in(&parts, 0, 9)), b"abcdefghi");
        assert_eq!(cat(parts_in(&parts, 2, 8)), b"cdefgh");
        assert_eq!(cat(parts_in(&parts, 3, 7)), b"defg");
        assert_eq!(cat(parts_in(&parts, 8, 9)), b"i");
    }
}
