//! The tier file's metadata area, ahead of its flash segments: a header that names the file's
//! geometry and the identity of the heap it belongs to, then one record per flash segment of each
//! shard. A record is written whole with one positioned write each time its segment changes (see
//! `engine/demote.rs` for the order of those writes), so a reopen after a graceful stop or a
//! killed process finds each segment's generation, place in the ring and bytes written.
//!
//! ```text
//! header (block 0): magic: 8 | version: u32 | id: u32 | segment_size: u64 | segments: u32 | shards: u32 | sum: u64
//! records (from block 1), shard after shard: generation: u64 | seq: u64 | expire_at: u32 | written: u32 | sum: u64
//! ```

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::tier::entry::BLOCK;
use crate::tier::ring::FlashSeg;

const MAGIC: [u8; 8] = *b"SEGTIER\0";
/// Bumped whenever the meaning of any byte of the tier file changes.
const VERSION: u32 = 1;
/// Bytes of the header, its checksum included.
pub(crate) const HEADER_LEN: usize = 40;
/// Bytes of a flash segment's record, its checksum included.
pub(crate) const RECORD_LEN: usize = 32;

/// What the header says: the file's geometry and the identity it shares with its heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TierHeader {
    /// Also in every shard's metadata of the heap (`ShardMeta::tier_id`): a tier file whose id is
    /// not the heap's was written beside another heap, or beside an older state of this one.
    pub(crate) id: u32,
    pub(crate) segment_size: u64,
    /// Flash segments per shard.
    pub(crate) segments: u32,
    pub(crate) shards: u32,
}

/// Bytes of the metadata area of a file of `shards` shards of `segments` flash segments: the
/// header's block, then the records, rounded up to whole blocks so the segments stay aligned.
pub(crate) fn area_len(shards: usize, segments: usize) -> u64 {
    (BLOCK + (shards * segments * RECORD_LEN).next_multiple_of(BLOCK)) as u64
}

/// Where the record of flash segment `index` of shard `shard` lies in the file.
pub(crate) fn record_at(shard: usize, segments: usize, index: u32) -> u64 {
    (BLOCK + (shard * segments + index as usize) * RECORD_LEN) as u64
}

impl TierHeader {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.id.to_le_bytes());
        b[16..24].copy_from_slice(&self.segment_size.to_le_bytes());
        b[24..28].copy_from_slice(&self.segments.to_le_bytes());
        b[28..32].copy_from_slice(&self.shards.to_le_bytes());
        let sum = xxh3_64(&b[..32]);
        b[32..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The header `b` holds, if it is one of this version whose checksum holds.
    pub(crate) fn decode(b: &[u8]) -> Option<TierHeader> {
        let b = b.get(..HEADER_LEN)?;
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        if b[..8] != MAGIC || u32_at(8) != VERSION || u64_at(32) != xxh3_64(&b[..32]) {
            return None;
        }
        Some(TierHeader { id: u32_at(12), segment_size: u64_at(16), segments: u32_at(24), shards: u32_at(28) })
    }
}

/// The seed of a record's checksum: its place, so that a record copied elsewhere does not check.
fn seed(shard: usize, index: u32) -> u64 {
    (shard as u64) << 32 | u64::from(index)
}

/// The record of `seg`, flash segment `index` of shard `shard` (its `live` count is not stored: an
/// open counts the slots that lead into it).
pub(crate) fn encode_record(seg: &FlashSeg, shard: usize, index: u32) -> [u8; RECORD_LEN] {
    let mut b = [0u8; RECORD_LEN];
    b[..8].copy_from_slice(&seg.generation.to_le_bytes());
    b[8..16].copy_from_slice(&seg.seq.to_le_bytes());
    b[16..20].copy_from_slice(&seg.expire_at.to_le_bytes());
    b[20..24].copy_from_slice(&seg.written.to_le_bytes());
    let sum = xxh3_64_with_seed(&b[..24], seed(shard, index));
    b[24..].copy_from_slice(&sum.to_le_bytes());
    b
}

/// The segment a record describes, if its checksum holds (`live` 0).
pub(crate) fn decode_record(b: &[u8], shard: usize, index: u32) -> Option<FlashSeg> {
    let b = b.get(..RECORD_LEN)?;
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    if u64_at(24) != xxh3_64_with_seed(&b[..24], seed(shard, index)) {
        return None;
    }
    Some(FlashSeg { generation: u64_at(0), seq: u64_at(8), expire_at: u32_at(16), written: u32_at(20), live: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_records_round_trip_and_any_flipped_byte_fails() {
        let h = TierHeader { id: 7, segment_size: 1 << 20, segments: 4, shards: 2 };
        let b = h.encode();
        assert_eq!(TierHeader::decode(&b), Some(h));
        for i in 0..HEADER_LEN {
            let mut bad = b;
            bad[i] ^= 1;
            assert_eq!(TierHeader::decode(&bad), None, "byte {i}");
        }
        assert_eq!(TierHeader::decode(&[0; HEADER_LEN]), None, "a zeroed file has no header");
        let seg = FlashSeg { generation: 9, seq: 3, expire_at: 100, live: 5, written: 4096 };
        let r = encode_record(&seg, 1, 2);
        assert_eq!(decode_record(&r, 1, 2), Some(FlashSeg { live: 0, ..seg }));
        assert_eq!(decode_record(&r, 1, 3), None, "another segment's place");
        assert_eq!(decode_record(&r, 0, 2), None, "another shard's place");
        assert_eq!(decode_record(&[0; RECORD_LEN], 0, 0), None, "a zeroed record");
        assert_eq!(area_len(2, 4), (2 * BLOCK) as u64);
        assert_eq!(record_at(1, 4, 2), (BLOCK + 6 * RECORD_LEN) as u64);
    }
}
