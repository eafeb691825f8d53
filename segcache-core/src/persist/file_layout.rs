//! The layout a persistence file was made with, read from its header without opening the cache.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::persist::header::{Header, HEADER_LEN};

/// The settings that fix a persistence file's layout, as its header records them. A cache opens
/// the file only with these settings; reading them first lets a program keep what it did not
/// set explicitly (a default that changed, a shard count chosen from another machine's cores)
/// instead of refusing the file.
///
/// ```
/// use segcache_core::{Builder, FileLayout};
///
/// let path = std::env::temp_dir().join(format!("segcache-file-layout-{}.seg", std::process::id()));
/// let _ = std::fs::remove_file(&path);
/// assert_eq!(FileLayout::read(&path)?, None); // no file yet
/// drop(Builder::new().heap_size(8 << 20).segment_size(256 << 10).shards(2).path(&path).build_shared()?);
/// let found = FileLayout::read(&path)?.unwrap();
/// assert_eq!((found.heap_size, found.segment_size, found.shards), (8 << 20, 256 << 10, 2));
/// // Opened again with the file's own layout (the hash power too):
/// let cache = Builder::new()
///     .heap_size(found.heap_size)
///     .segment_size(found.segment_size)
///     .shards(found.shards)
///     .hash_power(found.hash_power)
///     .path(&path)
///     .build_shared()?;
/// # drop(cache);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), segcache_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileLayout {
    /// `Builder::heap_size`: every shard's segments together.
    pub heap_size: usize,
    /// `Builder::segment_size`.
    pub segment_size: usize,
    /// `Builder::shards`.
    pub shards: usize,
    /// `Builder::hash_power`: log2 of each shard's hash buckets.
    pub hash_power: u8,
}

impl FileLayout {
    /// The file layout of a cache laid out as `layout`.
    pub(crate) fn of(layout: &Layout) -> FileLayout {
        let g = layout.geometry;
        FileLayout {
            heap_size: g.segments * g.segment_size * layout.shards,
            segment_size: g.segment_size,
            shards: layout.shards,
            hash_power: g.hash_power,
        }
    }

    /// Whether a cache built with `heap_size` bytes of heap, and this file's segment size and
    /// shard count, has this file's heap (each shard gets the whole segments that fit its share):
    /// the one condition on the heap size under which the file opens.
    ///
    /// ```
    /// # use segcache_core::{Builder, FileLayout};
    /// # let path = std::env::temp_dir().join(format!("segcache-holds-{}.seg", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// drop(Builder::new().heap_size(8 << 20).segment_size(1 << 20).shards(2).path(&path).build_shared()?);
    /// let made = FileLayout::read(&path)?.unwrap();
    /// assert!(made.has_heap_of((8 << 20) + (1 << 20))); // half a segment per shard more: unused
    /// assert!(!made.has_heap_of(10 << 20));
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn has_heap_of(&self, heap_size: usize) -> bool {
        let segments = crate::layout::segments_per_shard(heap_size, self.shards, self.segment_size);
        segments * self.segment_size * self.shards == self.heap_size
    }

    /// The layout of the file at `path`; `None` if there is no file, or one that holds no cache
    /// yet (empty, or zero-filled by a process that died while creating it). A file that is not a
    /// readable segcache file of this format version is [`Error::BadFile`].
    ///
    /// ```
    /// use segcache_core::{Error, FileLayout};
    ///
    /// let path = std::env::temp_dir().join(format!("segcache-read-layout-{}.seg", std::process::id()));
    /// let _ = std::fs::remove_file(&path);
    /// assert_eq!(FileLayout::read(&path)?, None);
    /// std::fs::write(&path, b"something else")?;
    /// assert!(matches!(FileLayout::read(&path), Err(Error::BadFile { .. })));
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read(path: impl AsRef<Path>) -> Result<Option<FileLayout>> {
        let path = path.as_ref();
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        let mut file = match std::fs::File::open(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            opened => opened.map_err(io)?,
        };
        let mut head = Vec::with_capacity(HEADER_LEN);
        file.by_ref().take(HEADER_LEN as u64).read_to_end(&mut head).map_err(io)?;
        if head.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let h = Header::decode(&head).map_err(|reason| Error::BadFile { path: path.to_path_buf(), reason })?;
        let size = |v: u64| usize::try_from(v).ok();
        let layout = (|| {
            let (segment_size, segments) = (size(h.segment_size)?, size(h.segments_per_shard)?);
            let shards = usize::try_from(h.shards).ok()?;
            (segment_size > 0 && segments > 0 && shards > 0).then_some(())?;
            Some(FileLayout {
                heap_size: segment_size.checked_mul(segments)?.checked_mul(shards)?,
                segment_size,
                shards,
                hash_power: u8::try_from(h.hash_power).ok()?,
            })
        })();
        layout.map(Some).ok_or_else(|| Error::BadFile {
            path: path.to_path_buf(),
            reason: "header fields out of range (corrupt header)".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::FileLayout;
    use crate::builder::Builder;
    use crate::error::Error;
    use crate::persist::header::Header;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("segcache-file-layout-{name}-{}.seg", std::process::id()))
    }

    #[test]
    fn a_file_tells_the_layout_it_was_made_with() {
        let path = temp("made");
        let _ = std::fs::remove_file(&path);
        let built = Builder::new().heap_size(16 << 20).segment_size(512 << 10).shards(4).hash_power(9);
        drop(built.path(&path).build_shared().unwrap());
        let l = FileLayout::read(&path).unwrap().unwrap();
        assert_eq!((l.heap_size, l.segment_size, l.shards, l.hash_power), (16 << 20, 512 << 10, 4, 9));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn no_file_or_an_unwritten_one_has_no_layout() {
        let path = temp("none");
        let _ = std::fs::remove_file(&path);
        assert_eq!(FileLayout::read(&path).unwrap(), None);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(FileLayout::read(&path).unwrap(), None);
        std::fs::write(&path, vec![0u8; 10_000]).unwrap();
        assert_eq!(FileLayout::read(&path).unwrap(), None);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_foreign_or_truncated_file_is_bad() {
        let path = temp("bad");
        for content in [&b"not a segcache file at all"[..], b"SEGCACHE\x07\x00"] {
            std::fs::write(&path, content).unwrap();
            assert!(matches!(FileLayout::read(&path), Err(Error::BadFile { .. })), "{content:?}");
        }
        std::fs::remove_file(&path).unwrap();
    }

    /// A header whose checksum holds but whose fields cannot describe a heap.
    #[test]
    fn a_header_of_no_heap_is_bad() {
        let path = temp("empty-layout");
        let layout = crate::layout::Layout {
            geometry: crate::layout::Geometry { hash_power: 6, segment_size: 64 << 10, segments: 4 },
            shards: 2,
        };
        let mut h = Header::for_layout(&layout);
        h.shards = 0;
        std::fs::write(&path, h.encode()).unwrap();
        assert!(matches!(FileLayout::read(&path), Err(Error::BadFile { .. })));
        std::fs::remove_file(&path).unwrap();
    }
}
