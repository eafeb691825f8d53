//! A mock memcache server for testing the harness: a small real store (get/gets/set/
//! delete/flush_all/version) that answers every request exactly `delay` after it arrived,
//! and can stall all replies once to show that queueing behind a stall is measured.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver};

use hdrhistogram::Histogram;

use crate::histo::{self, Percentiles};
use crate::timer::set_timer_slack;

/// Injected behaviour.
#[derive(Clone, Debug, Default)]
pub struct MockConfig {
    /// Every reply is written this long after its request was read.
    pub delay: Duration,
    /// After this many requests in all, hold every reply for `stall.1`.
    pub stall: Option<(u64, Duration)>,
    /// Close each connection after it has read this many requests (unanswered).
    pub close_after: Option<u64>,
}

/// key -> (flags, value)
type Store = HashMap<Vec<u8>, (u32, Vec<u8>)>;

struct Shared {
    cfg: MockConfig,
    store: Mutex<Store>,
    requests: AtomicU64,
    stall_until: Mutex<Option<Instant>>,
    stop: AtomicBool,
    /// How late replies were written versus their due time: the machine's own scheduling
    /// noise, which the client rightly sees as latency.
    lateness: Mutex<Histogram<u64>>,
}

/// A running mock server; stops accepting when dropped.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl MockServer {
    /// Starts on 127.0.0.1 with an ephemeral port (or `port` if non-zero).
    pub fn start(cfg: MockConfig, port: u16) -> io::Result<MockServer> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            cfg,
            store: Mutex::new(HashMap::new()),
            requests: AtomicU64::new(0),
            stall_until: Mutex::new(None),
            stop: AtomicBool::new(false),
            lateness: Mutex::new(histo::new_hist()),
        });
        let sh = shared.clone();
        std::thread::Builder::new().name("mock-accept".into()).spawn(move || {
            for conn in listener.incoming() {
                if sh.stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(c) = conn {
                    let sh = sh.clone();
                    let _ = std::thread::Builder::new().name("mock-conn".into()).spawn(move || serve(c, sh));
                }
            }
        })?;
        Ok(MockServer { addr, shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered or queued so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// How late the mock wrote its replies (microseconds), since the last reset.
    pub fn lateness(&self) -> Percentiles {
        histo::summarize(&self.shared.lateness.lock().unwrap())
    }

    pub fn reset_lateness(&self) {
        self.shared.lateness.lock().unwrap().reset();
    }

    /// Items in the store.
    pub fn items(&self) -> usize {
        self.shared.store.lock().unwrap().len()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
    }
}

/// One connection: this thread reads and answers into a queue; a writer thread sends
/// each answer at its due time, in order.
fn serve(conn: TcpStream, sh: Arc<Shared>) {
    let _ = conn.set_nodelay(true);
    let Ok(wconn) = conn.try_clone() else { return };
    let (tx, rx) = unbounded::<(Instant, Vec<u8>)>();
    let sh_w = sh.clone();
    let writer = std::thread::spawn(move || write_loop(wconn, rx, sh_w));
    let mut r = BufReader::with_capacity(64 * 1024, conn);
    let mut line = Vec::new();
    let mut served = 0u64;
    loop {
        if sh.cfg.close_after.is_some_and(|n| served >= n) {
            // Drop the writer's queue too: the last requests are never answered.
            break;
        }
        served += 1;
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let arrived = Instant::now();
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        let mut parts = text.split_ascii_whitespace();
        let cmd = parts.next().unwrap_or("");
        let reply: Vec<u8> = match cmd {
            "get" | "gets" => {
                let store = sh.store.lock().unwrap();
                let mut out = Vec::new();
                for k in parts {
                    if let Some((flags, v)) = store.get(k.as_bytes()) {
                        out.extend_from_slice(format!("VALUE {k} {flags} {}\r\n", v.len()).as_bytes());
                        out.extend_from_slice(v);
                        out.extend_from_slice(b"\r\n");
                    }
                }
                out.extend_from_slice(b"END\r\n");
                out
            }
            "set" => {
                let f: Vec<&str> = parts.collect();
                let parsed = (f.len() >= 4).then(|| (f[1].parse::<u32>(), f[3].parse::<usize>()));
                match parsed {
                    Some((Ok(flags), Ok(len))) if len <= 1 << 20 => {
                        let mut data = vec![0u8; len + 2];
                        if r.read_exact(&mut data).is_err() {
                            break;
                        }
                        data.truncate(len);
                        sh.store.lock().unwrap().insert(f[0].as_bytes().to_vec(), (flags, data));
                        if f.get(4) == Some(&"noreply") {
                            continue;
                        }
                        b"STORED\r\n".to_vec()
                    }
                    _ => b"CLIENT_ERROR bad command line format\r\n".to_vec(),
                }
            }
            "delete" => match parts.next() {
                Some(k) if sh.store.lock().unwrap().remove(k.as_bytes()).is_some() => b"DELETED\r\n".to_vec(),
                Some(_) => b"NOT_FOUND\r\n".to_vec(),
                None => b"ERROR\r\n".to_vec(),
            },
            "flush_all" => {
                sh.store.lock().unwrap().clear();
                b"OK\r\n".to_vec()
            }
            "version" => b"VERSION mock-1.0\r\n".to_vec(),
            "quit" => break,
            _ => b"ERROR\r\n".to_vec(),
        };
        let n = sh.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some((after, dur)) = sh.cfg.stall {
            if n == after {
                *sh.stall_until.lock().unwrap() = Some(arrived + dur);
            }
        }
        if tx.send((arrived + sh.cfg.delay, reply)).is_err() {
            break;
        }
    }
    drop(tx);
    if sh.cfg.close_after.is_some() {
        // Abrupt close: shut the socket so the client sees EOF even with replies pending.
        let _ = r.get_ref().shutdown(std::net::Shutdown::Both);
    }
    let _ = writer.join();
}

fn write_loop(mut w: TcpStream, rx: Receiver<(Instant, Vec<u8>)>, sh: Arc<Shared>) {
    set_timer_slack(1);
    let due_of = |d: Instant| sh.stall_until.lock().unwrap().map_or(d, |s| s.max(d));
    let late = |d: Instant| {
        let ns = Instant::now().saturating_duration_since(d).as_nanos() as u64;
        histo::record(&mut sh.lateness.lock().unwrap(), ns);
    };
    let mut batch = Vec::new();
    while let Ok((due, reply)) = rx.recv() {
        let due = due_of(due);
        sleep_until(due);
        late(due);
        batch.extend_from_slice(&reply);
        // Replies already queued go out in the same write once due; order is kept.
        while let Ok((d, r)) = rx.try_recv() {
            let d = due_of(d);
            if d > Instant::now() {
                if w.write_all(&batch).is_err() {
                    return;
                }
                batch.clear();
                sleep_until(d);
            }
            late(d);
            batch.extend_from_slice(&r);
        }
        if w.write_all(&batch).is_err() {
            return;
        }
        batch.clear();
    }
}

/// Sleeps to within a few microseconds of `t`: nanosleep for most of it, then spin.
fn sleep_until(t: Instant) {
    loop {
        let now = Instant::now();
        if now >= t {
            return;
        }
        let left = t - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::hint::spin_loop();
        }
    }
}
