//! The item record as it lies in a segment:
//!
//! ```text
//! [key_len: u8][value_len: u24 LE][flags: u8][client flags: u32 LE, only if HAS_CLIENT_FLAGS][key][value]
//! ```
//!
//! Five bytes of header; no alignment padding; the CAS value lives in the hash bucket, the expiry
//! in the segment header and the access frequency in the hash slot. The `DEAD` bit is set when the
//! item is deleted or replaced, so that a crash-recovery scan can tell live copies from old ones.

/// Header bytes before the optional client flags.
pub const HEADER_LEN: usize = 5;
/// Set when the item was deleted or replaced.
pub const DEAD: u8 = 0x01;
/// Four bytes of client flags follow the header.
pub const HAS_CLIENT_FLAGS: u8 = 0x02;
/// Largest value the 24-bit length field holds.
pub const MAX_VALUE_LEN: usize = (1 << 24) - 1;

/// Bytes an item takes in a segment.
#[inline]
pub fn record_len(key_len: usize, value_len: usize, client_flags: u32) -> usize {
    HEADER_LEN + if client_flags != 0 { 4 } else { 0 } + key_len + value_len
}

/// Writes an item at the start of `dst`, which is exactly `record_len(..)` bytes long.
/// The value is given in parts so that append/prepend need no temporary buffer.
#[inline]
pub fn write(dst: &mut [u8], key: &[u8], value_parts: &[&[u8]], client_flags: u32) {
    let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
    debug_assert!(key.len() <= 255 && value_len <= MAX_VALUE_LEN);
    dst[0] = key.len() as u8;
    dst[1..4].copy_from_slice(&(value_len as u32).to_le_bytes()[..3]);
    let mut at = HEADER_LEN;
    if client_flags != 0 {
        dst[4] = HAS_CLIENT_FLAGS;
        dst[5..9].copy_from_slice(&client_flags.to_le_bytes());
        at += 4;
    } else {
        dst[4] = 0;
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
    pub dead: bool,
    /// Total bytes of the record.
    pub len: usize,
}

/// Parses the record at the start of `src`, checking that it fits; `None` if it does not (only a
/// corrupt segment has such a record).
#[inline]
pub fn parse(src: &[u8]) -> Option<Record<'_>> {
    if src.len() < HEADER_LEN {
        return None;
    }
    let key_len = src[0] as usize;
    let value_len = u32::from_le_bytes([src[1], src[2], src[3], 0]) as usize;
    let flags = src[4];
    if key_len == 0 || flags & !(DEAD | HAS_CLIENT_FLAGS) != 0 {
        return None;
    }
    let (client_flags, at) = if flags & HAS_CLIENT_FLAGS != 0 {
        let b = src.get(5..9)?;
        (u32::from_le_bytes([b[0], b[1], b[2], b[3]]), 9)
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
        dead: flags & DEAD != 0,
        len,
    })
}

/// The record's checksum, blind to the `DEAD` bit (which changes after the write). Segments keep
/// the wrapping sum of their records' checksums, so a scan can verify a segment in one pass.
#[inline]
pub fn checksum(record: &[u8]) -> u64 {
    let seed = u64::from(record[0])
        | u64::from(record[1]) << 8
        | u64::from(record[2]) << 16
        | u64::from(record[3]) << 24
        | u64::from(record[4] & !DEAD) << 32;
    xxhash_rust::xxh3::xxh3_64_with_seed(&record[HEADER_LEN..], seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_and_without_flags() {
        for flags in [0u32, 7, u32::MAX] {
            let len = record_len(3, 11, flags);
            assert_eq!(len, 5 + 3 + 11 + if flags != 0 { 4 } else { 0 });
            let mut buf = vec![0xAAu8; len + 4];
            write(&mut buf[..len], b"key", &[b"hello", b" world"], flags);
            let r = parse(&buf).unwrap();
            assert_eq!((r.key, r.value, r.client_flags, r.dead, r.len), (&b"key"[..], &b"hello world"[..], flags, false, len));
        }
    }

    #[test]
    fn rejects_records_that_do_not_fit_or_are_malformed() {
        let mut buf = vec![0u8; 20];
        write(&mut buf[..record_len(2, 4, 0)], b"ab", &[b"wxyz"], 0);
        assert!(parse(&buf[..10]).is_none(), "truncated value");
        assert!(parse(&buf[..3]).is_none(), "truncated header");
        let mut bad = buf.clone();
        bad[4] = 0x80;
        assert!(parse(&bad).is_none(), "unknown flag bits");
        bad = buf.clone();
        bad[0] = 0;
        assert!(parse(&bad).is_none(), "empty key");
    }

    #[test]
    fn checksum_ignores_dead_bit_only() {
        let len = record_len(2, 4, 9);
        let mut buf = vec![0u8; len];
        write(&mut buf, b"ab", &[b"wxyz"], 9);
        let c = checksum(&buf);
        buf[4] |= DEAD;
        assert_eq!(checksum(&buf), c);
        buf[len - 1] ^= 1;
        assert_ne!(checksum(&buf), c);
    }
}
