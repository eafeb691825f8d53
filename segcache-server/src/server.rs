//! The server: builds the engine, binds the listener, starts the workers (and the admin port),
//! accepts connections and hands them to the workers round-robin, and stops gracefully.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};

use crate::config::Settings;
use crate::listen::Listener;
use crate::observe::http::Health;
use crate::observe::Observe;
use crate::ratelimit::{warn_limited, RateLimit};
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
    health: Arc<Health>,
    /// SO_BUSY_POLL was refused once: not tried again.
    busy_poll_refused: bool,
    /// Warnings for clients refused past `-c`: one a second.
    refusing: RateLimit,
    /// Warnings for failed accepts (out of descriptors): one a second.
    accept_failing: RateLimit,
}

impl Server {
    /// Builds the engine (warm from its file, if it has one), binds, starts the workers.
    pub fn bind(settings: Settings) -> Result<Server, String> {
        // The admin endpoint first: it answers /healthz, and /readyz with 503, while the cache
        // opens (a warm start may check gigabytes).
        let health = Arc::new(Health::default());
        let mut admin = match settings.admin_port {
            Some(port) => Some(
                crate::observe::http::spawn(health.clone(), &settings.admin_listen, port)
                    .map_err(|e| format!("cannot start the admin endpoint {}:{port}: {e}", settings.admin_listen))?,
            ),
            None => None,
        };
        let started = Self::start(settings, &health, &mut admin);
        if started.is_err() {
            health.done();
            if let Some((_, t)) = admin.take() {
                let _ = t.join();
            }
        }
        started
    }

    fn start(
        settings: Settings,
        health: &Arc<Health>,
        admin: &mut Option<(SocketAddr, JoinHandle<()>)>,
    ) -> Result<Server, String> {
        // Certificates first: a bad one stops the start before the engine is built.
        let tls = match &settings.tls {
            Some(t) => Some(Arc::new(crate::tls::Tls::load(t.clone())?)),
            None => None,
        };
        let kind = settings.engine.path.as_deref().map_or(StartKind::Cold, start_kind);
        let opening = Instant::now();
        let cache = settings.builder().build_shared().map_err(|e| format!("cannot start the cache engine: {e}"))?;
        let opened =
            Opened { kind, items: cache.len(), took: opening.elapsed(), dropped_segments: cache.dropped_segments() };
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
        let threads_n = settings.threads;
        let observe = Observe::new(threads_n, settings.klog.clone(), settings.hotkeys).map_err(|e| {
            let path = settings.klog.as_ref().map(|k| k.path.display().to_string()).unwrap_or_default();
            format!("cannot open the command log {path}: {e}")
        })?;
        let shared = Arc::new(Shared::with_observe(cache, settings, observe));
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
        let names: Vec<String> = listeners.iter().map(Listener::describe).collect();
        let admin_addr = admin.as_ref().map(|(a, _)| format!("; admin on http://{a}/")).unwrap_or_default();
        let klog =
            shared.settings.klog.as_ref().map(|k| format!("; command log {} (1 in {})", k.path.display(), k.sample));
        crate::logger::notice(&format!(
            "{}; listening on {} with {threads_n} workers, {} MiB, eviction {}{admin_addr}{}",
            start_line(&opened, shared.settings.engine.path.as_deref()),
            names.join(", "),
            shared.settings.engine.memory_bytes >> 20,
            shared.settings.engine.eviction,
            klog.unwrap_or_default()
        ));
        health.serving(shared.clone());
        let admin = admin.take();
        let health = health.clone();
        Ok(Server {
            shared,
            poll,
            waker,
            listeners,
            addr,
            workers,
            threads,
            admin,
            health,
            busy_poll_refused: false,
            refusing: RateLimit::per_second(),
            accept_failing: RateLimit::per_second(),
        })
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

    /// A call that writes the cache's heap to stable storage (a no-op without `--persist`, or
    /// once the server has stopped), for the signal that asks for it. It holds the server's state
    /// weakly: the graceful close at the end needs it alone.
    pub fn syncer(&self) -> impl Fn() -> segcache_core::Result<()> + Send + 'static {
        let shared = Arc::downgrade(&self.shared);
        move || shared.upgrade().map_or(Ok(()), |s| s.cache.sync())
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
        self.health.draining();
        log::info!("stopping: no longer accepting connections");
        for l in self.listeners.drain(..) {
            l.remove_socket_file();
        }
        for w in &self.workers {
            w.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.shared.observe.finish();
        self.health.done();
        if let Some((_, t)) = self.admin.take() {
            let _ = t.join();
        }
        self.health.release();
        drop(self.workers);
        let shared = last_holder(self.shared);
        let persisted = shared.settings.engine.path.is_some();
        shared.cache.close().map_err(|e| format!("closing the cache: {e}"))?;
        log::info!("cache closed{}", if persisted { " (persisted for a warm restart)" } else { "" });
        Ok(())
    }

    fn accept_all(&mut self, i: usize, next: &mut usize) {
        let conns = &self.shared.conns;
        let Some(listener) = self.listeners.get(i) else { return };
        loop {
            match listener.accept() {
                Ok((mut stream, peer)) => {
                    if conns.curr_connections.load(Ordering::Relaxed) >= self.shared.settings.max_connections as u64 {
                        conns.rejected_connections.fetch_add(1, Ordering::Relaxed);
                        warn_limited!(
                            self.refusing,
                            "refusing {peer}: {} connections open",
                            self.shared.settings.max_connections
                        );
                        let _ = stream.write(TOO_MANY);
                        continue;
                    }
                    let us = self.shared.settings.busy_poll_us;
                    if us > 0 && !self.busy_poll_refused && !busy_poll(&stream, us) {
                        self.busy_poll_refused = true;
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
                    warn_limited!(self.accept_failing, "accept failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    return;
                }
            }
        }
    }
}

/// `-o busy_poll_us=N`: SO_BUSY_POLL on a client socket (a read on it with no data spins on
/// the device queue for up to N µs instead of sleeping). Values above the `net.core.busy_read`
/// sysctl need CAP_NET_ADMIN: `false` (and a warning) when refused.
fn busy_poll(stream: &crate::listen::Stream, us: u32) -> bool {
    use std::os::fd::AsRawFd;
    if matches!(stream, crate::listen::Stream::Unix(_)) {
        return true;
    }
    let us: libc::c_int = us.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: setsockopt reads one c_int from a live local for the socket we own.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
            (&us as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        log::warn!(
            "-o busy_poll_us={us}: SO_BUSY_POLL refused ({}); values above net.core.busy_read need CAP_NET_ADMIN; going on without busy polling",
            io::Error::last_os_error()
        );
    }
    rc == 0
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

/// How the cache opened: what the file said, what came back, how long it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub kind: StartKind,
    /// Items in the cache once open.
    pub items: usize,
    /// Time to open (map, and check or rebuild, the file).
    pub took: Duration,
    /// Segments dropped as corrupt while opening (after a crash).
    pub dropped_segments: u64,
}

/// The part of the start line that says how the cache came up.
pub fn start_line(o: &Opened, path: Option<&Path>) -> String {
    let (items, ms) = (o.items, o.took.as_millis());
    let s = if items == 1 { "" } else { "s" };
    let path = path.unwrap_or(Path::new("")).display();
    match o.kind {
        StartKind::Cold if path.to_string().is_empty() => {
            format!("cold start: the cache is empty (no persistence file), opened in {ms} ms")
        }
        StartKind::Cold => format!("cold start: the cache is empty (new persistence file {path}), opened in {ms} ms"),
        StartKind::Warm if items == 0 => format!(
            "warm start from {path}: 0 items back in {ms} ms (the file held none, or it was unusable and reset)"
        ),
        StartKind::Warm => format!("warm start from {path}: {items} item{s} back in {ms} ms"),
        StartKind::Recovered => {
            let d = o.dropped_segments;
            let ds = if d == 1 { "" } else { "s" };
            format!(
                "recovered after a crash from {path}: {items} item{s} back in {ms} ms, {d} corrupt segment{ds} dropped"
            )
        }
    }
}

/// Waits until `shared` is the last holder of the server's state. Every thread that served has
/// been joined by then; the one other holder is a heap write asked by SIGUSR2, which may still
/// be running when a stop signal pending beside it was taken first, and ends on its own.
fn last_holder(mut shared: Arc<Shared>) -> Shared {
    let started = Instant::now();
    let mut told = false;
    loop {
        match Arc::try_unwrap(shared) {
            Ok(s) => return s,
            Err(still) => shared = still,
        }
        if !told && started.elapsed() > Duration::from_secs(5) {
            log::warn!("stopping: waiting for the heap write SIGUSR2 asked for to end");
            told = true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::{start_kind, start_line, Opened, StartKind};
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
        let opened = Opened {
            kind: StartKind::Warm,
            items: cache.len(),
            took: Duration::from_millis(12),
            dropped_segments: cache.dropped_segments(),
        };
        assert_eq!(
            start_line(&opened, Some(&path)),
            format!("warm start from {}: 1 item back in 12 ms", path.display())
        );
        let crashed = Opened { kind: StartKind::Recovered, items: 2, dropped_segments: 1, ..opened };
        assert_eq!(
            start_line(&crashed, Some(&path)),
            format!(
                "recovered after a crash from {}: 2 items back in 12 ms, 1 corrupt segment dropped",
                path.display()
            )
        );
        cache.close().unwrap();
        std::fs::write(&path, b"not a cache file").unwrap();
        assert_eq!(start_kind(&path), StartKind::Cold);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
