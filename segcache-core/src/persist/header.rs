//! The file header: its fields at fixed offsets, encoding and decoding, and the format version.

use crate::layout::Layout;

const MAGIC: [u8; 8] = *b"SEGCACHE";
/// Bumped whenever the meaning of any persisted byte changes.
/// 4: records carry a 32-bit CAS counter (`record`), shards a CAS counter (`ShardMeta::next_cas`).
/// 5: records carry a control byte (1-3 byte value lengths, stale and won bits, client-chosen CAS)
/// and an access byte; slots a fetched bit.
/// 7: records hold their CAS counter in 2 bytes, above their segment's base, when it fits
/// (`record::CasForm`); segment headers carry that base (`SegHeader::cas_base`, 64 bytes); the
/// header names the settings of the processes sharing the file, and the region holds their locks,
/// reader slots, tag summaries and S3-FIFO ghosts.
///
/// ```
/// // A file written by another format version is refused with `Error::BadFile`
/// // (or started over, with `Builder::reset_bad_file`).
/// assert!(segcache_core::FORMAT_VERSION >= 5);
/// ```
pub const FORMAT_VERSION: u32 = 7;

/// The header's fields, in file order (little-endian, fixed offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub version: u32,
    pub segment_size: u64,
    pub segments_per_shard: u64,
    pub shards: u32,
    pub hash_power: u32,
    pub total_len: u64,
    pub clean: u32,
    pub meta_checksum: u64,
    pub closed_at: u32,
    /// The settings that processes sharing the file must agree on beyond its layout (see
    /// `Sharing`); written by the first of them, checked by the others.
    pub sharing: u32,
}

const HEADER_BYTES: usize = 8 + 4 + 8 + 8 + 4 + 4 + 8 + 4 + 8 + 4 + 4;
/// The header with its checksum: what `decode` reads.
pub(crate) const HEADER_LEN: usize = HEADER_BYTES + 8;

impl Header {
    pub(crate) fn for_layout(layout: &Layout) -> Header {
        Header {
            version: FORMAT_VERSION,
            segment_size: layout.geometry.segment_size as u64,
            segments_per_shard: layout.geometry.segments as u64,
            shards: layout.shards as u32,
            hash_power: u32::from(layout.geometry.hash_power),
            total_len: layout.total_len() as u64,
            clean: 0,
            meta_checksum: 0,
            closed_at: 0,
            sharing: 0,
        }
    }

    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES + 8] {
        let mut b = [0u8; HEADER_BYTES + 8];
        let mut w = Writer { buf: &mut b, at: 0 };
        w.put(&MAGIC);
        w.put(&self.version.to_le_bytes());
        w.put(&self.segment_size.to_le_bytes());
        w.put(&self.segments_per_shard.to_le_bytes());
        w.put(&self.shards.to_le_bytes());
        w.put(&self.hash_power.to_le_bytes());
        w.put(&self.total_len.to_le_bytes());
        w.put(&self.clean.to_le_bytes());
        w.put(&self.meta_checksum.to_le_bytes());
        w.put(&self.closed_at.to_le_bytes());
        w.put(&self.sharing.to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&b[..HEADER_BYTES]);
        b[HEADER_BYTES..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses and checks the magic, version and checksum; the message says what is wrong.
    pub(crate) fn decode(b: &[u8]) -> std::result::Result<Header, String> {
        if b.len() < MAGIC.len() || b[..8] != MAGIC {
            return Err("not a segcache file (no SEGCACHE magic number)".into());
        }
        if b.len() < HEADER_BYTES + 8 {
            return Err("file is shorter than its header (truncated)".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version} is not supported (this build reads version {FORMAT_VERSION})"
            ));
        }
        if u64_at(HEADER_BYTES) != xxhash_rust::xxh3::xxh3_64(&b[..HEADER_BYTES]) {
            return Err("header checksum mismatch (corrupt header)".into());
        }
        Ok(Header {
            version,
            segment_size: u64_at(12),
            segments_per_shard: u64_at(20),
            shards: u32_at(28),
            hash_power: u32_at(32),
            total_len: u64_at(36),
            clean: u32_at(44),
            meta_checksum: u64_at(48),
            closed_at: u32_at(56),
            sharing: u32_at(60),
        })
    }

    /// Names the first setting in which the file differs from the configuration. The heap size
    /// comes before the shard count and segments per shard derived from it: a user who changed
    /// the heap size is told so, not that a count they never set differs.
    pub(crate) fn mismatch(&self, want: &Header) -> Option<String> {
        let (have_heap, want_heap) = (self.heap_bytes(), want.heap_bytes());
        if have_heap != want_heap {
            return Some(format!(
                "made with another configuration: heap size is {have_heap} bytes in the file, {want_heap} in this \
                 cache (open it with the heap size it was made with, move its items into this one with \
                 resize_file, or remove it to start empty)"
            ));
        }
        let checks: [(&str, u64, u64); 4] = [
            ("segment size", self.segment_size, want.segment_size),
            ("shard count", u64::from(self.shards), u64::from(want.shards)),
            ("heap size (segments per shard)", self.segments_per_shard, want.segments_per_shard),
            ("hash power", u64::from(self.hash_power), u64::from(want.hash_power)),
        ];
        checks.iter().find(|(_, have, want)| have != want).map(|(name, have, want)| {
            format!("made with another configuration: {name} is {have} in the file, {want} in this cache")
        })
    }

    /// The bytes of segments the heap holds.
    fn heap_bytes(&self) -> u64 {
        self.segment_size.saturating_mul(self.segments_per_shard).saturating_mul(u64::from(self.shards))
    }
}

struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}
impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Geometry;

    fn layout() -> Layout {
        Layout { geometry: Geometry { hash_power: 6, segment_size: 64 << 10, segments: 4 }, shards: 2 }
    }

    #[test]
    fn header_round_trips_and_detects_damage() {
        let h = Header::for_layout(&layout());
        let b = h.encode();
        assert_eq!(Header::decode(&b).unwrap(), h);
        for i in 0..HEADER_BYTES + 8 {
            let mut d = b;
            d[i] ^= 0x40;
            assert!(Header::decode(&d).is_err(), "flip at byte {i} went unnoticed");
        }
        let mut v2 = h;
        v2.version = FORMAT_VERSION + 1;
        let mut enc = v2.encode();
        assert!(Header::decode(&enc).unwrap_err().contains(&format!("version {}", FORMAT_VERSION + 1)));
        enc[..8].copy_from_slice(b"NOTACACH");
        assert!(Header::decode(&enc).unwrap_err().contains("not a segcache file"));
    }

    #[test]
    fn configuration_mismatch_is_named() {
        let a = Header::for_layout(&layout());
        // The same heap in more shards.
        let mut l = layout();
        (l.shards, l.geometry.segments) = (4, 2);
        assert!(a.mismatch(&Header::for_layout(&l)).unwrap().contains("shard count is 2 in the file, 4"));
        // A heap twice the size (which a shared cache splits into more shards): the heap size is named.
        let mut l = layout();
        l.shards = 4;
        let msg = a.mismatch(&Header::for_layout(&l)).unwrap();
        assert!(msg.contains("heap size is 524288 bytes in the file, 1048576 in this cache"), "{msg}");
        // The same heap in larger segments.
        let mut l = layout();
        (l.geometry.segment_size, l.geometry.segments) = (128 << 10, 2);
        assert!(a.mismatch(&Header::for_layout(&l)).unwrap().contains("segment size"));
        assert!(a.mismatch(&a).is_none());
    }
}
