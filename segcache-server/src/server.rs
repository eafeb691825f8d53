//! The server: builds the engine, binds the listener, starts the workers (and the admin port),
//! accepts connections and hands them to the workers round-robin, and stops gracefully.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::{Events, Interest, Poll, Token, Waker};

use crate::config::Settings;
use crate::listen::Listener;
use crate::state::Shared;
use crate::worker::{self, WorkerHandle};

const WAKER: Token = Token(1);
/// Listener `i` has token `LISTENERS + i`.
const LISTENERS: usize = 2;

/// Sent to a client past the connection limit, before closing (memcached's words).
const TOO_MANY: &[u8] = b"SERVER_ERROR too many open connections\r\n";

/// Stops a running [`Server`] from another thread (a signal handler thread, a test).
#[derive(Debug, Clone)]
pub struct StopHandle {
    stopping: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl StopHandle {
    /// Stop accepting, let the workers finish in-flight requests, close the engine.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }
}

/// A bound, running server; [`Server::run`] accepts until stopped.
pub struct Server {
    shared: Arc<Shared>,
    poll: Poll,
    waker: Arc<Waker>,
    listeners: Vec<Listener>,
    addr: SocketAddr,
    workers: Vec<WorkerHandle>,
    threads: Vec<JoinHandle<()>>,
    admin: Option<(SocketAddr, JoinHandle<()>)>,
}

impl Server {
    /// Builds the engine (warm from its file, if it has one), binds, starts the workers.
    pub fn bind(settings: Settings) -> Result<Server, String> {
        // Certificates first: a bad one stops the start before the engine is built.
        let tls = match &settings.tls {
            Some(t) => Some(Arc::new(crate::tls::Tls::load(t.clone())?)),
            None => None,
        };
        let kind = settings.path.as_deref().map_or(StartKind::Cold, start_kind);
        let cache = settings.builder().build_shared().map_err(|e| format!("cannot start the cache engine: {e}"))?;
        crate::logger::notice(&start_line(kind, cache.len(), settings.path.as_deref()));
        let mut listeners = crate::listen::bind_all(&settings, tls.as_ref())?;
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        let addr = listeners.iter().find_map(Listener::tcp_addr).unwrap_or(unspecified);
        let poll = Poll::new().map_err(|e| e.to_string())?;
        for (i, l) in listeners.iter_mut().enumerate() {
            poll.registry()
                .register(l.source(), Token(LISTENERS + i), Interest::READABLE)
                .map_err(|e| e.to_string())?;
        }
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(|e| e.to_string())?);

        let cores = pin_plan(&settings);
        let admin_port = settings.admin_port;
        let threads_n = settings.threads;
        let shared = Arc::new(Shared::new(cache, settings));
        let _ = shared.acceptor.set(waker.clone());
        if let Some(t) = tls {
            let _ = shared.tls.set(t);
        }
        if let Some(first) = listeners.first() {
            use std::os::fd::AsRawFd;
            shared.watchers.set_listener(first.as_raw_fd(), addr);
        }
        if shared.settings.track_sizes {
            shared.sizes_enabled.store(true, Ordering::Relaxed);
        }
        if shared.settings.detail {
            shared.watchers.set_detail(true);
        }
        let mut workers = Vec::with_capacity(threads_n);
        let mut threads = Vec::with_capacity(threads_n);
        for i in 0..threads_n {
            let core = cores.as_ref().map(|c| c[i % c.len()]);
            let (handle, thread) =
                worker::spawn(i, shared.clone(), core).map_err(|e| format!("cannot start worker {i}: {e}"))?;
            workers.push(handle);
            threads.push(thread);
        }
        let admin = match admin_port {
            Some(port) => Some(
                crate::admin::spawn(shared.clone(), port)
                    .map_err(|e| format!("cannot start the admin port {port}: {e}"))?,
            ),
            None => None,
        };
        let names: Vec<String> = listeners.iter().map(Listener::describe).collect();
        log::info!(
            "listening on {} with {threads_n} workers, {} MiB, eviction {}",
            names.join(", "),
            shared.settings.memory_bytes >> 20,
            shared.settings.eviction
        );
        Ok(Server { shared, poll, waker, listeners, addr, workers, threads, admin })
    }

    /// The (first) TCP address the server listens on; `0.0.0.0:0` when it listens on a UNIX
    /// socket only.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin (metrics) address, when enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|(a, _)| *a)
    }

    /// The TLS state (`-Z`), to reload the certificates on SIGHUP.
    pub fn tls(&self) -> Option<Arc<crate::tls::Tls>> {
        self.shared.tls.get().cloned()
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle { stopping: self.shared.stopping.clone(), waker: self.waker.clone() }
    }

    /// Accepts connections until stopped, then drains the workers and closes the engine.
    pub fn run(mut self) -> Result<(), String> {
        let mut events = Events::with_capacity(64);
        let mut next = 0usize;
        while !self.shared.is_stopping() {
            if let Err(e) = self.poll.poll(&mut events, None) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("acceptor: {e}"));
            }
            if self.shared.is_stopping() {
                break;
            }
            for ev in events.iter() {
                if let Some(i) = ev.token().0.checked_sub(LISTENERS) {
                    self.accept_all(i, &mut next);
                }
            }
        }
        log::info!("stopping: no longer accepting connections");
        for l in self.listeners.drain(..) {
            if let Listener::Unix(_, path) = &l {
                let _ = std::fs::remove_file(path);
            }
        }
        for w in &self.workers {
            w.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some((_, t)) = self.admin.take() {
            let _ = t.join();
        }
        drop(self.workers);
        match Arc::try_unwrap(self.shared) {
            Ok(shared) => {
                let persisted = shared.settings.path.is_some();
                shared.cache.close().map_err(|e| format!("closing the cache: {e}"))?;
                log::info!("cache closed{}", if persisted { " (persisted for a warm restart)" } else { "" });
                Ok(())
            }
            // Unreachable once every thread has been joined; dropping closes the engine too.
            Err(_) => Err("internal error: the cache is still shared at shutdown".into()),
        }
    }

    fn accept_all(&mut self, i: usize, next: &mut usize) {
        let conns = &self.shared.conns;
        let Some(listener) = self.listeners.get(i) else { return };
        loop {
            match listener.accept() {
                Ok((mut stream, peer)) => {
                    if conns.curr_connections.load(Ordering::Relaxed) >= self.shared.settings.max_connections as u64 {
                        conns.rejected_connections.fetch_add(1, Ordering::Relaxed);
                        log::warn!("refusing {peer}: {} connections open", self.shared.settings.max_connections);
                        let _ = stream.write(TOO_MANY);
                        continue;
                    }
                    conns.curr_connections.fetch_add(1, Ordering::Relaxed);
                    conns.total_connections.fetch_add(1, Ordering::Relaxed);
                    let w = *next % self.workers.len();
                    *next = next.wrapping_add(1);
                    if let Err(e) = self.workers[w].hand(stream) {
                        log::error!("cannot hand a connection to worker {w}: {e}");
                        conns.curr_connections.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of file descriptors or similar: try again on the next readiness event.
                    log::warn!("accept failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    return;
                }
            }
        }
    }
}

/// The cores the workers are pinned to, or `None` for no pinning.
fn pin_plan(s: &Settings) -> Option<Vec<core_affinity::CoreId>> {
    if !s.pin {
        return None;
    }
    let available = core_affinity::get_core_ids().unwrap_or_default();
    if available.is_empty() {
        log::warn!("cannot list the cores: workers are not pinned");
        return None;
    }
    match &s.cores {
        Some(list) => {
            let ids: Vec<_> = list.iter().map(|&id| core_affinity::CoreId { id }).collect();
            if let Some(bad) = list.iter().find(|&&id| !available.iter().any(|c| c.id == id)) {
                log::warn!("core {bad} is not available to this process; pinning may fail");
            }
            Some(ids)
        }
        None => Some(available),
    }
}

/// What a start found in the persistence file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartKind {
    /// No file, or an empty one: the cache starts empty.
    Cold,
    /// A file closed by a graceful stop: its items come back.
    Warm,
    /// A file left by a crash: the engine rebuilt its index from the segments.
    Recovered,
}

/// Reads the persistence file's header before the engine opens it. The engine reports nothing
/// about the kind of start, so this reads the two fields that tell (see segcache-core's
/// persist/header.rs): the `SEGCACHE` magic at offset 0 and the `clean` flag (a little-endian
/// u32 at offset 44), set by a graceful close and cleared while the file is open.
pub fn start_kind(path: &Path) -> StartKind {
    use std::io::Read;
    let mut head = [0u8; 48];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head));
    if read.is_err() || &head[..8] != b"SEGCACHE" {
        return StartKind::Cold;
    }
    match u32::from_le_bytes([head[44], head[45], head[46], head[47]]) {
        1 => StartKind::Warm,
        _ => StartKind::Recovered,
    }
}

/// The line that says how the cache started.
pub fn start_line(kind: StartKind, items: usize, path: Option<&Path>) -> String {
    let s = if items == 1 { "" } else { "s" };
    match (kind, path) {
        (StartKind::Cold, None) => "cold start: the cache is empty (no persistence file)".into(),
        (StartKind::Cold, Some(p)) => format!("cold start: the cache is empty (new persistence file {})", p.display()),
        (StartKind::Warm, Some(p)) if items == 0 => {
            format!("warm start from {}: 0 items back (the file held none, or it was unusable and reset)", p.display())
        }
        (StartKind::Warm, p) => {
            format!("warm start from {}: {items} item{s} back", p.unwrap_or(Path::new("")).display())
        }
        (StartKind::Recovered, p) => {
            format!("recovered after a crash from {}: {items} item{s} back", p.unwrap_or(Path::new("")).display())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{start_kind, start_line, StartKind};
    use std::time::Duration;

    #[test]
    fn start_kind_follows_the_file() {
        let dir = std::env::temp_dir().join(format!("segcache-start-kind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cache.seg");
        let _ = std::fs::remove_file(&path);
        let open = || segcache_core::Builder::new().heap_size(8 << 20).segment_size(1 << 20).path(&path);
        assert_eq!(start_kind(&path), StartKind::Cold, "no file");
        let cache = open().build_shared().unwrap();
        cache.set(b"a", b"1", 0, Duration::ZERO).unwrap();
        // While open, the file says "not closed cleanly": this is what a crash leaves.
        assert_eq!(start_kind(&path), StartKind::Recovered);
        cache.close().unwrap();
        assert_eq!(start_kind(&path), StartKind::Warm);
        let cache = open().build_shared().unwrap();
        assert_eq!(
            start_line(StartKind::Warm, cache.len(), Some(&path)),
            format!("warm start from {}: 1 item back", path.display())
        );
        cache.close().unwrap();
        std::fs::write(&path, b"not a cache file").unwrap();
        assert_eq!(start_kind(&path), StartKind::Cold);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
