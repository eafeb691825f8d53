//! The tier's file: its metadata area (`meta.rs`), then the flash segments, each shard a slice of
//! whole ones. Whole segment images go to the tier's writer (`writer.rs`), which writes each with
//! one positioned write, then the record that says the segment is in use; an item comes out with a
//! positioned read of the blocks that cover it (or from its image, while that is still queued),
//! checked (`entry::check`) before anything is served from it; a segment's record is written
//! whole with one positioned write.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::tier::entry::{self, EntryMeta, BLOCK};
use crate::tier::image::Image;
use crate::tier::meta::{self, TierHeader, HEADER_LEN, RECORD_LEN};
use crate::tier::ring::FlashSeg;
use crate::tier::writer::{Job, State, Writer};

/// One shard's slice of the tier file: `segments` flash segments of `segment_size` bytes from
/// byte `base`, and their records in the metadata area.
#[derive(Debug)]
pub(crate) struct TierFile {
    file: Arc<File>,
    path: Arc<Path>,
    pub(crate) writer: Arc<Writer>,
    /// This slice's images handed to the writer and not yet known to be written, oldest first.
    pending: Mutex<Vec<Arc<Job>>>,
    shard: usize,
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
    /// Opens (or creates) the tier file at `path`, its metadata area then `bytes` of flash
    /// segments, and cuts those into `shards` equal slices of whole `segment_size` segments
    /// (`bytes` was checked to divide so). Also the header found, if the file was already of this
    /// length and holds one that checks and names these sizes: only then may its records be
    /// trusted (a file of another length, or none, is made this length and holds none). One
    /// writer, whose queue holds `queue` bytes, writes every slice's images.
    pub(crate) fn open(
        path: &Path,
        bytes: u64,
        segment_size: usize,
        shards: usize,
        queue: usize,
    ) -> Result<(Vec<TierFile>, Option<TierHeader>)> {
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io)?;
        let per = bytes / segment_size as u64 / shards as u64;
        let area = meta::area_len(shards, per as usize);
        let mut header = None;
        if file.metadata().map_err(io)?.len() == area + bytes {
            let mut b = [0u8; HEADER_LEN];
            // A header that cannot be read is none: the tier starts cold.
            if file.read_exact_at(&mut b, 0).is_ok() {
                header = TierHeader::decode(&b).filter(|h| {
                    (h.segment_size, h.segments, h.shards) == (segment_size as u64, per as u32, shards as u32)
                });
            }
        } else {
            let mut b = [0u8; HEADER_LEN];
            if file.read_exact_at(&mut b, 0).is_ok() && TierHeader::decode(&b).is_some() {
                // A tier of other sizes: as a heap file of other sizes with `reset_bad_file`, it
                // starts over (`Builder::resize_file` would have moved its items).
                eprintln!(
                    "segcache: warning: {}: tier file of other sizes (expected {} bytes of flash segments); \
                     starting cold",
                    path.display(),
                    bytes
                );
            }
            file.set_len(area + bytes).map_err(io)?;
        }
        let file = Arc::new(file);
        let at: Arc<Path> = Arc::from(path);
        let writer = Arc::new(Writer::spawn(Arc::clone(&file), queue));
        let slices = (0..shards as u64)
            .map(|i| TierFile {
                file: Arc::clone(&file),
                path: Arc::clone(&at),
                writer: Arc::clone(&writer),
                pending: Mutex::new(Vec::new()),
                shard: i as usize,
                base: area + i * per * segment_size as u64,
                segment_size,
                segments: per as u32,
            })
            .collect();
        Ok((slices, header))
    }

    /// Writes the file's header (one for all shards).
    pub(crate) fn write_header(&self, header: &TierHeader) -> std::io::Result<()> {
        self.file.write_all_at(&header.encode(), 0)
    }

    /// The records of this slice's segments, each `None` where it does not check, with one read.
    pub(crate) fn read_records(&self) -> std::io::Result<Vec<Option<FlashSeg>>> {
        let mut buf = vec![0; self.segments as usize * RECORD_LEN];
        self.file.read_exact_at(&mut buf, meta::record_at(self.shard, self.segments as usize, 0))?;
        Ok((0..self.segments).map(|i| meta::decode_record(&buf[i as usize * RECORD_LEN..], self.shard, i)).collect())
    }

    /// Writes the records of all this slice's segments, with one write.
    pub(crate) fn write_records(&self, segs: &[FlashSeg]) -> std::io::Result<()> {
        let bytes: Vec<u8> = (0..).zip(segs).flat_map(|(i, seg)| meta::encode_record(seg, self.shard, i)).collect();
        self.file.write_all_at(&bytes, meta::record_at(self.shard, self.segments as usize, 0))
    }

    /// Writes the record of flash segment `index`.
    pub(crate) fn write_record(&self, index: u32, seg: &FlashSeg) -> std::io::Result<()> {
        debug_assert!(index < self.segments);
        let at = meta::record_at(self.shard, self.segments as usize, index);
        self.file.write_all_at(&meta::encode_record(seg, self.shard, index), at)
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

    /// Whether the writer's queue has no room for `images` more images (the device is behind).
    pub(crate) fn behind(&self, images: usize) -> bool {
        self.writer.behind(images * self.segment_size)
    }

    /// Whether each image is written as it is handed over (see `Writer::inline`).
    pub(crate) fn inline(&self) -> bool {
        self.writer.inline()
    }

    /// Hands `image` to the writer, to be written as its flash segment from its start, then
    /// `seg`, the segment's record once it holds the image. Its entries are served from it until
    /// it is written.
    pub(crate) fn submit(&self, image: Image, seg: &FlashSeg) {
        let index = image.index();
        debug_assert!(index < self.segments && image.bytes().len() <= self.segment_size);
        let at = self.at(index, 0);
        let record =
            (meta::record_at(self.shard, self.segments as usize, index), meta::encode_record(seg, self.shard, index));
        let job = self.writer.submit(&self.file, image, seg.generation, at, record, self.segment_size);
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

    /// Waits until every image handed over (of flash segment `index` only, if given) is written
    /// or failed: after that no record the writer writes can land over a newer one.
    pub(crate) fn settle(&self, index: Option<u32>) {
        let pending: Vec<Arc<Job>> = self.pending.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for job in pending.iter().filter(|job| index.is_none_or(|i| job.image.index() == i)) {
            job.wait();
        }
    }

    /// Writes `image` as its flash segment from its start, then `seg`, its record, at once (not
    /// through the writer): what a sync writes of the image still being filled.
    pub(crate) fn write_now(&self, image: &Image, seg: &FlashSeg) -> Result<()> {
        let io = |source| Error::Io { path: self.path.to_path_buf(), source };
        self.file.write_all_at(image.bytes(), self.at(image.index(), 0)).map_err(io)?;
        self.write_record(image.index(), seg).map_err(io)
    }

    /// Writes what `image` gained since it was last written (see `Image::written`), then `seg`,
    /// its record: the image stays open.
    pub(crate) fn write_tail(&self, image: &Image, seg: &FlashSeg) -> std::io::Result<()> {
        #[cfg(test)]
        if self.writer.failing() {
            return Err(std::io::Error::other("the device fails every write"));
        }
        let from = image.written();
        self.file.write_all_at(&image.bytes()[from..], self.at(image.index(), from))?;
        self.write_record(image.index(), seg)
    }

    /// Writes every image handed over, then the file's data to stable storage.
    pub(crate) fn sync(&self) -> Result<()> {
        self.settle(None);
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

    /// Whether every image handed over is written.
    #[cfg(test)]
    pub(crate) fn all_written(&self) -> bool {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).iter().all(|job| job.state() == State::Written)
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
        let (slices, header) = TierFile::open(&path, 4 * (64 << 10), 64 << 10, 2, 1 << 20).unwrap();
        assert_eq!(header, None, "a new file has no header");
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
        let (slices, _) = TierFile::open(&path, 2 * (64 << 10), 64 << 10, 1, 1 << 20).unwrap();
        let (img, [a, b, _]) = image(5);
        slices[0].write_segment(1, &img).unwrap();
        assert!(slices[0].read_entry(1, b, 5).is_some());
        assert!(slices[0].read_entry(1, b, 6).is_none(), "stale generation");
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        let area = meta::area_len(1, 2);
        file.write_all_at(&[0xff], area + (64 << 10) + u64::from(b) + 2 * BLOCK as u64).unwrap();
        assert!(slices[0].read_entry(1, b, 5).is_none(), "a byte of the record flipped");
        assert!(slices[0].read_entry(1, a, 5).is_some(), "the others are intact");
        assert!(slices[0].read_entry(1, (64 << 10) - 8, 5).is_none(), "a head past the segment");
        drop(slices);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn records_and_the_header_come_back_and_another_size_trusts_no_header() {
        let path = temp("records");
        let (slices, _) = TierFile::open(&path, 4 * (64 << 10), 64 << 10, 2, 1 << 20).unwrap();
        let header = TierHeader { id: 42, segment_size: 64 << 10, segments: 2, shards: 2 };
        slices[0].write_header(&header).unwrap();
        let seg = FlashSeg { generation: 3, seq: 1, expire_at: 0, live: 0, written: 100 };
        slices[1].write_records(&[FlashSeg::default(), seg]).unwrap();
        slices[1].write_record(1, &seg).unwrap();
        drop(slices);
        let (slices, found) = TierFile::open(&path, 4 * (64 << 10), 64 << 10, 2, 1 << 20).unwrap();
        assert_eq!(found, Some(header));
        assert_eq!(slices[1].read_records().unwrap(), vec![Some(FlashSeg::default()), Some(seg)]);
        assert_eq!(slices[0].read_records().unwrap(), vec![None, None]);
        drop(slices);
        assert_eq!(TierFile::open(&path, 4 * (64 << 10), 64 << 10, 1, 1 << 20).unwrap().1, None, "other shards");
        assert_eq!(TierFile::open(&path, 2 * (64 << 10), 64 << 10, 1, 1 << 20).unwrap().1, None, "another length");
        std::fs::remove_file(&path).unwrap();
    }
}
