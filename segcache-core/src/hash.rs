//! The key hash. It must never change between versions: persisted tables are indexed by it.

/// 64-bit XXH3 of the key, seed 0 (a stable, specified function).
#[inline]
pub fn hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Bits of the hash: bucket index from the low bits, shard from bits 44..52, tag from 52..64.
pub const SHARD_SHIFT: u32 = 44;

/// Which of `shards` (a power of two, at most 256) owns this hash.
#[inline]
pub fn shard_of(hash: u64, shards: usize) -> usize {
    ((hash >> SHARD_SHIFT) as usize) & (shards - 1)
}
