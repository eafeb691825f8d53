//! The item record as it lies in a segment:
//!
//! ```text
//! [ctl: u8][access: u8][key_len: u8][value_len: 1-3 bytes LE][cas: u32 LE]
//!     [client flags: u32 LE, only if HAS_CLIENT_FLAGS][cas high word: u32 LE, only if EXPLICIT_CAS][key][value]
//! ```
//!
//! The control byte holds the value length's width (1 to 3 bytes, in its two low bits) and the
//! record's flags: `HAS_CLIENT_FLAGS`, `EXPLICIT_CAS` (the client chose the CAS value, memcached's
//! `E`: 64 bits, the high word in an extension that only such records carry), `STALE` (marked
//! stale by an invalidation, memcached's `I`), `WON` (the recache token was handed out) and `DEAD` (set when the item is deleted or
//! replaced, so that a crash-recovery scan can tell live copies from old ones). The access byte
//! is the coarse time of the last store or fetch (see `access_code`), relative to the segment's
//! creation. A value under 256 bytes has an 8-byte header, as before the state was kept: the
//! length byte it no longer needs pays for the access byte. Then the item's CAS counter (the
//! shard's counter when the item was last modified: see `Segcache::next_cas`); no alignment
//! padding; the expiry in the segment header, and the access frequency and the fetched bit in
//! the hash slot (see `slot`).

/// Bytes of the smallest header (a value under 256 bytes, no client flags, no explicit CAS).
pub const HEADER_LEN: usize = 8;
/// Bytes of the longest fixed header (a 3-byte value length), before the optional words.
pub const MAX_HEADER_LEN: usize = 10;
/// The control byte (flags and the length's width).
pub const FLAGS_BYTE: usize = 0;
/// The access byte (see `access_code`), which reads update: outside the checksum.
pub const ACCESS_AT: usize = 1;
const KEY_LEN_AT: usize = 2;
const VALUE_LEN_AT: usize = 3;
/// The value length's width, less one (in `FLAGS_BYTE`).
const WIDTH_MASK: u8 = 0x03;
/// Four bytes of client flags follow the header (in `FLAGS_BYTE`).
pub const HAS_CLIENT_FLAGS: u8 = 0x04;
/// The CAS value was chosen by the client: its high word follows the client flags.
pub const EXPLICIT_CAS: u8 = 0x08;
/// Marked stale by an invalidation (memcached's `I`).
pub const STALE: u8 = 0x10;
/// The item's recache token was handed out (memcached's `W`; later readers see `Z`). Set by
/// readers that hold the shard's lock shared (an atomic `fetch_or`), so outside the checksum.
pub const WON: u8 = 0x20;
/// Set when the item was deleted or replaced (in `FLAGS_BYTE`).
pub const DEAD: u8 = 0x80;
/// Largest value the length field holds (the largest segment, 4 MiB, less one).
pub const MAX_VALUE_LEN: usize = (1 << 22) - 1;

/// Bytes the value length takes.
#[inline]
pub fn width_of(value_len: usize) -> usize {
    if value_len < 1 << 8 {
        1
    } else if value_len < 1 << 16 {
        2
    } else {
        3
    }
}

/// Bytes an item takes in a segment (`explicit`: with a client-chosen CAS value).
#[inline]
pub fn record_len(key_len: usize, value_len: usize, client_flags: u32, explicit: bool) -> usize {
    7 + width_of(value_len) + if client_flags != 0 { 4 } else { 0 } + if explicit { 4 } else { 0 } + key_len + value_len
}

/// Whether two records of one key have the same layout: the same length, client flags present
/// in both or in neither and a client-chosen CAS in both or in neither (each optional word takes 4
/// bytes, so a record with flags and a value 4 bytes shorter has the length of one without; the
/// length's width follows: with the same key, the same length and the same words, the values
/// have the same length).
#[inline]
pub fn same_layout(
    len: usize,
    client_flags: u32,
    explicit: bool,
    other_len: usize,
    other_flags: u32,
    other_explicit: bool,
) -> bool {
    len == other_len && (client_flags != 0) == (other_flags != 0) && explicit == other_explicit
}

/// What a record carries besides its key, value and client flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamp {
    /// The CAS counter, or the low word of a client-chosen CAS value.
    pub cas: u32,
    /// The high word of a client-chosen CAS value.
    pub cas_hi: Option<u32>,
    pub stale: bool,
    /// The recache token was handed out.
    pub won: bool,
    /// The access byte (see `access_code`).
    pub access: u8,
}

impl Stamp {
    /// A stamp for counter `cas` accessed at `access`, or for the client's CAS value `explicit`.
    #[inline]
    pub fn new(cas: u32, explicit: Option<u64>, access: u8) -> Stamp {
        match explicit {
            Some(e) => Stamp { cas: e as u32, cas_hi: Some((e >> 32) as u32), access, ..Stamp::default() },
            None => Stamp { cas, access, ..Stamp::default() },
        }
    }
}

/// The access byte for `age` seconds after the segment's creation, rounded up: exact below 16
/// seconds, then 8 steps per doubling (within 12.5%), up to 2^34 seconds.
#[inline]
pub fn access_code(age: u32) -> u8 {
    if age < 16 {
        return age as u8;
    }
    // age = (8 + m) << e, with e >= 1, rounded up.
    let e = 31 - age.leading_zeros() - 3;
    let m = age.div_ceil(1 << e) - 8; // 0..=8
    let code = u64::from((e + 1) * 8) + u64::from(m);
    code.min(255) as u8
}

/// The age (seconds after the segment's creation) an access byte stands for.
#[inline]
pub fn access_age(code: u8) -> u32 {
    if code < 16 {
        return u32::from(code);
    }
    let e = u32::from(code >> 3) - 1;
    let m = u32::from(code & 7);
    ((8 + m) as u64).checked_shl(e).map_or(u32::MAX, |v| v.min(u64::from(u32::MAX)) as u32)
}

/// Writes an item at the start of `dst`, which is exactly `record_len(..)` bytes long.
/// The value is given in parts so that append/prepend need no temporary buffer.
#[inline]
pub fn write(dst: &mut [u8], key: &[u8], value_parts: &[&[u8]], client_flags: u32, stamp: Stamp) {
    let value_len: usize = value_parts.iter().map(|p| p.len()).sum();
    debug_assert!(key.len() <= 255 && value_len <= MAX_VALUE_LEN);
    let width = width_of(value_len);
    let mut ctl = (width - 1) as u8;
    if client_flags != 0 {
        ctl |= HAS_CLIENT_FLAGS;
    }
    if stamp.cas_hi.is_some() {
        ctl |= EXPLICIT_CAS;
    }
    if stamp.stale {
        ctl |= STALE;
    }
    if stamp.won {
        ctl |= WON;
    }
    dst[FLAGS_BYTE] = ctl;
    dst[ACCESS_AT] = stamp.access;
    dst[KEY_LEN_AT] = key.len() as u8;
    dst[VALUE_LEN_AT..VALUE_LEN_AT + width].copy_from_slice(&(value_len as u32).to_le_bytes()[..width]);
    let mut at = VALUE_LEN_AT + width;
    dst[at..at + 4].copy_from_slice(&stamp.cas.to_le_bytes());
    at += 4;
    if client_flags != 0 {
        dst[at..at + 4].copy_from_slice(&client_flags.to_le_bytes());
        at += 4;
    }
    if let Some(hi) = stamp.cas_hi {
        dst[at..at + 4].copy_from_slice(&hi.to_le_bytes());
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
    /// The CAS counter and the record's other state.
    pub stamp: Stamp,
    pub dead: bool,
    /// Total bytes of the record.
    pub len: usize,
}

impl Record<'_> {
    /// The client-chosen CAS value, if any.
    #[inline]
    pub fn explicit_cas(&self) -> Option<u64> {
        self.stamp.cas_hi.map(|hi| u64::from(hi) << 32 | u64::from(self.stamp.cas))
    }
}

/// A record's header, decoded.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    pub key_len: usize,
    pub value_len: usize,
    /// The control byte, without `DEAD` (with `WON`, which readers set).
    pub ctl: u8,
}

impl Header {
    /// Where the CAS counter lies.
    #[inline]
    pub fn cas_at(&self) -> usize {
        VALUE_LEN_AT + 1 + usize::from(self.ctl & WIDTH_MASK)
    }
    /// Where the client flags lie, if the record has them.
    #[inline]
    pub fn flags_at(&self) -> usize {
        self.cas_at() + 4
    }
    /// Where the key starts.
    #[inline]
    pub fn key_at(&self) -> usize {
        self.flags_at()
            + if self.ctl & HAS_CLIENT_FLAGS != 0 { 4 } else { 0 }
            + if self.ctl & EXPLICIT_CAS != 0 { 4 } else { 0 }
    }
    /// Total bytes of the record.
    #[inline]
    pub fn total_len(&self) -> usize {
        self.key_at() + self.key_len + self.value_len
    }
    /// Whether client flags follow the header.
    #[inline]
    pub fn has_flags(&self) -> bool {
        self.ctl & HAS_CLIENT_FLAGS != 0
    }
    /// The record's stamp, read from `src` (the record's first `key_at()` bytes at least).
    #[inline]
    pub fn stamp(&self, src: &[u8]) -> Stamp {
        let word = |at: usize| u32::from_le_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]]);
        let cas_hi = (self.ctl & EXPLICIT_CAS != 0).then(|| word(self.key_at() - 4));
        Stamp {
            cas: word(self.cas_at()),
            cas_hi,
            stale: self.ctl & STALE != 0,
            won: self.ctl & WON != 0,
            access: src[ACCESS_AT],
        }
    }
}

/// Decodes the header at the start of `src`; `None` for a header no record has (an empty key),
/// or when `src` is shorter than the header. `parse` decodes the same fields inline: built on
/// this function, it stopped being inlined into the write path's lookups (measured slower).
#[inline]
pub fn header(src: &[u8]) -> Option<Header> {
    let ctl = *src.first()? & !DEAD;
    let width = usize::from(ctl & WIDTH_MASK) + 1;
    if src.len() < VALUE_LEN_AT + width + 4 || src[KEY_LEN_AT] == 0 || width > 3 {
        return None;
    }
    let mut len = [0u8; 4];
    len[..width].copy_from_slice(&src[VALUE_LEN_AT..VALUE_LEN_AT + width]);
    Some(Header { key_len: usize::from(src[KEY_LEN_AT]), value_len: u32::from_le_bytes(len) as usize, ctl })
}

/// Parses the record at the start of `src`, checking that it fits; `None` if it does not (only a
/// corrupt segment has such a record).
#[inline]
pub fn parse(src: &[u8]) -> Option<Record<'_>> {
    let h = header(src)?;
    let at = h.key_at();
    let len = at + h.key_len + h.value_len;
    if len > src.len() {
        return None;
    }
    let client_flags = if h.has_flags() {
        let b = &src[h.flags_at()..h.flags_at() + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    } else {
        0
    };
    Some(Record {
        key: &src[at..at + h.key_len],
        value: &src[at + h.key_len..len],
        client_flags,
        stamp: h.stamp(src),
        dead: src[FLAGS_BYTE] & DEAD != 0,
        len,
    })
}

/// The record's checksum, blind to the `DEAD` bit (which changes after the write) and to the
/// `WON` bit and the access byte (which reads change), covering the CAS value. Segments keep the wrapping sum of
/// their records' checksums, so a scan can verify a segment in one pass.
#[inline]
pub fn checksum(record: &[u8]) -> u64 {
    let seed = u64::from(record[FLAGS_BYTE] & !(DEAD | WON));
    xxhash_rust::xxh3::xxh3_64_with_seed(&record[KEY_LEN_AT..], seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(cas: u32) -> Stamp {
        Stamp { cas, ..Stamp::default() }
    }

    #[test]
    fn round_trip_with_and_without_flags() {
        for flags in [0u32, 7, u32::MAX] {
            for explicit in [None, Some(0x1234_5678_9abc_def0u64)] {
                for (stale, won) in [(false, false), (true, false), (true, true), (false, true)] {
                    let len = record_len(3, 11, flags, explicit.is_some());
                    let extra = if flags != 0 { 4 } else { 0 } + if explicit.is_some() { 4 } else { 0 };
                    assert_eq!(len, 8 + 3 + 11 + extra);
                    let mut buf = vec![0xAAu8; len + 4];
                    let st = Stamp { stale, won, ..Stamp::new(77, explicit, 9) };
                    write(&mut buf[..len], b"key", &[b"hello", b" world"], flags, st);
                    let r = parse(&buf).unwrap();
                    assert_eq!(
                        (r.key, r.value, r.client_flags, r.stamp, r.dead, r.len),
                        (&b"key"[..], &b"hello world"[..], flags, st, false, len)
                    );
                    assert_eq!(r.explicit_cas(), explicit);
                    assert_eq!(r.stamp.cas, explicit.map_or(77, |e| e as u32));
                }
            }
        }
    }

    #[test]
    fn the_length_takes_one_to_three_bytes() {
        for (value_len, head) in [(0, 8), (255, 8), (256, 9), (65535, 9), (65536, 10), (MAX_VALUE_LEN, 10)] {
            assert_eq!(record_len(1, value_len, 0, false), head + 1 + value_len);
            let value = vec![5u8; value_len];
            let mut buf = vec![0u8; record_len(1, value_len, 3, false)];
            write(&mut buf, b"k", &[&value], 3, stamp(u32::MAX));
            let h = header(&buf).unwrap();
            assert_eq!((h.value_len, h.key_at(), h.total_len()), (value_len, head + 4, buf.len()));
            let r = parse(&buf).unwrap();
            assert_eq!((r.value.len(), r.client_flags, r.stamp.cas), (value_len, 3, u32::MAX));
        }
    }

    #[test]
    fn rejects_records_that_do_not_fit_or_are_malformed() {
        let mut buf = vec![0u8; 20];
        write(&mut buf[..record_len(2, 4, 0, false)], b"ab", &[b"wxyz"], 0, stamp(1));
        assert!(parse(&buf[..13]).is_none(), "truncated value");
        assert!(parse(&buf[..7]).is_none(), "truncated header");
        let mut bad = buf.clone();
        bad[VALUE_LEN_AT] = 0xff;
        assert!(parse(&bad).is_none(), "value longer than the bytes left");
        bad = buf.clone();
        bad[KEY_LEN_AT] = 0;
        assert!(parse(&bad).is_none(), "empty key");
        bad = buf.clone();
        bad[FLAGS_BYTE] |= WIDTH_MASK;
        assert!(parse(&bad).is_none(), "no 4-byte lengths");
        assert!(parse(&[0u8; 20]).is_none(), "unwritten space");
    }

    #[test]
    fn longest_value_and_flags_share_the_control_byte() {
        let value = vec![7u8; MAX_VALUE_LEN];
        let len = record_len(1, MAX_VALUE_LEN, 3, true);
        let mut buf = vec![0u8; len];
        write(&mut buf, b"k", &[&value], 3, Stamp::new(0, Some(u64::MAX), 0));
        buf[FLAGS_BYTE] |= DEAD;
        let r = parse(&buf).unwrap();
        assert_eq!((r.value.len(), r.client_flags, r.dead, r.len), (MAX_VALUE_LEN, 3, true, len));
        assert_eq!(r.explicit_cas(), Some(u64::MAX));
    }

    #[test]
    fn checksum_ignores_dead_bit_and_access_byte_only() {
        let len = record_len(2, 4, 9, false);
        let mut buf = vec![0u8; len];
        write(&mut buf, b"ab", &[b"wxyz"], 9, stamp(5));
        let c = checksum(&buf);
        let cas_at = header(&buf).unwrap().cas_at();
        buf[cas_at] ^= 1;
        assert_ne!(checksum(&buf), c, "the CAS counter is covered");
        buf[cas_at] ^= 1;
        buf[FLAGS_BYTE] ^= STALE;
        assert_ne!(checksum(&buf), c, "the stale bit is covered");
        buf[FLAGS_BYTE] ^= STALE;
        buf[FLAGS_BYTE] |= DEAD | WON;
        buf[ACCESS_AT] = 200;
        assert_eq!(checksum(&buf), c);
        assert!(parse(&buf).unwrap().dead);
        assert_eq!(parse(&buf).unwrap().value, b"wxyz");
        buf[len - 1] ^= 1;
        assert_ne!(checksum(&buf), c);
    }

    #[test]
    fn access_codes_round_up_within_an_eighth() {
        let mut last = 0;
        for age in (0..100_000u32).chain([1 << 20, 1 << 30, u32::MAX - 1, u32::MAX]) {
            let code = access_code(age);
            let back = access_age(code);
            assert!(back >= age, "{age} -> {code} -> {back}");
            assert!(u64::from(back - age) * 8 <= u64::from(age).max(1), "{age} -> {back}");
            assert!(code >= last, "monotonic");
            last = code;
            if age < 16 {
                assert_eq!(back, age);
            }
        }
    }
}
