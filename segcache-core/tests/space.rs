//! A persistence file on a filesystem too small for the heap: the open fails with
//! `Error::NoSpace` (never a `SIGBUS` later), a file whose blocks were reserved reopens on a
//! full filesystem, and `sync` writes the heap to the file.
//!
//! The small filesystem is a tmpfs these tests mount, which needs root; without it they say so
//! and pass without checking.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use segcache_core::{Builder, Error};

/// A tmpfs of `mib` MiB, unmounted (and its directory removed) on drop.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(name: &str, mib: u32) -> Option<SmallFs> {
        let dir = std::env::temp_dir().join(format!("segcache-space-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("space: cannot mount a tmpfs (not root?): {name} not checked");
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(SmallFs(dir))
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn expect_no_space(r: Result<impl Sized, Error>, path: &Path, heap: u64) {
    match r {
        Err(Error::NoSpace { path: p, needed, free }) => {
            assert_eq!(p, path);
            assert!(needed > heap, "needed {needed}: the heap alone is {heap}");
            assert!(free < needed, "free {free}, needed {needed}");
            let msg = Error::NoSpace { path: p, needed, free }.to_string();
            assert!(msg.contains(&path.display().to_string()) && msg.contains(&needed.to_string()), "{msg}");
        }
        Err(e) => panic!("expected NoSpace, got {e}"),
        Ok(_) => panic!("a heap of {heap} bytes opened on a filesystem too small for it"),
    }
}

#[test]
fn a_heap_larger_than_the_filesystem_is_refused_at_open() {
    let Some(fs) = SmallFs::mount("refused", 20) else { return };
    let path = fs.path("cache.seg");
    let heap = 64u64 << 20;
    expect_no_space(Builder::new().heap_size(heap as usize).path(&path).build(), &path, heap);
    // Nothing reserved is left behind: the file is empty, and a heap that fits opens over it.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    expect_no_space(Builder::new().heap_size(heap as usize).path(&path).build_shared(), &path, heap);
    expect_no_space(
        Builder::new().heap_size(heap as usize).path(&path).multi_process(true).build_shared(),
        &path,
        heap,
    );
    let cache = Builder::new().heap_size(8 << 20).path(&path).build_shared().unwrap();
    // Writing every page of the heap cannot fault: its blocks are the file's.
    let value = vec![b'v'; 100_000];
    for i in 0..200u32 {
        cache.set(format!("k{i}").as_bytes(), &value, 0, Duration::ZERO).unwrap();
    }
    assert!(cache.get(b"k199").is_some());
}

#[test]
fn a_reserved_file_reopens_on_a_full_filesystem() {
    let Some(fs) = SmallFs::mount("full", 24) else { return };
    let path = fs.path("cache.seg");
    let cache = Builder::new().heap_size(8 << 20).path(&path).build_shared().unwrap();
    cache.set(b"kept", b"value", 0, Duration::ZERO).unwrap();
    cache.close().unwrap();
    // Fill what is left of the filesystem.
    let filler = std::fs::File::create(fs.path("filler")).unwrap();
    let mut bytes = 0u64;
    let chunk = vec![1u8; 1 << 20];
    use std::io::Write;
    let mut w = std::io::BufWriter::new(filler);
    while w.write_all(&chunk).and_then(|_| w.flush()).is_ok() {
        bytes += chunk.len() as u64;
    }
    assert!(bytes > 0);
    let cache = Builder::new().heap_size(8 << 20).path(&path).build_shared().unwrap();
    assert_eq!(cache.get(b"kept").unwrap().value, b"value");
    let value = vec![b'v'; 100_000];
    for i in 0..200u32 {
        cache.set(format!("k{i}").as_bytes(), &value, 0, Duration::ZERO).unwrap();
    }
}

#[test]
fn a_sparse_file_that_cannot_be_filled_in_is_refused_and_kept() {
    let Some(fs) = SmallFs::mount("sparse", 20) else { return };
    // A clean file made elsewhere, with the holes of a heap mostly unwritten.
    let elsewhere = std::env::temp_dir().join(format!("segcache-space-{}-made.seg", std::process::id()));
    let heap = 64u64 << 20;
    let cache = Builder::new().heap_size(heap as usize).path(&elsewhere).build().unwrap();
    drop(cache);
    let path = fs.path("cache.seg");
    let copied = Command::new("cp").arg("--sparse=always").arg(&elsewhere).arg(&path).status().unwrap();
    std::fs::remove_file(&elsewhere).unwrap();
    assert!(copied.success());
    let before = std::fs::read(&path).unwrap();
    expect_no_space(Builder::new().heap_size(heap as usize).path(&path).build(), &path, heap);
    assert!(std::fs::read(&path).unwrap() == before, "a refused file must be left as it was");
}

#[test]
fn sync_writes_the_heap_to_the_file() {
    let dir = std::env::temp_dir().join(format!("segcache-space-{}-sync", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cache.seg");
    let value = b"a value that only the heap holds";
    let mut single = Builder::new().heap_size(4 << 20).path(&path).build().unwrap();
    single.set(b"k", value, 0, Duration::ZERO).unwrap();
    single.sync().unwrap();
    let file = std::fs::read(&path).unwrap();
    assert!(file.windows(value.len()).any(|w| w == value));
    drop(single);
    let path = dir.join("shared.seg");
    let shared = Builder::new().heap_size(8 << 20).path(&path).build_shared().unwrap();
    shared.set(b"k2", b"another value", 0, Duration::ZERO).unwrap();
    shared.sync().unwrap();
    let file = std::fs::read(&path).unwrap();
    assert!(file.windows(13).any(|w| w == b"another value"));
    drop(shared);
    std::fs::remove_dir_all(&dir).unwrap();
    // Without a file there is nothing to write.
    Builder::new().heap_size(4 << 20).build().unwrap().sync().unwrap();
    Builder::new().heap_size(8 << 20).build_shared().unwrap().sync().unwrap();
}
