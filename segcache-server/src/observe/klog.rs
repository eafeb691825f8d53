//! The command log (Pelikan's klog): one request in N, a line each, written to a file by a
//! background thread. Workers hand lines to it through bounded queues of their own and never
//! wait: a line that finds its queue full is dropped and counted. The file is rotated by size
//! (`FILE` becomes `FILE.1`, `FILE.1` becomes `FILE.2`, ... up to [`KEEP`] old files).
//!
//! A line, as Pelikan's (with the time in RFC 3339 UTC):
//! `PEER - [TIME] "REQUEST LINE" STATUS REPLY_BYTES`, where STATUS is the reply's first word
//! (`VALUE`, `END`, `STORED`, `NOT_FOUND`, `HD`, ... or `-` for none) and REPLY_BYTES its size.
//!
//! A file that cannot be written (a full disk) fails every line: the warning that says so is
//! rate-limited (one a second, naming how many were held back), so the server's own log does not
//! grow with the traffic.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Lines each worker's queue holds.
pub const QUEUE: usize = 4096;
/// Old files kept by rotation.
pub const KEEP: usize = 2;
/// How long written lines may wait in the writer's buffer.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// The writer's nap when every queue is empty.
const IDLE: Duration = Duration::from_millis(5);
/// The longest request text logged.
pub const MAX_REQUEST: usize = 1024;

pub use crate::config::KlogSettings;
use crate::ratelimit::{suppressed_note, RateLimit};

/// Counters of the command log.
#[derive(Debug, Default)]
pub struct KlogStats {
    /// Lines written to the file.
    pub logged: AtomicU64,
    /// Lines dropped because a worker's queue was full.
    pub dropped: AtomicU64,
    /// Rotations done.
    pub rotations: AtomicU64,
}

/// A worker's end of the log.
#[derive(Debug)]
pub struct KlogSender {
    tx: SyncSender<Vec<u8>>,
}

impl KlogSender {
    /// Queues `line` unless the queue is full (then it is counted as dropped).
    pub fn send(&self, line: Vec<u8>, stats: &KlogStats) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(line) {
            stats.dropped.fetch_add(1, Relaxed);
        }
    }
}

/// The writer thread and its counters.
#[derive(Debug)]
pub struct Klog {
    pub settings: KlogSettings,
    pub stats: Arc<KlogStats>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Klog {
    /// Opens the file and starts the writer; returns one sender per worker.
    pub fn start(settings: KlogSettings, workers: usize) -> io::Result<(Klog, Vec<KlogSender>)> {
        let file = open(&settings.path)?;
        let size = file.metadata()?.len();
        let (mut senders, mut receivers) = (Vec::with_capacity(workers), Vec::with_capacity(workers));
        for _ in 0..workers {
            let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
            senders.push(KlogSender { tx });
            receivers.push(rx);
        }
        let stats = Arc::new(KlogStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut w = Writer {
            path: settings.path.clone(),
            max_bytes: settings.max_bytes,
            out: BufWriter::with_capacity(64 << 10, file),
            size,
            stats: stats.clone(),
            failing: RateLimit::per_second(),
        };
        let (stop_w, rx) = (stop.clone(), receivers);
        let thread = std::thread::Builder::new().name("klog".into()).spawn(move || w.run(&rx, &stop_w))?;
        let klog = Klog { settings, stats, stop, thread: Mutex::new(Some(thread)) };
        Ok((klog, senders))
    }

    /// Writes what the queues hold, then stops the writer (after the workers have stopped).
    pub fn finish(&self) {
        self.stop.store(true, Relaxed);
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// `PATH.n`.
fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

struct Writer {
    path: PathBuf,
    max_bytes: u64,
    out: BufWriter<File>,
    size: u64,
    stats: Arc<KlogStats>,
    /// Write failures: one warning a second.
    failing: RateLimit,
}

impl Writer {
    fn run(&mut self, queues: &[Receiver<Vec<u8>>], stop: &AtomicBool) {
        let mut last_flush = Instant::now();
        loop {
            // Looked at before draining: once it is seen set, one more pass empties the queues.
            let stopping = stop.load(Relaxed);
            let mut got = false;
            for rx in queues {
                while let Ok(line) = rx.try_recv() {
                    got = true;
                    if let Err(e) = self.write(&line) {
                        self.failed(&e);
                    }
                }
            }
            if stopping {
                break;
            }
            if got && last_flush.elapsed() < FLUSH_EVERY {
                continue;
            }
            if let Err(e) = self.out.flush() {
                self.failed(&e);
            }
            if let Some(n) = self.failing.overdue() {
                log::warn!("klog: {n} more failed writes to {} suppressed", self.path.display());
            }
            last_flush = Instant::now();
            if !got {
                std::thread::sleep(IDLE);
            }
        }
        if let Err(e) = self.out.flush() {
            self.failed(&e);
        }
        let n = self.failing.take_suppressed();
        if n > 0 {
            log::warn!("klog: {n} more failed writes to {} suppressed", self.path.display());
        }
    }

    /// A line or a flush could not be written: a warning, unless one went out within the second.
    fn failed(&self, e: &io::Error) {
        if let Some(n) = self.failing.check() {
            log::warn!("klog: cannot write {}: {e}{}", self.path.display(), suppressed_note(n));
        }
    }

    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.out.write_all(line)?;
        self.size += line.len() as u64;
        self.stats.logged.fetch_add(1, Relaxed);
        Ok(())
    }

    /// `PATH` → `PATH.1` → ... → `PATH.KEEP` (dropped past it), then a new `PATH`.
    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush()?;
        for n in (1..KEEP).rev() {
            let from = numbered(&self.path, n);
            if from.exists() {
                std::fs::rename(&from, numbered(&self.path, n + 1))?;
            }
        }
        std::fs::rename(&self.path, numbered(&self.path, 1))?;
        self.out = BufWriter::with_capacity(64 << 10, open(&self.path)?);
        self.size = 0;
        self.stats.rotations.fetch_add(1, Relaxed);
        Ok(())
    }
}

/// Appends one log line for a request to `line`: `peer - [time] "request" status bytes`.
/// `request` is the request line as received (or a rendering of a binary request); `reply` is
/// what the request appended to the output.
pub fn format_line(line: &mut Vec<u8>, peer: &str, time: &str, request: &[u8], reply: &[u8]) {
    line.extend_from_slice(peer.as_bytes());
    line.extend_from_slice(b" - [");
    line.extend_from_slice(time.as_bytes());
    line.extend_from_slice(b"] \"");
    let request = request.strip_suffix(b"\n").unwrap_or(request);
    let request = request.strip_suffix(b"\r").unwrap_or(request);
    for &b in &request[..request.len().min(MAX_REQUEST)] {
        match b {
            b'"' | b'\\' => line.extend_from_slice(&[b'\\', b]),
            0x20..=0x7e => line.push(b),
            _ => line.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    line.extend_from_slice(b"\" ");
    let word = reply.iter().position(|&b| b == b' ' || b == b'\r' || b == b'\n').map_or(reply, |i| &reply[..i]);
    if word.is_empty() || !word.iter().all(u8::is_ascii_graphic) {
        line.push(b'-');
    } else {
        line.extend_from_slice(word);
    }
    line.extend_from_slice(format!(" {}\n", reply.len()).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_who_when_what_and_how_it_went() {
        let mut l = Vec::new();
        format_line(&mut l, "127.0.0.1:5000", "T", b"get a\"b\r\n", b"VALUE a\"b 0 1\r\nx\r\nEND\r\n");
        assert_eq!(l, b"127.0.0.1:5000 - [T] \"get a\\\"b\" VALUE 23\n");
        l.clear();
        format_line(&mut l, "p", "T", b"set k 0 0 1 noreply", b"");
        assert_eq!(l, b"p - [T] \"set k 0 0 1 noreply\" - 0\n");
        l.clear();
        format_line(&mut l, "p", "T", b"GET \x00\xff", b"\x81\x00");
        assert_eq!(l, b"p - [T] \"GET \\x00\\xff\" - 2\n");
    }

    #[test]
    fn the_writer_rotates_by_size_and_drains_at_stop() {
        let dir = std::env::temp_dir().join(format!("segcache-klog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("k.log");
        let settings = KlogSettings { path: path.clone(), sample: 1, max_bytes: 100 };
        let (klog, senders) = Klog::start(settings, 2).unwrap();
        for i in 0..30 {
            // 20 bytes a line: 5 lines a file.
            senders[i % 2].send(format!("line {i:02} .........\n").into_bytes(), &klog.stats);
        }
        klog.finish();
        assert_eq!(klog.stats.logged.load(Relaxed), 30);
        assert_eq!(klog.stats.dropped.load(Relaxed), 0);
        assert!(klog.stats.rotations.load(Relaxed) >= 5);
        for p in [path.clone(), numbered(&path, 1), numbered(&path, 2)] {
            let len = std::fs::metadata(&p).unwrap().len();
            assert!(len > 0 && len <= 100, "{} has {len} bytes", p.display());
        }
        assert!(!numbered(&path, 3).exists(), "only {KEEP} old files are kept");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
