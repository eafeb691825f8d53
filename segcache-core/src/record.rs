//! The item record as it lies in a segment:
//!
//! ```text
//! [key_len: u8][value_len: 22 bits | HAS_CLIENT_FLAGS: 1 bit | DEAD: 1 bit, u24 LE][cas: u32 LE][client flags: u32 LE, only if HAS_CLIENT_FLAGS][key][value]
//! ```
//!
//! Eight bytes of header: four of lengths and flags (a value is at most a segment, 4 MiB, so its
//! length needs 22 bits and the two flags share its third byte: a byte less per item than a
//! separate flags byte, about 1% of the memory for small items), then the item's CAS counter
//! (the shard's counter when the item was last modified: see `Segcache::next_cas`); no alignment
//! padding; the expiry
//! in the segment header and the access frequency in the hash slot. The `DEAD` bit is set when the
//! item is deleted or replaced, so that a crash-recovery scan can tell live copies from old ones.

/// Header bytes before the optional client flags: lengths and flags, then the CAS counter.
pub const HEADER_LEN: usize = 8;
/// Where the record's CAS counter (u32 LE) lies.
pub const CAS_AT: usize = 4;
/// The header byte that holds the flags (in its two high bits) and the value length's top 6 bits.
pub const FLAGS_BYTE: usize = 3;
/// Set when the item was deleted or replaced (in `FLAGS_BYTE`).
pub const DEAD: u8 = 0x80;
/// Four bytes of client flags follow the header (in `FLAGS_BYTE`).
pub const HAS_CLIENT_FLAGS: u8 = 0x40;
/// Largest value the 22-bit length field holds (the largest segment, 4 MiB, less one).
pub const MAX_VALUE_LEN: usize = (1 << 22) - 1;

/// Bytes an item takes in a segment.
#[inline]
pub fn record_len(key_len: usize, value_len: usize, client_flags: u32) -> usize {
    HEADER_LEN + if client_flags != 0 { 4 } else { 0 } + key_len + value_len
}

/// Whether two records of one key have the same layout: the same length and client flags
/// present in both or in neither (flags take 4 bytes only when non-zero, so a record with flags
/// and a value 4 bytes shorter has the length of one without).
#[inline]
pub fn same_layout(len: usize, client_flags: u32, other_len: usize, other_flags: u32) -> bool {
    len == other_len && (client_flags != 0) == (other_flags != 0)
}

/// Writes an item at the start of `dst`, which is exactly `record_len(..)` bytes long.
/// The value is given in parts so that append/prepend need no temporary buffer.
#[inline]
pub fn write(dst: &mut [u8], key: &[u8], value_parts: &[&[u8]], client_flags: u32, cas: u32) {
    let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
    debug_assert!(key.len() <= 255 && value_len <= MAX_VALUE_LEN);
    dst[0] = key.len() as u8;
    dst[1..4].copy_from_slice(&(value_len as u32).to_le_bytes()[..3]);
    dst[CAS_AT..CAS_AT + 4].copy_from_slice(&cas.to_le_bytes());
    let mut at = HEADER_LEN;
    if client_flags != 0 {
        dst[FLAGS_BYTE] |= HAS_CLIENT_FLAGS;
        dst[at..at + 4].copy_from_slice(&client_flags.to_le_bytes());
        at += 4;
    }
    dst[at..at + key.len()].copy_from_slice(key);
    at += key.len();
    for p in value_parts {
        dst[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
}

/// A parsed view of a record.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub client_flags: u32,
    /// The item's CAS counter.
    pub cas: u32,
    pub dead: bool,
    /// Total bytes of the record.
    pub len: usize,
}

/// A record's header, decoded.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    pub key_len: usize,
    pub value_len: usize,
    /// 4 when client flags follow the header, else 0.
    pub flags_len: usize,
}

impl Header {
    /// Where the key starts.
    #[inline]
    pub fn key_at(&self) -> usize {
        HEADER_LEN + self.flags_len
    }
    /// Total bytes of the record.
    #[inline]
    pub fn total_len(&self) -> usize {
        self.key_at() + self.key_len + self.value_len
    }
}

/// Decodes the header at the start of `src` (`HEADER_LEN` bytes are enough); `None` for a
/// header no record has (an empty key). `parse` decodes the same fields inline: built on this
/// function, it stopped being inlined into the write path's lookups (measured slower).
#[inline]
pub fn header(src: &[u8]) -> Option<Header> {
    if src.len() < HEADER_LEN || src[0] == 0 {
        return None;
    }
    let flags = src[FLAGS_BYTE];
    let value_len = u32::from_le_bytes([src[1], src[2], flags & !(DEAD | HAS_CLIENT_FLAGS), 0]) as usize;
    let flags_len = if flags & HAS_CLIENT_FLAGS != 0 { 4 } else { 0 };
    Some(Header { key_len: src[0] as usize, value_len, flags_len })
}

/// Parses the record at the start of `src`, checking that it fits; `None` if it does not (only a
/// corrupt segment has such a record).
#[inline]
pub fn parse(src: &[u8]) -> Option<Record<'_>> {
    if src.len() < HEADER_LEN {
        return None;
    }
    let key_len = src[0] as usize;
    let flags = src[FLAGS_BYTE] & (DEAD | HAS_CLIENT_FLAGS);
    let value_len = u32::from_le_bytes([src[1], src[2], src[3] & !(DEAD | HAS_CLIENT_FLAGS), 0]) as usize;
    if key_len == 0 {
        return None;
    }
    let (client_flags, at) = if flags & HAS_CLIENT_FLAGS != 0 {
        let b = src.get(HEADER_LEN..HEADER_LEN + 4)?;
        (u32::from_le_bytes([b[0], b[1], b[2], b[3]]), HEADER_LEN + 4)
    } else {
        (0, HEADER_LEN)
    };
    let len = at + key_len + value_len;
    if len > src.len() {
        return None;
    }
    Some(Record {
        key: &src[at..at + key_len],
        value: &src[at + key_len..len],
        client_flags,
        cas: cas_of(src),
        dead: flags & DEAD != 0,
        len,
    })
}

/// The CAS counter of the record at the start of `src` (`HEADER_LEN` bytes at least).
#[inline]
pub fn cas_of(src: &[u8]) -> u32 {
    u32::from_le_bytes([src[CAS_AT], src[CAS_AT + 1], src[CAS_AT + 2], src[CAS_AT + 3]])
}

/// The record's checksum, blind to the `DEAD` bit (which changes after the write), covering the
/// CAS counter. Segments keep the wrapping sum of their records' checksums, so a scan can verify
/// a segment in one pass.
#[inline]
pub fn checksum(record: &[u8]) -> u64 {
    let seed = u64::from(record[0])
        | u64::from(record[1]) << 8
        | u64::from(record[2]) << 16
        | u64::from(record[3] & !DEAD) << 24;
    xxhash_rust::xxh3::xxh3_64_with_seed(&record[CAS_AT..], seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_and_without_flags() {
        for flags in [0u32, 7, u32::MAX] {
            let len = record_len(3, 11, flags);
            assert_eq!(len, 8 + 3 + 11 + if flags != 0 { 4 } else { 0 });
            let mut buf = vec![0xAAu8; len + 4];
            write(&mut buf[..len], b"key", &[b"hello", b" world"], flags, 77);
            let r = parse(&buf).unwrap();
            assert_eq!(
                (r.key, r.value, r.client_flags, r.cas, r.dead, r.len),
                (&b"key"[..], &b"hello world"[..], flags, 77, false, len)
            );
        }
    }

    #[test]
    fn rejects_records_that_do_not_fit_or_are_malformed() {
        let mut buf = vec![0u8; 20];
        write(&mut buf[..record_len(2, 4, 0)], b"ab", &[b"wxyz"], 0, 1);
        assert!(parse(&buf[..13]).is_none(), "truncated value");
        assert!(parse(&buf[..7]).is_none(), "truncated header");
        let mut bad = buf.clone();
        bad[1] = 0xff;
        assert!(parse(&bad).is_none(), "value longer than the bytes left");
        bad = buf.clone();
        bad[0] = 0;
        assert!(parse(&bad).is_none(), "empty key");
    }

    #[test]
    fn longest_value_and_flags_share_the_length_field() {
        let value = vec![7u8; MAX_VALUE_LEN];
        let len = record_len(1, MAX_VALUE_LEN, 3);
        let mut buf = vec![0u8; len];
        write(&mut buf, b"k", &[&value], 3, u32::MAX);
        buf[FLAGS_BYTE] |= DEAD;
        let r = parse(&buf).unwrap();
        assert_eq!((r.value.len(), r.client_flags, r.dead, r.len), (MAX_VALUE_LEN, 3, true, len));
    }

    #[test]
    fn checksum_ignores_dead_bit_only() {
        let len = record_len(2, 4, 9);
        let mut buf = vec![0u8; len];
        write(&mut buf, b"ab", &[b"wxyz"], 9, 5);
        let c = checksum(&buf);
        buf[CAS_AT] ^= 1;
        assert_ne!(checksum(&buf), c, "the CAS counter is covered");
        buf[CAS_AT] ^= 1;
        buf[FLAGS_BYTE] |= DEAD;
        assert_eq!(checksum(&buf), c);
        assert!(parse(&buf).unwrap().dead);
        assert_eq!(parse(&buf).unwrap().value, b"wxyz");
        buf[len - 1] ^= 1;
        assert_ne!(checksum(&buf), c);
    }
}
