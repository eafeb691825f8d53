//! A memcached-protocol server driven over loopback with a cache-aside workload, for hit ratios
//! of whole servers (memcached with extstore, segcache-server with its tier) beside the engine's.
//!
//! One connection sends requests in batches: the batch's sets (`noreply`), then one multi-key
//! `get` of its gets, then a set of each key the get missed (cache-aside fill). Both servers get
//! the same stream of keys.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::keys::{format_key, Key, KEY_LEN};
use crate::mem::smaps_rollup;
use crate::workload::{KeyDist, KeyGen};

/// Requests per batch.
const BATCH: usize = 16;

/// What to send: Zipf keys, `set_pct`% sets, values of `value` bytes.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub keys: usize,
    pub zipf: f64,
    pub set_pct: u32,
    pub value: usize,
    /// Requests before counting starts.
    pub warmup: u64,
    /// Requests counted.
    pub ops: u64,
    pub seed: u64,
}

/// What a server did with the workload.
#[derive(Debug, Clone, Copy)]
pub struct Served {
    pub hit_ratio: f64,
    /// The server's resident memory at the end.
    pub rss: u64,
}

/// A server process, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback port (another process may take it before the server does; then the server
/// fails to start and the run says so).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts `program` with `args` (its memory and tier options) on a free port, runs `w` against
/// it, and stops it.
pub fn run(program: &Path, args: &[String], w: &Workload) -> Result<Served, String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(program);
    cmd.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"]).args(args);
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-u", "root"]);
    }
    let child =
        cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().map_err(|e| format!("{}: {e}", program.display()))?;
    let mut server = Server(child);
    let start = Instant::now();
    let stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                if let Ok(Some(status)) = server.0.try_wait() {
                    let mut err = String::new();
                    let _ = server.0.stderr.take().map(|mut e| e.read_to_string(&mut err));
                    return Err(format!("{} {args:?} exited ({status}): {err}", program.display()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("{} did not listen on {port}: {e}", program.display())),
        }
    };
    let hit_ratio = drive(stream, w).map_err(|e| format!("{}: {e}", program.display()))?;
    let rss = smaps_rollup(server.0.id()).map_or(0, |r| r.rss);
    Ok(Served { hit_ratio, rss })
}

/// Sends the workload; the hit ratio of the counted gets.
fn drive(stream: TcpStream, w: &Workload) -> std::io::Result<f64> {
    stream.set_nodelay(true)?;
    let mut out = stream.try_clone()?;
    let mut input = BufReader::with_capacity(1 << 16, stream);
    let gen = KeyGen::new(w.keys, KeyDist::Zipf(w.zipf));
    let mut rng = SmallRng::seed_from_u64(w.seed);
    let value = vec![b'v'; w.value];
    let set = |buf: &mut Vec<u8>, k: &Key| {
        buf.extend_from_slice(b"set ");
        buf.extend_from_slice(k);
        buf.extend_from_slice(format!(" 0 0 {} noreply\r\n", value.len()).as_bytes());
        buf.extend_from_slice(&value);
        buf.extend_from_slice(b"\r\n");
    };
    let (mut gets, mut hits) = (0u64, 0u64);
    let (mut buf, mut line) = (Vec::new(), Vec::new());
    let mut sent = 0u64;
    while sent < w.warmup + w.ops {
        let counted = sent >= w.warmup;
        buf.clear();
        let mut asked: Vec<Key> = Vec::with_capacity(BATCH);
        for _ in 0..BATCH {
            let mut k: Key = [0; KEY_LEN];
            format_key(gen.sample(&mut rng), &mut k);
            if rng.gen_range(0..100) < w.set_pct {
                set(&mut buf, &k);
            } else {
                asked.push(k);
            }
        }
        sent += BATCH as u64;
        if !asked.is_empty() {
            buf.extend_from_slice(b"get");
            for k in &asked {
                buf.push(b' ');
                buf.extend_from_slice(k);
            }
            buf.extend_from_slice(b"\r\n");
        }
        out.write_all(&buf)?;
        if asked.is_empty() {
            continue;
        }
        // The hits come back in the order asked (a key asked twice may come back twice).
        let mut found = vec![false; asked.len()];
        let mut next = 0;
        loop {
            line.clear();
            input.read_until(b'\n', &mut line)?;
            if line.starts_with(b"END") {
                break;
            }
            let bad = || std::io::Error::other(format!("unexpected reply {:?}", String::from_utf8_lossy(&line)));
            let mut words = line.split(|&b| b == b' ' || b == b'\r' || b == b'\n').filter(|w| !w.is_empty());
            if words.next() != Some(b"VALUE") {
                return Err(bad());
            }
            let key = words.next().ok_or_else(bad)?;
            let len: usize =
                std::str::from_utf8(words.nth(1).ok_or_else(bad)?).ok().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let mut data = vec![0; len + 2];
            input.read_exact(&mut data)?;
            while next < asked.len() && &asked[next][..] != key {
                next += 1;
            }
            if next == asked.len() {
                return Err(bad());
            }
            found[next] = len == w.value;
            next += 1;
        }
        buf.clear();
        for (k, &hit) in asked.iter().zip(&found) {
            if !hit {
                set(&mut buf, k);
            }
        }
        out.write_all(&buf)?;
        if counted {
            gets += asked.len() as u64;
            hits += found.iter().filter(|&&h| h).count() as u64;
        }
    }
    Ok(hits as f64 / gets.max(1) as f64)
}
