//! The item record as it lies in a segment:
//!
//! ```text
//! [ctl: u8][access: u8][key_len: u8][value_len: 1-3 bytes LE][cas: 2 or 4 bytes LE]
//!     [client flags: u32 LE, only if HAS_CLIENT_FLAGS][cas high word: u32 LE, only if EXPLICIT_CAS][key][value]
//! ```
//!
//! The control byte holds the value length's width (1 to 3 bytes, in its two low bits, or the
//! fourth code, `LARGE_HEAD`: see below) and the
//! record's flags: `HAS_CLIENT_FLAGS`, `WIDE_CAS` and `EXPLICIT_CAS` (how the CAS is held, see
//! below), `STALE` (marked stale by an invalidation, memcached's `I`), `WON` (the recache token
//! was handed out) and `DEAD` (set when the item is deleted or replaced, so that a crash-recovery
//! scan can tell live copies from old ones). The access byte is the coarse time of the last store
//! or fetch (see `access_code`), relative to the segment's creation.
//!
//! Then the item's CAS counter (the shard's counter when the item was last modified: see
//! `Segcache::next_cas`), in one of three forms (`CasForm`):
//! - narrow, 2 bytes: the counter less its segment's base (`SegHeader::cas_base`, the shard's
//!   counter when the segment was opened), when that difference is below 2^16, as it is for
//!   every record appended while the segment is open for fewer than 2^16 modifications;
//! - wide (`WIDE_CAS`), 4 bytes: the counter itself, for the others (a long-open segment, a
//!   record copied by a merge or a touch into a segment whose base is far from its counter), and
//!   for a key whose narrow record a rewrite in place outgrew (see `engine::rewrite`);
//! - explicit (`EXPLICIT_CAS`): a client-chosen 64-bit value (memcached's `E`), its low word in
//!   the 4 bytes and its high word in an extension that only such records carry.
//!
//! A large item's head (`engine::large`: an item longer than a segment holds, stored as chunk
//! records under internal keys) is marked by the fourth width code, `LARGE_HEAD`: its value
//! length takes 4 bytes, the last one zero. No other record uses that code, and a copy of the
//! record (`Stamp::large`) keeps it, so the mark needs no bit of its own.
//!
//! A value under 256 bytes with a narrow CAS has a 6-byte header: 2 bytes more than before the
//! CAS and the state were kept. No alignment padding; the expiry lies in the segment header, and
//! the access frequency and the fetched bit in the hash slot (see `slot`).

/// Longest key, as in memcached (a record holds its key's length in a byte).
///
/// ```
/// use std::time::Duration;
/// use segcache_core::{Builder, Error, MAX_KEY_LEN};
///
/// let mut cache = Builder::new().heap_size(4 << 20).build()?;
/// cache.set(&[b'k'; MAX_KEY_LEN], b"v", 0, Duration::ZERO)?;
/// let too_long = cache.set(&[b'k'; MAX_KEY_LEN + 1], b"v", 0, Duration::ZERO);
/// assert!(matches!(too_long, Err(Error::KeyTooLong { len: 251 })));
/// # Ok::<(), segcache_core::Error>(())
/// ```
pub const MAX_KEY_LEN: usize = 250;
/// Bytes of a record that a lock-free read (`SharedCache`'s) copies; larger records are read
/// under the shard's lock, and are never rewritten in place under a read lock.
pub(crate) const PEEK_BYTES: usize = 512;

/// Bytes of the smallest header (a value under 256 bytes, a narrow CAS, no client flags).
pub const HEADER_LEN: usize = 6;
/// Bytes of the longest fixed header (a 3-byte value length, a 4-byte CAS), before the optional
/// words.
pub const MAX_HEADER_LEN: usize = 10;
/// Bytes of the longest fixed header of any record, a large item's head included (its value
/// length takes 4 bytes: `LARGE_HEAD`): what a reader must see to decode any header.
pub const MAX_ANY_HEADER_LEN: usize = MAX_HEADER_LEN + 1;
/// The control byte (flags and the length's width).
pub const FLAGS_BYTE: usize = 0;
/// The access byte (see `access_code`), which reads update: outside the checksum.
pub const ACCESS_AT: usize = 1;
const KEY_LEN_AT: usize = 2;
const VALUE_LEN_AT: usize = 3;
/// The value length's width, less one (in `FLAGS_BYTE`).
const WIDTH_MASK: u8 = 0x03;
/// The width code of a large item's head (see the module docs): a 4-byte value length.
pub const LARGE_HEAD: u8 = 0x03;
/// Four bytes of client flags follow the header (in `FLAGS_BYTE`).
pub const HAS_CLIENT_FLAGS: u8 = 0x04;
/// The CAS value was chosen by the client: its high word follows the client flags.
pub const EXPLICIT_CAS: u8 = 0x08;
/// Marked stale by an invalidation (memcached's `I`).
pub const STALE: u8 = 0x10;
/// The item's recache token was handed out (memcached's `W`; later readers see `Z`). Set by
/// readers that hold the shard's lock shared (an atomic `fetch_or`), so outside the checksum.
pub const WON: u8 = 0x20;
/// The CAS counter is held whole, in 4 bytes, not as 2 bytes above the segment's base.
pub const WIDE_CAS: u8 = 0x40;
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

/// How a record holds its CAS value (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CasForm {
    /// The counter less the segment's base, in 2 bytes.
    Narrow,
    /// The counter, in 4 bytes (`WIDE_CAS`).
    Wide,
    /// A client-chosen value: its low word in 4 bytes, its high word after the client flags
    /// (`EXPLICIT_CAS`).
    Explicit,
}

impl CasForm {
    /// The form of a record stamped `stamp` in a segment whose base is `base`: narrow whenever
    /// its counter allows.
    #[inline]
    pub fn of(stamp: &Stamp, base: u32) -> CasForm {
        if stamp.cas_hi.is_some() {
            CasForm::Explicit
        } else if narrow_fits(stamp.cas, base) {
            CasForm::Narrow
        } else {
            CasForm::Wide
        }
    }

    /// The largest form a record takes (wide or explicit): every segment can hold it.
    #[inline]
    pub fn widest(explicit: bool) -> CasForm {
        if explicit {
            CasForm::Explicit
        } else {
            CasForm::Wide
        }
    }

    /// Whether a record of this form can hold counter `cas` in a segment whose base is `base`.
    #[inline]
    pub fn holds(self, cas: u32, base: u32) -> bool {
        match self {
            CasForm::Narrow => narrow_fits(cas, base),
            CasForm::Wide => true,
            CasForm::Explicit => false,
        }
    }

    /// The form of a record of this form, holding counter `cas`, once copied into a segment whose
    /// base is `base`: explicit stays explicit, a counter is narrow wherever it fits.
    #[inline]
    pub fn moved(self, cas: u32, base: u32) -> CasForm {
        match self {
            CasForm::Explicit => CasForm::Explicit,
            _ if narrow_fits(cas, base) => CasForm::Narrow,
            _ => CasForm::Wide,
        }
    }

    /// Bytes the CAS takes (both words of an explicit one).
    #[inline]
    pub fn bytes(self) -> usize {
        match self {
            CasForm::Narrow => 2,
            CasForm::Wide => 4,
            CasForm::Explicit => 8,
        }
    }
}

/// Whether counter `cas` can be held narrow in a segment whose base is `base`: it lies less than
/// 2^16 above the base (modulo 2^32, as the counter wraps).
#[inline]
pub fn narrow_fits(cas: u32, base: u32) -> bool {
    cas.wrapping_sub(base) <= u32::from(u16::MAX)
}

/// Bytes an item takes in a segment, its CAS held in `form`.
#[inline]
pub fn record_len(key_len: usize, value_len: usize, client_flags: u32, form: CasForm) -> usize {
    3 + width_of(value_len) + form.bytes() + if client_flags != 0 { 4 } else { 0 } + key_len + value_len
}

/// `record_len` of a record stamped `large` or not (a large item's head has a 4-byte length).
#[inline]
pub fn record_len_of(key_len: usize, value_len: usize, client_flags: u32, form: CasForm, large: bool) -> usize {
    if large {
        7 + form.bytes() + if client_flags != 0 { 4 } else { 0 } + key_len + value_len
    } else {
        record_len(key_len, value_len, client_flags, form)
    }
}

/// Whether a record of the same key with a `value_len`-byte value and client flags
/// `client_flags` (and a client-chosen CAS value if `explicit`) can be written over `r` byte for
/// byte: a value of the same length, client flags present in both or in neither, a client-chosen
/// CAS in both or in neither. (The length alone does not tell: each optional word takes 4 bytes,
/// so a record with flags and a value 4 bytes shorter has the length of one without.) A narrow
/// record also needs the new counter to fit (`CasForm::holds`). A large item's head has a
/// longer length field: no store is written over it.
#[inline]
pub fn same_layout(r: &Record<'_>, value_len: usize, client_flags: u32, explicit: bool) -> bool {
    r.value.len() == value_len
        && (r.client_flags != 0) == (client_flags != 0)
        && (r.form() == CasForm::Explicit) == explicit
        && !r.stamp.large
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
    /// The record is a large item's head (`LARGE_HEAD`).
    pub large: bool,
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

/// Writes the header of an item (everything before its key) at the start of `dst`, its CAS in
/// `form` (which `stamp` must allow: see `CasForm::of`) for a segment whose base is `base`;
/// returns its length. Not a large item's head (`write_head`, or `write_header_in` with
/// `width_for`): the stores of other items need not ask.
#[inline]
pub fn write_header(
    dst: &mut [u8],
    key_len: usize,
    value_len: usize,
    client_flags: u32,
    stamp: Stamp,
    form: CasForm,
    base: u32,
) -> usize {
    debug_assert!(!stamp.large, "a head's header is written with its own width");
    write_header_in(dst, width_of(value_len), key_len, value_len, client_flags, stamp, form, base)
}

/// The width of the value length in the header of a record stamped `stamp`: 4 bytes for a large
/// item's head (`LARGE_HEAD`), else what the length needs.
#[inline]
pub fn width_for(stamp: &Stamp, value_len: usize) -> usize {
    if stamp.large {
        4
    } else {
        width_of(value_len)
    }
}

/// `write_header` with the value length in `width` bytes (see `width_for`).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn write_header_in(
    dst: &mut [u8],
    width: usize,
    key_len: usize,
    value_len: usize,
    client_flags: u32,
    stamp: Stamp,
    form: CasForm,
    base: u32,
) -> usize {
    debug_assert!(key_len <= 255 && value_len <= MAX_VALUE_LEN);
    debug_assert_eq!(form == CasForm::Explicit, stamp.cas_hi.is_some());
    debug_assert!(form != CasForm::Narrow || narrow_fits(stamp.cas, base));
    debug_assert!(width == width_for(&stamp, value_len));
    let state = if stamp.stale { STALE } else { 0 } | if stamp.won { WON } else { 0 };
    // Most records have the shortest header (see `header`): one test, then its fields at fixed
    // places, with one bounds check for them all.
    if width == 1 && client_flags == 0 && form == CasForm::Narrow {
        let d: &mut [u8; HEADER_LEN] = (&mut dst[..HEADER_LEN]).try_into().expect("HEADER_LEN bytes");
        let cas = (stamp.cas.wrapping_sub(base) as u16).to_le_bytes();
        *d = [state, stamp.access, key_len as u8, value_len as u8, cas[0], cas[1]];
        return HEADER_LEN;
    }
    let mut ctl = (width - 1) as u8 | state;
    if client_flags != 0 {
        ctl |= HAS_CLIENT_FLAGS;
    }
    match form {
        CasForm::Narrow => {}
        CasForm::Wide => ctl |= WIDE_CAS,
        CasForm::Explicit => ctl |= EXPLICIT_CAS,
    }
    dst[FLAGS_BYTE] = ctl;
    dst[ACCESS_AT] = stamp.access;
    dst[KEY_LEN_AT] = key_len as u8;
    // Byte by byte: a copy of `width` bytes compiles to a `memcpy` call (see `header`).
    let len = (value_len as u32).to_le_bytes();
    for (i, b) in len.iter().enumerate().take(width) {
        dst[VALUE_LEN_AT + i] = *b;
    }
    let mut at = VALUE_LEN_AT + width;
    if form == CasForm::Narrow {
        dst[at..at + 2].copy_from_slice(&(stamp.cas.wrapping_sub(base) as u16).to_le_bytes());
        at += 2;
    } else {
        dst[at..at + 4].copy_from_slice(&stamp.cas.to_le_bytes());
        at += 4;
    }
    if client_flags != 0 {
        dst[at..at + 4].copy_from_slice(&client_flags.to_le_bytes());
        at += 4;
    }
    if let Some(hi) = stamp.cas_hi {
        dst[at..at + 4].copy_from_slice(&hi.to_le_bytes());
        at += 4;
    }
    at
}

/// Writes an item at the start of `dst`, which is exactly `record_len(..)` bytes long, its CAS
/// in `form` for a segment whose base is `base` (see `write_header`). The value is given in parts
/// so that append/prepend need no temporary buffer.
#[inline]
pub fn write(
    dst: &mut [u8],
    key: &[u8],
    value_parts: &[&[u8]],
    client_flags: u32,
    stamp: Stamp,
    form: CasForm,
    base: u32,
) {
    let at = write_header(dst, key.len(), sum_len(value_parts), client_flags, stamp, form, base);
    dst[at..at + key.len()].copy_from_slice(key);
    write_value(dst, at + key.len(), value_parts);
}

/// `write` of a large item's head (`stamp.large`), whose value length takes 4 bytes.
#[inline]
pub fn write_head(
    dst: &mut [u8],
    key: &[u8],
    value_parts: &[&[u8]],
    client_flags: u32,
    stamp: Stamp,
    form: CasForm,
    base: u32,
) {
    debug_assert!(stamp.large);
    let at = write_header_in(dst, 4, key.len(), sum_len(value_parts), client_flags, stamp, form, base);
    dst[at..at + key.len()].copy_from_slice(key);
    write_value(dst, at + key.len(), value_parts);
}

/// `write` over a record of the same key and layout (`same_layout`): the key's bytes, already
/// there, are left as they are.
#[inline]
pub fn write_over(
    dst: &mut [u8],
    key_len: usize,
    value_parts: &[&[u8]],
    client_flags: u32,
    stamp: Stamp,
    form: CasForm,
    base: u32,
) {
    let at = write_header(dst, key_len, sum_len(value_parts), client_flags, stamp, form, base);
    write_value(dst, at + key_len, value_parts);
}

#[inline]
fn sum_len(value_parts: &[&[u8]]) -> usize {
    value_parts.iter().map(|p| p.len()).sum()
}

#[inline]
fn write_value(dst: &mut [u8], mut at: usize, value_parts: &[&[u8]]) {
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
    /// The CAS counter (whatever its form) and the record's other state.
    pub stamp: Stamp,
    /// The control byte, without `DEAD`: how the record holds its CAS (`form`) is decoded from
    /// it only when asked, since reads and deletes never ask.
    pub ctl: u8,
    pub dead: bool,
    /// Total bytes of the record.
    pub len: usize,
}

impl Record<'_> {
    /// The record's length while it is live; `None` once its dead bit is set.
    #[inline]
    pub fn live_len(&self) -> Option<u32> {
        (!self.dead).then_some(self.len as u32)
    }

    /// How the record holds its CAS.
    #[inline]
    pub fn form(&self) -> CasForm {
        form_of(self.ctl)
    }

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
    /// Where the key starts, derived from `ctl` once, when the header is decoded: every hit
    /// needs it, for the key, the value, the flags and the CAS.
    key_at: u8,
}

impl Header {
    /// How the record holds its CAS.
    #[inline]
    pub fn form(&self) -> CasForm {
        form_of(self.ctl)
    }
    /// Bytes of the CAS field (the low word only of an explicit value).
    #[inline]
    fn cas_len(&self) -> usize {
        if self.ctl & (WIDE_CAS | EXPLICIT_CAS) != 0 {
            4
        } else {
            2
        }
    }
    /// Where the CAS counter lies.
    #[inline]
    pub fn cas_at(&self) -> usize {
        VALUE_LEN_AT + 1 + usize::from(self.ctl & WIDTH_MASK)
    }
    /// Where the client flags lie, if the record has them.
    #[inline]
    pub fn flags_at(&self) -> usize {
        self.cas_at() + self.cas_len()
    }
    /// Where the key starts.
    #[inline]
    pub fn key_at(&self) -> usize {
        usize::from(self.key_at)
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
    /// The record's stamp, read from `src` (the record's first `key_at()` bytes at least), for a
    /// record of a segment whose base is `base` (see `CasForm::Narrow`). Always inlined: every
    /// hit decodes it, and left to itself the compiler made it a call on the single owner's read
    /// path (`benches/engine/budget.txt` holds what inlining it saves).
    #[inline(always)]
    pub fn stamp(&self, src: &[u8], base: u32) -> Stamp {
        let (stale, won, access) = (self.ctl & STALE != 0, self.ctl & WON != 0, src[ACCESS_AT]);
        // The shortest header (see `header`) holds a narrow CAS right after the value length.
        if self.key_at() == HEADER_LEN {
            let cas = base.wrapping_add(u32::from(u16::from_le_bytes([src[VALUE_LEN_AT + 1], src[VALUE_LEN_AT + 2]])));
            return Stamp { cas, cas_hi: None, stale, won, access, large: false };
        }
        let word = |at: usize| u32::from_le_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]]);
        let cas_hi = (self.ctl & EXPLICIT_CAS != 0).then(|| word(self.key_at() - 4));
        let at = self.cas_at();
        let cas = if self.cas_len() == 4 {
            word(at)
        } else {
            base.wrapping_add(u32::from(u16::from_le_bytes([src[at], src[at + 1]])))
        };
        Stamp { cas, cas_hi, stale, won, access, large: self.is_large() }
    }

    /// Whether the record is a large item's head (`LARGE_HEAD`).
    #[inline]
    pub fn is_large(&self) -> bool {
        self.ctl & WIDTH_MASK == LARGE_HEAD
    }
}

/// How a record whose control byte is `ctl` holds its CAS.
#[inline]
fn form_of(ctl: u8) -> CasForm {
    if ctl & EXPLICIT_CAS != 0 {
        CasForm::Explicit
    } else if ctl & WIDE_CAS != 0 {
        CasForm::Wide
    } else {
        CasForm::Narrow
    }
}

/// Decodes the header at the start of `src`; `None` for a header no record has (an empty key),
/// or when `src` is shorter than the header. `parse` decodes the same fields inline: built on
/// this function, it stopped being inlined into the write path's lookups (measured slower).
#[inline]
pub fn header(src: &[u8]) -> Option<Header> {
    let ctl = *src.first()? & !DEAD;
    // Most records have the shortest header (a one-byte value length, a narrow CAS, no optional
    // word): one test of the control byte tells, and their fields lie at fixed places.
    if ctl & (WIDTH_MASK | HAS_CLIENT_FLAGS | WIDE_CAS | EXPLICIT_CAS) == 0 && src.len() >= HEADER_LEN {
        let key_len = usize::from(src[KEY_LEN_AT]);
        if key_len == 0 {
            return None;
        }
        return Some(Header { key_len, value_len: usize::from(src[VALUE_LEN_AT]), ctl, key_at: HEADER_LEN as u8 });
    }
    let width = usize::from(ctl & WIDTH_MASK) + 1;
    let cas_len = if ctl & (WIDE_CAS | EXPLICIT_CAS) != 0 { 4 } else { 2 };
    if src.len() < VALUE_LEN_AT + width + cas_len || src[KEY_LEN_AT] == 0 {
        return None;
    }
    // The three bytes after the key length lie in every header (the shortest is 6 bytes), so
    // they are read whole and masked to the length's width: a copy of `width` bytes compiled to
    // a `memcpy` call whose result the load after it waited for (a fifth of a cached get). A
    // large item's head (width 4) has its fourth byte zero: the three hold its length.
    let raw = u32::from_le_bytes([src[VALUE_LEN_AT], src[VALUE_LEN_AT + 1], src[VALUE_LEN_AT + 2], 0]);
    let value_len = (raw & (u32::MAX >> (32 - 8 * width))) as usize;
    let key_at = VALUE_LEN_AT
        + width
        + cas_len
        + if ctl & HAS_CLIENT_FLAGS != 0 { 4 } else { 0 }
        + if ctl & EXPLICIT_CAS != 0 { 4 } else { 0 };
    Some(Header { key_len: usize::from(src[KEY_LEN_AT]), value_len, ctl, key_at: key_at as u8 })
}

/// Parses the record at the start of `src`, a record of a segment whose base is `base` (see
/// `CasForm::Narrow`), checking that it fits; `None` if it does not (only a corrupt segment has
/// such a record).
#[inline]
pub fn parse(src: &[u8], base: u32) -> Option<Record<'_>> {
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
        stamp: h.stamp(src, base),
        ctl: h.ctl,
        dead: src[FLAGS_BYTE] & DEAD != 0,
        len,
    })
}

/// Whether two keys are equal. Keys of 4 to 16 bytes (most keys) are compared as two
/// overlapping words, inline: the `memcmp` call that slice equality makes cost a cached get as
/// much again as the comparison itself.
#[inline(always)]
pub fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        8..=16 => {
            let w = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
            w(a, 0) == w(b, 0) && w(a, n - 8) == w(b, n - 8)
        }
        4..=7 => {
            let w = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"));
            w(a, 0) == w(b, 0) && w(a, n - 4) == w(b, n - 4)
        }
        _ => a == b,
    }
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

    /// Writes a record of `key` and `value` stamped `st` for a segment whose base is `base`, in
    /// the form `CasForm::of` picks; returns its bytes.
    fn written(key: &[u8], value: &[u8], flags: u32, st: Stamp, base: u32) -> Vec<u8> {
        let form = CasForm::of(&st, base);
        let mut buf = vec![0u8; record_len(key.len(), value.len(), flags, form)];
        write(&mut buf, key, &[value], flags, st, form, base);
        buf
    }

    /// Every length the word comparison covers, with a difference at every position, and the
    /// lengths around it.
    #[test]
    fn same_key_finds_any_difference() {
        for n in 0..=20usize {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
            assert!(same_key(&a, &a.clone()), "{n} bytes");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x01;
                assert!(!same_key(&a, &b) && !same_key(&b, &a), "{n} bytes, byte {at} differs");
            }
            assert!(!same_key(&a, &[a.as_slice(), b"x"].concat()), "{n} bytes against {}", n + 1);
        }
    }

    /// `write_over` leaves the key's bytes alone and writes everything else: over a record of
    /// the same key and layout it gives byte for byte what `write` gives, for every header form
    /// (1- to 3-byte value lengths, client flags, narrow, wide and explicit CAS), and the old
    /// record's state bits do not survive it.
    #[test]
    fn write_over_a_record_of_the_same_layout_is_a_write() {
        let key = b"a-sixteen-b-key!";
        for value_len in [5usize, 300, 70_000] {
            let (old_value, new_value) = (vec![b'o'; value_len], vec![b'n'; value_len]);
            for flags in [0u32, 9] {
                for (explicit, base) in [(None, 70), (None, 77 + 65536), (Some(0x1234_5678_9abc_def0u64), 70)] {
                    let old = Stamp { stale: true, won: true, ..Stamp::new(77, explicit.map(|e| e ^ 1), 3) };
                    let new = Stamp::new(78, explicit, 12);
                    let form = CasForm::of(&new, base);
                    assert_eq!(form, CasForm::of(&old, base));
                    let len = record_len(key.len(), value_len, flags, form);
                    let mut over = vec![0u8; len];
                    write(&mut over, key, &[&old_value], flags.wrapping_mul(3), old, form, base);
                    write_over(&mut over, key.len(), &[&new_value[..1], &new_value[1..]], flags, new, form, base);
                    let mut fresh = vec![0u8; len];
                    write(&mut fresh, key, &[&new_value], flags, new, form, base);
                    assert_eq!(over, fresh, "{value_len}-byte value, flags {flags}, {form:?}");
                    let r = parse(&over, base).unwrap();
                    assert_eq!((r.key, r.value, r.stamp, r.client_flags), (&key[..], &new_value[..], new, flags));
                }
            }
        }
    }

    #[test]
    fn round_trip_with_and_without_flags() {
        for flags in [0u32, 7, u32::MAX] {
            for (explicit, base, cas_len) in
                [(None, 70, 2), (None, 78, 4), (None, 77 + 65536, 4), (Some(0x1234_5678_9abc_def0u64), 70, 8)]
            {
                for (stale, won) in [(false, false), (true, false), (true, true), (false, true)] {
                    let st = Stamp { stale, won, ..Stamp::new(77, explicit, 9) };
                    let form = CasForm::of(&st, base);
                    let len = record_len(3, 11, flags, form);
                    let extra = if flags != 0 { 4 } else { 0 } + cas_len;
                    assert_eq!(len, 4 + 3 + 11 + extra);
                    let mut buf = vec![0xAAu8; len + 4];
                    write(&mut buf[..len], b"key", &[b"hello", b" world"], flags, st, form, base);
                    let r = parse(&buf, base).unwrap();
                    assert_eq!(
                        (r.key, r.value, r.client_flags, r.stamp, r.form(), r.dead, r.len),
                        (&b"key"[..], &b"hello world"[..], flags, st, form, false, len)
                    );
                    assert_eq!(r.explicit_cas(), explicit);
                    assert_eq!(r.stamp.cas, explicit.map_or(77, |e| e as u32));
                }
            }
        }
    }

    /// `write_header_in` writes the shortest header (a one-byte value length, a narrow CAS, no
    /// client flags) by a path of its own: values around the one-byte length's limit, with and
    /// without flags, narrow and wide, stale and won or not, read back whole, and the shortest
    /// header is exactly the one the path is for.
    #[test]
    fn the_shortest_header_and_its_neighbours_read_back() {
        for value_len in [0, 1, 200, 255, 256, 65535, 65536] {
            let value = vec![0x5Au8; value_len];
            for flags in [0u32, 5] {
                for (cas, base) in [(1_000u32, 990u32), (1_000 + 70_000, 990)] {
                    for (stale, won) in [(false, false), (true, false), (false, true), (true, true)] {
                        let st = Stamp { stale, won, ..Stamp::new(cas, None, 3) };
                        let form = CasForm::of(&st, base);
                        let len = record_len(4, value_len, flags, form);
                        let mut buf = vec![0xAAu8; len];
                        write(&mut buf, b"keyz", &[&value], flags, st, form, base);
                        let r = parse(&buf, base).unwrap();
                        assert_eq!(
                            (r.key, r.value, r.client_flags, r.stamp, r.form(), r.dead, r.len),
                            (&b"keyz"[..], &value[..], flags, st, form, false, len),
                            "value {value_len} flags {flags} cas {cas}"
                        );
                        let shortest = value_len < 256 && flags == 0 && form == CasForm::Narrow;
                        assert_eq!(header(&buf).unwrap().key_at() == HEADER_LEN, shortest);
                    }
                }
            }
        }
    }

    #[test]
    fn a_narrow_cas_holds_the_counters_up_to_two_to_the_sixteen_above_the_base() {
        // Bases near the wrap of the 32-bit counter too: the difference wraps with it.
        for base in [0u32, 1000, u32::MAX - 10, u32::MAX] {
            let cases = [
                (base, CasForm::Narrow),
                (base.wrapping_add(1), CasForm::Narrow),
                (base.wrapping_add(65535), CasForm::Narrow),
                (base.wrapping_add(65536), CasForm::Wide),
                (base.wrapping_add(1 << 31), CasForm::Wide),
                (base.wrapping_sub(1), CasForm::Wide),
            ];
            for (cas, form) in cases {
                assert_eq!(CasForm::of(&stamp(cas), base), form, "{cas} over {base}");
                assert_eq!(narrow_fits(cas, base), form == CasForm::Narrow);
                let buf = written(b"k", b"v", 0, stamp(cas), base);
                assert_eq!(buf.len(), if form == CasForm::Narrow { 8 } else { 10 }, "1 + 1 bytes and the header");
                assert_eq!(buf[FLAGS_BYTE] & WIDE_CAS != 0, form == CasForm::Wide);
                let r = parse(&buf, base).unwrap();
                assert_eq!(
                    (r.stamp.cas, r.form(), r.key, r.value),
                    (cas, form, &b"k"[..], &b"v"[..]),
                    "{cas} over {base}"
                );
                assert!(CasForm::Wide.holds(cas, base));
                assert!(!CasForm::Explicit.holds(cas, base));
                // A wide record holds its counter whatever the base it is read with.
                if form == CasForm::Wide {
                    assert_eq!(parse(&buf, base.wrapping_add(12345)).unwrap().stamp.cas, cas);
                }
            }
        }
    }

    #[test]
    fn a_counter_too_far_from_the_base_is_written_wide_and_reads_back() {
        let base = 5_000_000;
        let far = base + 70_000;
        let buf = written(b"key", b"value", 3, stamp(far), base);
        let h = header(&buf).unwrap();
        assert_eq!(h.form(), CasForm::Wide);
        assert_eq!((h.cas_at(), h.flags_at(), h.key_at()), (4, 8, 12));
        let r = parse(&buf, base).unwrap();
        assert_eq!((r.stamp.cas, r.client_flags, r.key, r.value), (far, 3, &b"key"[..], &b"value"[..]));
        // Its narrow twin is two bytes shorter.
        let near = written(b"key", b"value", 3, stamp(base + 7), base);
        assert_eq!(near.len() + 2, buf.len());
        assert_eq!(parse(&near, base).unwrap().stamp.cas, base + 7);
        assert_eq!(header(&near).unwrap().key_at(), 10);
    }

    #[test]
    fn the_length_takes_one_to_three_bytes() {
        for (value_len, head) in [(0, 6), (255, 6), (256, 7), (65535, 7), (65536, 8), (MAX_VALUE_LEN, 8)] {
            assert_eq!(record_len(1, value_len, 0, CasForm::Narrow), head + 1 + value_len);
            assert_eq!(record_len(1, value_len, 0, CasForm::Wide), head + 3 + value_len);
            assert!(record_len(1, value_len, 0, CasForm::Wide) <= MAX_HEADER_LEN + 1 + value_len);
            let value = vec![5u8; value_len];
            for (cas, base) in [(9, 0), (u32::MAX, 0)] {
                let buf = written(b"k", &value, 3, stamp(cas), base);
                let wide = usize::from(cas == u32::MAX) * 2;
                let h = header(&buf).unwrap();
                assert_eq!((h.value_len, h.key_at(), h.total_len()), (value_len, head + wide + 4, buf.len()));
                let r = parse(&buf, base).unwrap();
                assert_eq!((r.value.len(), r.client_flags, r.stamp.cas), (value_len, 3, cas));
            }
        }
    }

    /// A large item's head has a 4-byte length and the `LARGE_HEAD` code, for every CAS form and
    /// with flags or without; it parses back as such, and `record_len_of` gives its length.
    #[test]
    fn a_large_head_round_trips_with_its_mark() {
        for flags in [0u32, 5] {
            for (explicit, base) in [(None, 70), (None, 77 + 65536), (Some(0x1234_5678_9abc_def0u64), 70)] {
                let st = Stamp { large: true, ..Stamp::new(77, explicit, 9) };
                let form = CasForm::of(&st, base);
                let value = vec![7u8; 600];
                let len = record_len_of(3, value.len(), flags, form, true);
                assert_eq!(len, record_len(3, value.len(), flags, form) + 2);
                let mut buf = vec![0u8; len + 8];
                write_head(&mut buf[..len], b"key", &[&value], flags, st, form, base);
                let r = parse(&buf, base).unwrap();
                assert_eq!((r.key, r.value, r.client_flags, r.stamp, r.len), (&b"key"[..], &value[..], flags, st, len));
                assert!(header(&buf).unwrap().is_large());
                let plain = Stamp { large: false, ..st };
                write(&mut buf[..len - 2], b"key", &[&value], flags, plain, form, base);
                assert!(!parse(&buf, base).unwrap().stamp.large);
            }
        }
    }

    #[test]
    fn rejects_records_that_do_not_fit_or_are_malformed() {
        let mut buf = vec![0u8; 20];
        let len = record_len(2, 4, 0, CasForm::Narrow);
        write(&mut buf[..len], b"ab", &[b"wxyz"], 0, stamp(1), CasForm::Narrow, 0);
        assert!(parse(&buf[..len - 1], 0).is_none(), "truncated value");
        assert!(parse(&buf[..5], 0).is_none(), "truncated header");
        let mut bad = buf.clone();
        bad[VALUE_LEN_AT] = 0xff;
        assert!(parse(&bad, 0).is_none(), "value longer than the bytes left");
        bad = buf.clone();
        bad[KEY_LEN_AT] = 0;
        assert!(parse(&bad, 0).is_none(), "empty key");
        bad = buf[..6].to_vec();
        assert!(header(&bad).is_some());
        bad[FLAGS_BYTE] |= WIDE_CAS;
        assert!(header(&bad).is_none(), "a wide CAS needs two bytes more");
        assert!(parse(&[0u8; 20], 0).is_none(), "unwritten space");
    }

    /// `header` and `Header::stamp` read the shortest header from fixed places: for every control
    /// byte, every length of input up to the longest header and a spread of the other bytes, they
    /// decode what the layout's general rule gives.
    #[test]
    fn the_shortest_header_reads_as_the_general_rule_says() {
        fn rule(src: &[u8]) -> Option<(usize, usize, usize, u8)> {
            let ctl = *src.first()? & !DEAD;
            let width = usize::from(ctl & WIDTH_MASK) + 1;
            let cas_len = if ctl & (WIDE_CAS | EXPLICIT_CAS) != 0 { 4 } else { 2 };
            if src.len() < 3 + width + cas_len || src[KEY_LEN_AT] == 0 {
                return None;
            }
            // A large item's head (width 4) holds its length in the first three bytes.
            let value_len = (0..width.min(3)).map(|i| usize::from(src[VALUE_LEN_AT + i]) << (8 * i)).sum();
            let key_at = 3
                + width
                + cas_len
                + 4 * usize::from(ctl & HAS_CLIENT_FLAGS != 0)
                + 4 * usize::from(ctl & EXPLICIT_CAS != 0);
            Some((usize::from(src[KEY_LEN_AT]), value_len, key_at, ctl))
        }
        for ctl in 0..=255u8 {
            for fill in [0u8, 1, 0x5a, 0xff] {
                for len in 0..=MAX_HEADER_LEN + 8 {
                    let mut src: Vec<u8> = (0..len).map(|i| fill.wrapping_add((i as u8).wrapping_mul(37))).collect();
                    if let Some(c) = src.first_mut() {
                        *c = ctl;
                    }
                    let got = header(&src).map(|h| (h.key_len, h.value_len, h.key_at(), h.ctl));
                    assert_eq!(got, rule(&src), "control byte {ctl:#04x}, {len} bytes, fill {fill}");
                    let Some(h) = header(&src) else { continue };
                    if h.key_at() > src.len() {
                        continue;
                    }
                    let st = h.stamp(&src, 1000);
                    assert_eq!((st.stale, st.won, st.access), (ctl & STALE != 0, ctl & WON != 0, src[ACCESS_AT]));
                    let at = h.cas_at();
                    let want = if ctl & (WIDE_CAS | EXPLICIT_CAS) != 0 {
                        u32::from_le_bytes(src[at..at + 4].try_into().unwrap())
                    } else {
                        1000 + u32::from(u16::from_le_bytes([src[at], src[at + 1]]))
                    };
                    assert_eq!(st.cas, want, "control byte {ctl:#04x}");
                    assert_eq!(st.cas_hi.is_some(), ctl & EXPLICIT_CAS != 0);
                }
            }
        }
    }

    #[test]
    fn longest_value_and_flags_share_the_control_byte() {
        let value = vec![7u8; MAX_VALUE_LEN];
        let len = record_len(1, MAX_VALUE_LEN, 3, CasForm::Explicit);
        let mut buf = vec![0u8; len];
        write(&mut buf, b"k", &[&value], 3, Stamp::new(0, Some(u64::MAX), 0), CasForm::Explicit, 0);
        buf[FLAGS_BYTE] |= DEAD;
        let r = parse(&buf, 0).unwrap();
        assert_eq!((r.value.len(), r.client_flags, r.dead, r.len), (MAX_VALUE_LEN, 3, true, len));
        assert_eq!(r.explicit_cas(), Some(u64::MAX));
    }

    #[test]
    fn checksum_ignores_dead_bit_and_access_byte_only() {
        for (cas, base) in [(5, 0), (5, 6)] {
            let mut buf = written(b"ab", b"wxyz", 9, stamp(cas), base);
            let len = buf.len();
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
            assert!(parse(&buf, base).unwrap().dead);
            assert_eq!(parse(&buf, base).unwrap().value, b"wxyz");
            buf[len - 1] ^= 1;
            assert_ne!(checksum(&buf), c);
        }
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
