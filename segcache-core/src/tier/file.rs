//! The tier's file: one file for all shards, each shard a slice of whole flash segments. Whole
//! segment images go to the tier's writer (`writer.rs`), which writes each with one positioned
//! write; an item comes out with a positioned read of the blocks that cover it (or from its image,
//! while that is still queued), checked (`entry::check`) before anything is served from it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::tier::entry::{self, EntryMeta, BLOCK};
use crate::tier::image::Image;
use crate::tier::writer::{Job, State, Writer};

/// One shard's slice of the tier file: `segments` flash segments of `segment_size` bytes from
/// byte `base`.
#[derive(Debug)]
pub(crate) struct TierFile {
    file: Arc<File>,
    path: Arc<Path>,
    pub(crate) writer: Arc<Writer>,
    /// This slice's images handed to the writer and not yet known to be written, oldest first.
    pending: Mutex<Vec<Arc<Job>>>,
    base: u64,
    segment_size: usize,
    segments: u32,
}

/// An entry read back and checked: its head, and its record at `bytes[start..start + len]`.
#[derive(Debug)]
pub(crate) struct Read {
    pub(crate) meta: EntryMeta,
    pub(crate) bytes: Vec<u8>,
    pub(crate) start: usize,
    pub(crate) len: usize,
}

impl TierFile {
    /// Opens (or creates) the tier file at `path`, sized to `bytes`, and cuts it into `shards`
    /// equal slices of whole `segment_size` segments (`bytes` was checked to divide so), written
    /// by one writer whose queue holds `queue` bytes.
    pub(crate) fn open(
        path: &Path,
        bytes: u64,
        segment_size: usize,
        shards: usize,
        queue: usize,
    ) -> Result<Vec<TierFile>> {
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io)?;
        if file.metadata().map_err(io)?.len() != bytes {
            file.set_len(bytes).map_err(io)?;
        }
        let file = Arc::new(file);
        let at: Arc<Path> = Arc::from(path);
        let writer = Arc::new(Writer::spawn(Arc::clone(&file), queue));
        let per = bytes / segment_size as u64 / shards as u64;
        Ok((0..shards as u64)
            .map(|i| TierFile {
                file: Arc::clone(&file),
                path: Arc::clone(&at),
                writer: Arc::clone(&writer),
                pending: Mutex::new(Vec::new()),
                base: i * per * segment_size as u64,
                segment_size,
                segments: per as u32,
            })
            .collect())
    }

    /// The flash segments of this slice.
    pub(crate) fn segments(&self) -> u32 {
        self.segments
    }

    pub(crate) fn segment_size(&self) -> usize {
        self.segment_size
    }

    fn at(&self, index: u32, offset: usize) -> u64 {
        self.base + u64::from(index) * self.segment_size as u64 + offset as u64
    }

    /// Reserves the writer's room for one image; `false` when its queue is full.
    pub(crate) fn reserve(&self) -> bool {
        self.writer.reserve(self.segment_size)
    }

    /// Gives back a reservation whose image took nothing.
    pub(crate) fn unreserve(&self) {
        self.writer.unreserve(self.segment_size)
    }

    /// Hands `image` (of `generation`, made under a reservation) to the writer, to be written
    /// as its flash segment from its start. Its entries are served from it until it is.
    pub(crate) fn submit(&self, image: Image, generation: u64) {
        debug_assert!(image.index() < self.segments && image.bytes().len() <= self.segment_size);
        let at = self.at(image.index(), 0);
        let job = self.writer.submit(&self.file, image, generation, at, self.segment_size);
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).push(job);
    }

    /// Forgets the images written since the last call and returns those whose write failed:
    /// their slots lead nowhere.
    pub(crate) fn reap(&self) -> Vec<Arc<Job>> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let mut failed = Vec::new();
        pending.retain(|job| match job.state() {
            State::Queued => true,
            State::Written => false,
            State::Failed => {
                failed.push(Arc::clone(job));
                false
            }
        });
        failed
    }

    /// Waits until every image handed over is written (or failed).
    pub(crate) fn settle(&self) {
        let pending: Vec<Arc<Job>> = self.pending.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for job in pending {
            job.wait();
        }
    }

    /// Writes every image handed over, then the file's data to stable storage.
    pub(crate) fn sync(&self) -> Result<()> {
        self.settle();
        self.file.sync_data().map_err(|source| Error::Io { path: self.path.to_path_buf(), source })
    }

    /// The image of flash segment `index` in `generation` while it is still queued.
    fn queued(&self, index: u32, generation: u64) -> Option<Arc<Job>> {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending
            .iter()
            .rev()
            .find(|job| job.image.index() == index && job.generation == generation && job.state() != State::Written)
            .cloned()
    }

    /// Writes `image` (at most a segment) as flash segment `index`, from its start, at once.
    #[cfg(test)]
    pub(crate) fn write_segment(&self, index: u32, image: &[u8]) -> std::io::Result<()> {
        debug_assert!(index < self.segments && image.len() <= self.segment_size);
        self.file.write_all_at(image, self.at(index, 0))
    }

    /// The first `len` bytes of flash segment `index` in `generation` (`len` rounded up to whole
    /// blocks, within the segment), with one read, or from its image while that is queued.
    pub(crate) fn read_segment(&self, index: u32, generation: u64, len: usize) -> std::io::Result<Vec<u8>> {
        if let Some(job) = self.queued(index, generation) {
            return Ok(job.image.bytes().to_vec());
        }
        let len = len.next_multiple_of(BLOCK).min(self.segment_size);
        let mut buf = vec![0; len];
        self.file.read_exact_at(&mut buf, self.at(index, 0))?;
        Ok(buf)
    }

    /// The entry at `offset` of flash segment `index`, checked against `generation`: the blocks
    /// that cover its head first, then, for a longer entry, the blocks that cover the rest. `None`
    /// when a read fails or the check does.
    pub(crate) fn read_entry(&self, index: u32, offset: u32, generation: u64) -> Option<Read> {
        let offset = offset as usize;
        if index >= self.segments || offset + entry::HEAD > self.segment_size {
            return None;
        }
        if let Some(job) = self.queued(index, generation) {
            let (meta, record) = entry::check(job.image.bytes().get(offset..)?, index, offset as u32, generation)?;
            return Some(Read { meta, bytes: record.to_vec(), start: 0, len: record.len() });
        }
        let first = offset - offset % BLOCK;
        let mut bytes = vec![0; (offset + entry::HEAD).next_multiple_of(BLOCK) - first];
        self.file.read_exact_at(&mut bytes, self.at(index, first)).ok()?;
        let end = offset.checked_add(entry::declared_len(&bytes[offset - first..])?)?;
        if end > self.segment_size {
            return None;
        }
        let have = first + bytes.len();
        if end > have {
            let more = end.next_multiple_of(BLOCK).min(self.segment_size) - have;
            bytes.resize(bytes.len() + more, 0);
            let at = self.at(index, have);
            self.file.read_exact_at(&mut bytes[have - first..], at).ok()?;
        }
        let start = offset - first;
        let (meta, record) = entry::check(&bytes[start..], index, offset as u32, generation)?;
        let len = record.len();
        Some(Read { meta, bytes, start: start + entry::HEAD, len })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    const META: EntryMeta = EntryMeta { cas_base: 1, create_at: 2, expire_at: 3 };

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("segcache-tier-{}-{name}", std::process::id()))
    }

    /// An image of a small entry, a long one that spans blocks, and one that ends the first block.
    fn image(generation: u64) -> (Vec<u8>, [u32; 3]) {
        let mut image = Vec::new();
        let a = entry::put(&mut image, b"small", META, 1, generation);
        let b = entry::put(&mut image, &vec![7; 3 * BLOCK], META, 1, generation);
        let c = entry::put(&mut image, &[9; 100], META, 1, generation);
        (image, [a, b, c])
    }

    #[test]
    fn entries_written_whole_read_back_one_at_a_time() {
        let path = temp("round-trip");
        let slices = TierFile::open(&path, 4 * (64 << 10), 64 << 10, 2, 1 << 20).unwrap();
        assert_eq!((slices[0].segments(), slices[1].segments()), (2, 2));
        let (img, [a, b, c]) = image(5);
        slices[1].write_segment(1, &img).unwrap();
        let read = |at| slices[1].read_entry(1, at, 5).map(|r| r.bytes[r.start..r.start + r.len].to_vec());
        assert_eq!(read(a).unwrap(), b"small");
        assert_eq!(read(b).unwrap(), vec![7; 3 * BLOCK]);
        assert_eq!(read(c).unwrap(), vec![9; 100]);
        assert!(slices[0].read_entry(1, a, 5).is_none(), "another shard's slice holds nothing there");
        assert_eq!(&slices[1].read_segment(1, 5, img.len()).unwrap()[..img.len()], &img[..]);
        drop(slices);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_corrupted_byte_or_a_stale_generation_is_no_entry() {
        let path = temp("corrupt");
        let slices = TierFile::open(&path, 2 * (64 << 10), 64 << 10, 1, 1 << 20).unwrap();
        let (img, [a, b, _]) = image(5);
        slices[0].write_segment(1, &img).unwrap();
        assert!(slices[0].read_entry(1, b, 5).is_some());
        assert!(slices[0].read_entry(1, b, 6).is_none(), "stale generation");
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0xff], (64 << 10) + u64::from(b) + 2 * BLOCK as u64).unwrap();
        assert!(slices[0].read_entry(1, b, 5).is_none(), "a byte of the record flipped");
        assert!(slices[0].read_entry(1, a, 5).is_some(), "the others are intact");
        assert!(slices[0].read_entry(1, (64 << 10) - 8, 5).is_none(), "a head past the segment");
        drop(slices);
        std::fs::remove_file(&path).unwrap();
    }
}
