//! TLS on the data port (memcached's `-Z`): the server's certificate, key and client CA loaded
//! with rustls (the ring provider; no OpenSSL), reloaded without a restart (`refresh_certs`,
//! SIGHUP), and the per-connection stream that the workers read and write like a plain socket.
//!
//! A connection's handshake runs inside its reads and writes on the worker's nonblocking socket:
//! a client that stalls mid-handshake only sits in the worker's poll set, as an idle client does.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use mio::net::TcpStream;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// memcached's `ssl_verify_mode`: whether clients must show a certificate signed by
/// `ssl_ca_cert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
    /// 0: no client certificate is asked for.
    None,
    /// 1: one is asked for; a client without one is served, one with a bad one is not.
    Request,
    /// 2: one is required.
    Require,
    /// 3: memcached's "once" (no renegotiation): as 2 here, rustls never renegotiates.
    Once,
}

impl VerifyMode {
    /// memcached's number for the mode (`stats settings`).
    pub fn number(self) -> u8 {
        match self {
            VerifyMode::None => 0,
            VerifyMode::Request => 1,
            VerifyMode::Require => 2,
            VerifyMode::Once => 3,
        }
    }

    /// `0`..`3` as memcached, or `none`, `request`, `require`, `once`.
    pub fn parse(s: &str) -> Result<VerifyMode, String> {
        match s.trim() {
            "0" | "none" => Ok(VerifyMode::None),
            "1" | "request" => Ok(VerifyMode::Request),
            "2" | "require" => Ok(VerifyMode::Require),
            "3" | "once" => Ok(VerifyMode::Once),
            other => Err(format!("ssl_verify_mode {other:?}: expected 0 (none), 1 (request), 2 (require) or 3 (once)")),
        }
    }
}

/// The oldest TLS version served (`ssl_min_version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinVersion {
    Tls12,
    Tls13,
}

impl MinVersion {
    /// memcached's names; TLS 1.0 and 1.1 are refused (rustls does not speak them).
    pub fn parse(s: &str) -> Result<MinVersion, String> {
        match s.trim() {
            "tlsv1.2" => Ok(MinVersion::Tls12),
            "tlsv1.3" => Ok(MinVersion::Tls13),
            "tlsv1" | "tlsv1.0" | "tlsv1.1" => {
                Err(format!("ssl_min_version {s}: TLS before 1.2 is not supported; use tlsv1.2 or tlsv1.3"))
            }
            other => Err(format!("ssl_min_version {other:?}: expected tlsv1.2 or tlsv1.3")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MinVersion::Tls12 => "tlsv1.2",
            MinVersion::Tls13 => "tlsv1.3",
        }
    }
}

/// What `-Z` and `-o ssl_*` (or the TOML `[tls]` table) ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl_chain_cert`: the server's certificate chain, PEM, leaf first.
    pub chain_cert: PathBuf,
    /// `ssl_key`: the private key, PEM; `None`: it is in the chain file.
    pub key: Option<PathBuf>,
    /// `ssl_ca_cert`: the CA certificates client certificates are checked against, PEM.
    pub ca_cert: Option<PathBuf>,
    pub verify_mode: VerifyMode,
    pub min_version: MinVersion,
}

impl TlsSettings {
    /// Checks what can be checked without reading the files.
    pub fn check(&self) -> Result<(), String> {
        if self.verify_mode != VerifyMode::None && self.ca_cert.is_none() {
            return Err(format!(
                "ssl_verify_mode={} checks client certificates against ssl_ca_cert: give -o ssl_ca_cert=FILE",
                self.verify_mode.number()
            ));
        }
        Ok(())
    }
}

/// The server's TLS state: the configuration new connections get (replaced by a reload; the
/// connections already open keep theirs) and memcached's TLS counters.
#[derive(Debug)]
pub struct Tls {
    pub settings: TlsSettings,
    config: RwLock<Arc<ServerConfig>>,
    /// When the certificates were last loaded (UNIX seconds).
    refreshed: AtomicU64,
    /// memcached's `ssl_handshake_errors`: handshakes that failed (a bad or missing client
    /// certificate, garbage instead of a ClientHello, no common protocol version).
    pub handshake_errors: AtomicU64,
    /// memcached's `ssl_proto_errors`: TLS errors after the handshake.
    pub proto_errors: AtomicU64,
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Tls {
    /// Loads the certificates; the error is memcached's words for what failed.
    pub fn load(settings: TlsSettings) -> Result<Tls, String> {
        let config = build_config(&settings)?;
        Ok(Tls {
            settings,
            config: RwLock::new(config),
            refreshed: AtomicU64::new(now_unix()),
            handshake_errors: AtomicU64::new(0),
            proto_errors: AtomicU64::new(0),
        })
    }

    /// Reads the files again (`refresh_certs`, SIGHUP): new connections get the new
    /// certificates; on an error the old ones stay.
    pub fn reload(&self) -> Result<(), String> {
        let config = build_config(&self.settings)?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
        self.refreshed.store(now_unix(), Ordering::Relaxed);
        log::info!("TLS certificates reloaded from {}", self.settings.chain_cert.display());
        Ok(())
    }

    /// memcached's `time_since_server_cert_refresh`.
    pub fn since_refresh(&self) -> u64 {
        now_unix().saturating_sub(self.refreshed.load(Ordering::Relaxed))
    }

    /// The server side of a new connection.
    pub fn accept(self: &Arc<Tls>, tcp: TcpStream) -> io::Result<TlsStream> {
        let config = self.config.read().unwrap_or_else(|e| e.into_inner()).clone();
        let conn = ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(TlsStream { tcp, conn, tls: self.clone(), eof: false })
    }
}

/// Builds the rustls configuration from the files, with memcached's error messages.
fn build_config(s: &TlsSettings) -> Result<Arc<ServerConfig>, String> {
    let chain_path = &s.chain_cert;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(chain_path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("Error loading the certificate chain: {} : {e}", chain_path.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "Error loading the certificate chain: {} : no certificate in the file",
            chain_path.display()
        ));
    }
    let key_path = s.key.as_ref().unwrap_or(chain_path);
    let key = PrivateKeyDer::from_pem_file(key_path)
        .map_err(|e| format!("Error loading the key: {} : {e}", key_path.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match s.min_version {
        MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("Error setting up TLS: {e}"))?;
    let builder = match (s.verify_mode, &s.ca_cert) {
        (VerifyMode::None, _) => builder.with_no_client_auth(),
        (mode, ca) => {
            let ca = ca.as_ref().ok_or("ssl_verify_mode needs ssl_ca_cert")?;
            let fail = |e: &dyn std::fmt::Display| format!("Error loading the CA certificate: {} : {e}", ca.display());
            let mut roots = RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(ca)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| fail(&e))?;
            if certs.is_empty() {
                return Err(fail(&"no certificate in the file"));
            }
            for c in certs {
                roots.add(c).map_err(|e| fail(&e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match mode {
                VerifyMode::Request => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| fail(&e))?)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| format!("Error validating the certificate: {e}"))?;
    Ok(Arc::new(config))
}

/// A TLS connection over a nonblocking TCP socket, read and written as a plain stream:
/// `read` gives plaintext (running the handshake as the bytes arrive), `write` encrypts.
#[derive(Debug)]
pub struct TlsStream {
    pub tcp: TcpStream,
    conn: ServerConnection,
    tls: Arc<Tls>,
    /// The socket returned end-of-file.
    eof: bool,
}

impl TlsStream {
    /// Writes the TLS records rustls holds (handshake messages, encrypted replies, an alert)
    /// until done or the socket is full (`WouldBlock`).
    pub fn push(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Whether TLS records wait to be written.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Says goodbye (close_notify), as far as the socket takes it.
    pub fn close_notify(&mut self) {
        if !self.conn.is_handshaking() {
            self.conn.send_close_notify();
            let _ = self.push();
        }
    }

    fn push_some(&mut self) -> io::Result<()> {
        match self.push() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r,
        }
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: an end like any other to a cache.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if self.eof {
                return Ok(0);
            }
            match self.conn.read_tls(&mut self.tcp) {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.push_some()?;
                    return Err(e);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Err(e) = self.conn.process_new_packets() {
                let counter =
                    if self.conn.is_handshaking() { &self.tls.handshake_errors } else { &self.tls.proto_errors };
                counter.fetch_add(1, Ordering::Relaxed);
                log::debug!("TLS error from {:?}: {e}", self.tcp.peer_addr().ok());
                // The alert rustls queued tells the client why.
                let _ = self.push();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // Handshake messages go out as soon as they are made.
            self.push_some()?;
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Records already made go first: while the socket is full, new replies wait in the
        // worker's output buffer.
        self.push()?;
        let n = self.conn.writer().write(buf)?;
        self.push_some()?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.push()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_modes_are_memcacheds_numbers() {
        for (s, n) in [("0", 0), ("1", 1), ("2", 2), ("3", 3), ("require", 2)] {
            assert_eq!(VerifyMode::parse(s).unwrap().number(), n);
        }
        assert!(VerifyMode::parse("4").is_err());
        assert_eq!(MinVersion::parse("tlsv1.3").unwrap(), MinVersion::Tls13);
        assert!(MinVersion::parse("tlsv1.1").unwrap_err().contains("not supported"));
    }

    #[test]
    fn missing_files_say_which() {
        let s = TlsSettings {
            chain_cert: "/nonexistent/chain.pem".into(),
            key: None,
            ca_cert: None,
            verify_mode: VerifyMode::None,
            min_version: MinVersion::Tls12,
        };
        let e = Tls::load(s.clone()).unwrap_err();
        assert!(e.starts_with("Error loading the certificate chain: /nonexistent/chain.pem"), "{e}");
        let s = TlsSettings { verify_mode: VerifyMode::Require, ..s };
        assert!(s.check().unwrap_err().contains("ssl_ca_cert"));
    }
}
