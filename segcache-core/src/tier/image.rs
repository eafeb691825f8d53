//! The image of the flash segment that evictions are filling: entries go in as evictions meet
//! the items they give up, from one heap segment or several (a merge drops items of each of its
//! sources), and the whole image is written with one positioned write when it is full (see
//! `Segcache::finish_demotion` for when else; without a queue, what each eviction put in is
//! written as it ends). Until then reads of its entries are served from it.

use crate::tier::entry::{self, EntryMeta};

/// An image being filled for flash segment `index`.
#[derive(Debug)]
pub(crate) struct Image {
    index: u32,
    generation: u64,
    capacity: usize,
    bytes: Vec<u8>,
    /// The key hash and offset of each entry: what finds its slot again if the write fails.
    entries: Vec<(u64, u32)>,
    /// The latest expiry of its entries; 0 once one never expires.
    expire_at: Option<u32>,
    /// Entries whose slot went (written or deleted since) while the image was open.
    dropped: u32,
    /// Its first bytes already on file (written while it was open, without a queue): entries
    /// never change once put, so a later write of it starts after them.
    written: usize,
}

impl Image {
    /// An empty image for flash segment `index` in `generation`, of at most `capacity` bytes.
    pub(crate) fn new(index: u32, generation: u64, capacity: usize) -> Image {
        Image {
            index,
            generation,
            capacity,
            bytes: Vec::with_capacity(capacity),
            entries: Vec::new(),
            expire_at: None,
            dropped: 0,
            written: 0,
        }
    }

    /// The flash segment it is for.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// Whether the entry of a `len`-byte record still fits.
    pub(crate) fn fits(&self, len: usize) -> bool {
        entry::start(self.bytes.len(), len) + entry::entry_len(len) <= self.capacity
    }

    /// Appends the entry of `record` (of a key with hash `h`, from a heap segment `meta`
    /// describes); returns its offset. The caller checked that it `fits`.
    pub(crate) fn put(&mut self, record: &[u8], meta: EntryMeta, h: u64) -> u32 {
        debug_assert!(self.fits(record.len()));
        let offset = entry::put(&mut self.bytes, record, meta, self.index, self.generation);
        self.entries.push((h, offset));
        self.expire_at = Some(match self.expire_at {
            None => meta.expire_at,
            Some(0) => 0,
            Some(_) if meta.expire_at == 0 => 0,
            Some(e) => e.max(meta.expire_at),
        });
        offset
    }

    /// The checked entry at `offset`: its head and record (see `entry::check`).
    pub(crate) fn entry(&self, offset: u32) -> Option<(EntryMeta, &[u8])> {
        entry::check(self.bytes.get(offset as usize..)?, self.index, offset, self.generation)
    }

    /// One slot fewer leads into it.
    pub(crate) fn drop_one(&mut self) {
        self.dropped += 1;
    }

    /// Slots that lead into it: its entries, less those dropped.
    pub(crate) fn live(&self) -> u32 {
        (self.entries.len() as u32).saturating_sub(self.dropped)
    }

    /// The bytes to write.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Where its bytes not yet on file start.
    pub(crate) fn written(&self) -> usize {
        self.written
    }

    /// Bytes put since it was last written.
    pub(crate) fn unwritten(&self) -> usize {
        self.bytes.len() - self.written
    }

    /// Its bytes so far are on file.
    pub(crate) fn mark_written(&mut self) {
        self.written = self.bytes.len();
    }

    /// Each entry's key hash and offset, in order.
    pub(crate) fn entries(&self) -> &[(u64, u32)] {
        &self.entries
    }

    /// The latest expiry of its entries (0: one never expires): the segment is gone after it.
    pub(crate) fn expire_at(&self) -> u32 {
        self.expire_at.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: EntryMeta = EntryMeta { cas_base: 1, create_at: 100, expire_at: 500 };

    #[test]
    fn entries_go_in_until_the_capacity_and_check_at_their_offsets() {
        let mut image = Image::new(3, 7, 2 * entry::entry_len(40));
        assert!(image.fits(40));
        let a = image.put(&[1; 40], META, 11);
        let b = image.put(&[2; 40], EntryMeta { expire_at: 900, ..META }, 22);
        assert!(!image.fits(1));
        assert_eq!(image.entries(), [(11, a), (22, b)]);
        assert_eq!(image.bytes().len(), 2 * entry::entry_len(40));
        assert_eq!(
            entry::check(&image.bytes()[b as usize..], 3, b, 7).map(|(m, r)| (m.expire_at, r.len())),
            Some((900, 40))
        );
        assert_eq!(image.expire_at(), 900, "the latest expiry");
    }

    #[test]
    fn one_entry_that_never_expires_keeps_the_segment() {
        let mut image = Image::new(0, 1, 4096);
        image.put(b"r", META, 1);
        image.put(b"r", EntryMeta { expire_at: 0, ..META }, 2);
        image.put(b"r", META, 3);
        assert_eq!(image.expire_at(), 0);
        assert_eq!(Image::new(0, 1, 4096).expire_at(), 0, "an empty image claims no expiry");
    }
}
