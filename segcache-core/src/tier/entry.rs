//! A flash entry: one item as a flash segment image holds it. A 24-byte head, then the item's
//! record exactly as the heap held it, padded to 8 bytes:
//!
//! ```text
//! sum: u64 | len: u32 | cas_base: u32 | create_at: u32 | expire_at: u32 | record (len bytes)
//! ```
//!
//! The head carries what the record's own bytes depend on in the heap (its segment's CAS base,
//! creation and expiry times), so a flash segment may hold items of several heap segments. `sum`
//! is XXH3 of the rest of the head and the record, seeded with the flash segment's generation,
//! its index and the entry's offset: a read of a location since reused (another generation), of a
//! torn write, or of a slot that points anywhere but an entry's start, fails the check, and the
//! read is a miss.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Bytes of an entry's head.
pub(crate) const HEAD: usize = 24;
/// Reads are rounded out to whole blocks of this size, as flash devices and `O_DIRECT` want. An
/// entry no longer than a block never crosses into the next (`start`), so one block's read
/// serves it; the bytes skipped before it are zero, a head no entry has (its length is 0).
pub(crate) const BLOCK: usize = 4 << 10;
/// Entries start on this alignment within a flash segment.
pub(crate) const ALIGN: usize = 8;

/// What an entry's head says of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntryMeta {
    /// The CAS base of the heap segment it came from (its record's narrow CAS counts from it).
    pub(crate) cas_base: u32,
    /// The creation time of that segment (its record's access time counts from it).
    pub(crate) create_at: u32,
    /// The expiry of that segment: the item is gone after it (0: never).
    pub(crate) expire_at: u32,
}

/// Bytes an entry of a `len`-byte record takes in an image, padding included.
#[inline]
pub(crate) fn entry_len(len: usize) -> usize {
    (HEAD + len).next_multiple_of(ALIGN)
}

/// The seed of the checksum of the entry at `offset` of flash segment `index` in `generation`.
#[inline]
fn seed(generation: u64, index: u32, offset: u32) -> u64 {
    generation.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (u64::from(index) << 32 | u64::from(offset))
}

/// Where the entry of a `len`-byte record goes in an image that holds `used` bytes: right after
/// them, or at the next block's start when it would otherwise cross into that block, or when
/// less than a head is left of this one (so every head lies whole in one block).
#[inline]
pub(crate) fn start(used: usize, len: usize) -> usize {
    let (n, into) = (entry_len(len), used % BLOCK);
    if (n <= BLOCK && into + n > BLOCK) || BLOCK - into < HEAD {
        used.next_multiple_of(BLOCK)
    } else {
        used
    }
}

/// Whether offset `at` of an image, whose bytes from there are `bytes`, is padding before a
/// block's start (see `start`): the next entry is then at that block.
#[inline]
fn is_padding(bytes: &[u8], at: usize) -> bool {
    BLOCK - at % BLOCK < HEAD || bytes.get(8..12).is_some_and(|len| len == [0; 4])
}

/// The offsets of the entries of `image` (a flash segment's first bytes), padding skipped; they
/// end where the bytes do, or at a head that declares nothing.
pub(crate) fn offsets(image: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut off = 0;
    std::iter::from_fn(move || loop {
        if off + HEAD > image.len() {
            return None;
        }
        if is_padding(&image[off..], off) {
            off = (off + 1).next_multiple_of(BLOCK);
            continue;
        }
        let at = off;
        off += declared_len(&image[off..])?;
        return Some(at);
    })
}

/// Appends the entry of `record` to `image`, for flash segment `index` in `generation`, where
/// `start` puts it; returns its offset in the image.
pub(crate) fn put(image: &mut Vec<u8>, record: &[u8], meta: EntryMeta, index: u32, generation: u64) -> u32 {
    image.resize(start(image.len(), record.len()), 0);
    let at = image.len();
    image.extend_from_slice(&[0; 8]);
    image.extend_from_slice(&(record.len() as u32).to_le_bytes());
    image.extend_from_slice(&meta.cas_base.to_le_bytes());
    image.extend_from_slice(&meta.create_at.to_le_bytes());
    image.extend_from_slice(&meta.expire_at.to_le_bytes());
    image.extend_from_slice(record);
    let sum = xxh3_64_with_seed(&image[at + 8..], seed(generation, index, at as u32));
    image[at..at + 8].copy_from_slice(&sum.to_le_bytes());
    image.resize(at + entry_len(record.len()), 0);
    at as u32
}

/// The whole length (head, record, padding) that the entry starting `bytes` declares, or `None`
/// when even its head is not there.
#[inline]
pub(crate) fn declared_len(bytes: &[u8]) -> Option<usize> {
    let len = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
    Some(entry_len(len as usize))
}

/// The checked entry starting `bytes`, taken from `offset` of flash segment `index` in
/// `generation`: its head and its record, or `None` when the bytes are not that entry (torn,
/// reused, corrupt, or cut short).
pub(crate) fn check(bytes: &[u8], index: u32, offset: u32, generation: u64) -> Option<(EntryMeta, &[u8])> {
    let word = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if bytes.len() < HEAD {
        return None;
    }
    let len = word(8) as usize;
    let end = HEAD.checked_add(len)?;
    let body = bytes.get(8..end)?;
    let sum = u64::from_le_bytes(bytes[..8].try_into().ok()?);
    if xxh3_64_with_seed(body, seed(generation, index, offset)) != sum {
        return None;
    }
    let meta = EntryMeta { cas_base: word(12), create_at: word(16), expire_at: word(20) };
    Some((meta, &bytes[HEAD..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: EntryMeta = EntryMeta { cas_base: 7, create_at: 1_000, expire_at: 2_000 };

    #[test]
    fn entries_round_trip_at_their_offsets() {
        let mut image = Vec::new();
        let a = put(&mut image, b"first record", META, 3, 9);
        let b = put(&mut image, b"second", META, 3, 9);
        assert_eq!((a, b as usize), (0, entry_len(12)));
        assert_eq!(image.len() % ALIGN, 0);
        assert_eq!(check(&image[a as usize..], 3, a, 9), Some((META, &b"first record"[..])));
        assert_eq!(check(&image[b as usize..], 3, b, 9), Some((META, &b"second"[..])));
        assert_eq!(declared_len(&image[b as usize..]), Some(entry_len(6)));
    }

    #[test]
    fn entries_up_to_a_block_never_cross_one_and_the_gap_reads_as_padding() {
        let mut image = Vec::new();
        let mut at = Vec::new();
        for i in 0..400usize {
            let len = 1 + (i * 97) % 1500;
            let offset = put(&mut image, &vec![i as u8; len], META, 1, 2) as usize;
            let end = offset + entry_len(len);
            assert!(offset / BLOCK == (end - 1) / BLOCK, "entry {i} of {len} bytes crosses a block");
            at.push((offset, len));
        }
        // A long one starts where it is and spans blocks.
        let long = put(&mut image, &vec![9; 3 * BLOCK], META, 1, 2) as usize;
        assert_eq!(check(&image[long..], 1, long as u32, 2).map(|(_, r)| r.len()), Some(3 * BLOCK));
        // Walking the image finds every entry, each where it was put and checking.
        at.push((long, 3 * BLOCK));
        let walked: Vec<usize> = offsets(&image).collect();
        assert_eq!(walked, at.iter().map(|&(offset, _)| offset).collect::<Vec<_>>());
        for &(offset, len) in &at {
            assert_eq!(check(&image[offset..], 1, offset as u32, 2).map(|(_, r)| r.len()), Some(len));
        }
    }

    #[test]
    fn any_corrupted_byte_fails_the_check() {
        let mut image = Vec::new();
        put(&mut image, b"some record bytes", META, 0, 1);
        for i in 0..HEAD + 17 {
            let mut bad = image.clone();
            bad[i] ^= 0x10;
            assert_eq!(check(&bad, 0, 0, 1), None, "byte {i} flipped");
        }
    }

    #[test]
    fn another_generation_segment_or_offset_fails_the_check() {
        let mut image = Vec::new();
        put(&mut image, b"record", META, 2, 5);
        assert!(check(&image, 2, 0, 5).is_some());
        assert_eq!(check(&image, 2, 0, 6), None, "stale generation");
        assert_eq!(check(&image, 1, 0, 5), None, "another segment");
        assert_eq!(check(&image, 2, 8, 5), None, "another offset");
        assert_eq!(check(&image[..HEAD + 3], 2, 0, 5), None, "cut short");
    }
}
