//! The segment-id space of a shard with a tier: ids below the heap's segment count name DRAM
//! segments, the next `flash` ids name flash segments. A slot's 22 segment bits hold either, so no
//! slot bit changes meaning; this is the one place that maps between them.

/// The id ranges of one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ids {
    dram: u32,
    flash: u32,
}

impl Ids {
    pub(crate) fn new(dram: u32, flash: u32) -> Ids {
        Ids { dram, flash }
    }

    /// The flash segment that slot segment id `seg` names, if it names one.
    #[inline]
    pub(crate) fn flash_index(self, seg: u32) -> Option<u32> {
        seg.checked_sub(self.dram).filter(|&i| i < self.flash)
    }

    /// The slot segment id of flash segment `index`.
    #[inline]
    pub(crate) fn seg_id(self, index: u32) -> u32 {
        self.dram + index
    }

    /// Whether the two ranges fit in a slot's segment bits.
    pub(crate) fn fit(dram: usize, flash: usize) -> bool {
        dram + flash <= crate::hashtable::slot::MAX_SEGMENTS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_both_ways_and_nothing_else_is_flash() {
        let ids = Ids::new(16, 4);
        assert_eq!(ids.flash_index(15), None);
        assert_eq!(ids.flash_index(16), Some(0));
        assert_eq!(ids.flash_index(19), Some(3));
        assert_eq!(ids.flash_index(20), None);
        assert_eq!(ids.seg_id(3), 19);
        assert!(Ids::fit(1 << 21, 1 << 21) && !Ids::fit(1 << 21, (1 << 21) + 1));
    }
}
