//! The admin port: Prometheus metrics at `http://127.0.0.1:PORT/metrics`. Off unless
//! `--admin-port` (or `admin_port` in the file) is given; always bound to loopback.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::report::prometheus;
use crate::state::Shared;

/// Binds 127.0.0.1:`port` and serves until the server stops.
pub fn spawn(shared: Arc<Shared>, port: u16) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    log::info!("metrics on http://{addr}/metrics");
    let thread = std::thread::Builder::new().name("admin".into()).spawn(move || {
        while !shared.is_stopping() {
            match listener.accept() {
                Ok((stream, _)) => {
                    if let Err(e) = serve(stream, &shared) {
                        log::debug!("admin request failed: {e}");
                    }
                }
                // Polled rather than woken: the admin port is not on any hot path.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => {
                    log::warn!("admin accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    })?;
    Ok((addr, thread))
}

fn serve(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut req = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && !req.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut chunk)?;
        if n == 0 || req.len() > 16 << 10 {
            break;
        }
        req.extend_from_slice(&chunk[..n]);
    }
    let first = req.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut parts = first.split(|&b| b == b' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let (status, body) = match (method, path) {
        (b"GET", b"/metrics") => ("200 OK", prometheus(shared)),
        (b"GET", _) => ("404 Not Found", "not found; try /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET /metrics\n".to_string()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())
}
