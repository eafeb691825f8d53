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

/// Appends the entry of `record` to `image`, for flash segment `index` in `generation`; returns
/// its offset in the image.
pub(crate) fn put(image: &mut Vec<u8>, record: &[u8], meta: EntryMeta, index: u32, generation: u64) -> u32 {
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
