//! The server: builds the engine, binds the listener, starts the workers (and the admin port),
//! accepts connections and hands them to the workers round-robin, and stops gracefully.

use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::config::Settings;
use crate::state::Shared;
use crate::worker::{self, WorkerHandle};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

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
    listener: TcpListener,
    addr: SocketAddr,
    workers: Vec<WorkerHandle>,
    threads: Vec<JoinHandle<()>>,
    admin: Option<(SocketAddr, JoinHandle<()>)>,
}

impl Server {
    /// Builds the engine (warm from its file, if it has one), binds, starts the workers.
    pub fn bind(settings: Settings) -> Result<Server, String> {
        let cache = settings.builder().build_shared().map_err(|e| format!("cannot start the cache engine: {e}"))?;
        let addr = (settings.listen.as_str(), settings.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve listen address {}: {e}", settings.listen))?
            .next()
            .ok_or_else(|| format!("listen address {} resolves to nothing", settings.listen))?;
        // std sets SO_REUSEADDR, so a restart does not wait for TIME_WAIT sockets.
        let std_listener = std::net::TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        std_listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        raise_backlog(&std_listener);
        let mut listener = TcpListener::from_std(std_listener);
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let poll = Poll::new().map_err(|e| e.to_string())?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE).map_err(|e| e.to_string())?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(|e| e.to_string())?);

        let cores = pin_plan(&settings);
        let admin_port = settings.admin_port;
        let threads_n = settings.threads;
        let shared = Arc::new(Shared::new(cache, settings));
        let _ = shared.acceptor.set(waker.clone());
        {
            use std::os::fd::AsRawFd;
            shared.watchers.set_listener(listener.as_raw_fd(), addr);
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
        log::info!(
            "listening on {addr} with {threads_n} workers, {} MiB, eviction {}",
            shared.settings.memory_bytes >> 20,
            shared.settings.eviction
        );
        Ok(Server { shared, poll, waker, listener, addr, workers, threads, admin })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin (metrics) address, when enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|(a, _)| *a)
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
            if events.iter().any(|e| e.token() == LISTENER) {
                self.accept_all(&mut next);
            }
        }
        log::info!("stopping: no longer accepting connections");
        drop(self.listener);
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

    fn accept_all(&mut self, next: &mut usize) {
        let conns = &self.shared.conns;
        loop {
            match self.listener.accept() {
                Ok((mut stream, peer)) => {
                    if conns.curr_connections.load(Ordering::Relaxed) >= self.shared.settings.max_connections as u64 {
                        conns.rejected_connections.fetch_add(1, Ordering::Relaxed);
                        log::warn!("refusing {peer}: {} connections open", self.shared.settings.max_connections);
                        let _ = stream.write(TOO_MANY);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
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

/// std listens with a backlog of 128; a burst of connects (a proxy or a pool starting) needs
/// more, as memcached's 1024. Calling listen(2) again on a listening socket only resizes it.
fn raise_backlog(listener: &std::net::TcpListener) {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is a valid, bound, listening socket owned by `listener`, which
    // outlives this call; listen(2) does not take ownership of it.
    let rc = unsafe { libc::listen(listener.as_raw_fd(), 1024) };
    if rc != 0 {
        log::warn!("cannot raise the listen backlog: {}", io::Error::last_os_error());
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
