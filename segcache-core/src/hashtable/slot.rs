//! Slot packing: a slot (64 bits) packs `tag: 12 | fetched: 1 | freq: 7 | segment: 22 | offset: 22`
//! (high to low); the first slot of a chain's head bucket is the bucket info (see `table`).
//!
//! `fetched` (the item was read since it was stored: memcached's `h`) is item state that every
//! read may change. In the slot it costs no record space, and readers that hold no lock set it
//! as they raise the frequency counter: by a compare-exchange of the whole slot, which fails if
//! a writer reused it meanwhile (a record byte could not be written safely without the lock). A
//! store clears it (a new item version); moves (merges, touch) keep it.

pub const OFFSET_BITS: u32 = 22;
pub const SEG_BITS: u32 = 22;
pub const FREQ_SHIFT: u32 = OFFSET_BITS + SEG_BITS;
pub const TAG_SHIFT: u32 = FREQ_SHIFT + 8;
pub const LOC_MASK: u64 = (1 << FREQ_SHIFT) - 1;
/// The slot's fetched bit (see the module docs).
pub const FETCHED: u64 = 1 << (FREQ_SHIFT + 7);
/// The largest frequency count.
pub const MAX_FREQ: u8 = 127;
/// Largest segment id a slot can hold.
pub const MAX_SEGMENTS: usize = 1 << SEG_BITS;

/// Where an item lies: segment id and byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub seg: u32,
    pub offset: u32,
}

impl Loc {
    #[inline]
    pub fn bits(self) -> u64 {
        (u64::from(self.seg) << OFFSET_BITS) | u64::from(self.offset)
    }
}

/// Whether a read raises the frequency counter of `value`: always while it is small, then with
/// falling probability (`coin` is a cheap random number).
#[inline]
pub fn freq_due(value: u64, coin: u64) -> bool {
    let f = slot_freq(value);
    f != MAX_FREQ && (f < 16 || coin & ((f as u64).next_power_of_two() - 1) == 0)
}

/// The 12-bit tag of a hash, never 0 (0 marks an empty slot).
#[inline]
pub fn tag_of(hash: u64) -> u64 {
    let t = hash >> 52;
    if t == 0 {
        1
    } else {
        t
    }
}

#[inline]
pub fn pack(tag: u64, freq: u8, loc: Loc) -> u64 {
    (tag << TAG_SHIFT) | (u64::from(freq.min(MAX_FREQ)) << FREQ_SHIFT) | loc.bits()
}
#[inline]
pub fn slot_tag(v: u64) -> u64 {
    v >> TAG_SHIFT
}
#[inline]
pub fn slot_freq(v: u64) -> u8 {
    (v >> FREQ_SHIFT) as u8 & MAX_FREQ
}
#[inline]
pub fn slot_loc(v: u64) -> Loc {
    Loc { seg: ((v >> OFFSET_BITS) & ((1 << SEG_BITS) - 1)) as u32, offset: (v & ((1 << OFFSET_BITS) - 1)) as u32 }
}

/// The info word's lock bit, held by a rewrite in place.
pub const INFO_LOCKED: u64 = 1 << 24;

/// Info word `v` with its version bumped, the time stamped (low 16 bits of `now`), and unlocked.
#[inline]
pub fn touched(v: u64, now: u32) -> u64 {
    let cas = info_cas(v).wrapping_add(1);
    (u64::from(cas) << 32) | (u64::from(now & 0xffff) << 8) | (v & 0xff)
}

/// Bucket info fields.
#[inline]
pub fn info_chain_len(info: u64) -> usize {
    (info & 0xff) as usize
}
#[inline]
pub fn info_cas(info: u64) -> u32 {
    (info >> 32) as u32
}

/// The summary bit of a tag.
#[inline]
pub fn summary_bit(tag: u64) -> u8 {
    1 << (tag & 7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_packing_round_trips() {
        let loc = Loc { seg: (1 << 22) - 1, offset: (1 << 22) - 3 };
        let v = pack(0xabc, 60, loc);
        assert_eq!((slot_tag(v), slot_freq(v), slot_loc(v)), (0xabc, 60, loc));
        let v = v | FETCHED;
        assert_eq!((slot_tag(v), slot_freq(v), slot_loc(v)), (0xabc, 60, loc));
        assert_eq!(slot_freq(pack(1, 200, loc)), MAX_FREQ);
        assert_eq!(tag_of(0), 1);
        assert_eq!(tag_of(u64::MAX), 0xfff);
    }
}
