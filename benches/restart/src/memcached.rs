//! memcached 1.6 in restartable mode (`-e` memory file), driven over its text protocol: start,
//! fill (pipelined sets until the first eviction), graceful stop (SIGUSR1), kill -9, time to the
//! first reply after a restart, and the share of keys it kept.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::clock::mono_ns;
use crate::data::{key, value, VALUE_LEN};

/// Sets per pipelined batch, and batches between `stats` checks for evictions.
const BATCH: u64 = 1000;
const CHECK_EVERY: u64 = 10;
/// Keys per multi-get when counting.
const MGET: u64 = 100;

#[derive(Debug, Clone)]
pub struct Memcached {
    pub bin: String,
    pub port: u16,
    pub mem_mib: usize,
    pub file: PathBuf,
}

impl Memcached {
    /// `memcached [-u root] -U 0 -m MB -e FILE -p PORT -l 127.0.0.1`: the flags are the same at
    /// every start, as a restart requires.
    pub fn spawn(&self) -> Result<Child> {
        let mut cmd = Command::new(&self.bin);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "root"]);
        }
        cmd.args(["-U", "0", "-m", &self.mem_mib.to_string(), "-e"])
            .arg(&self.file)
            .args(["-p", &self.port.to_string(), "-l", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.spawn().with_context(|| format!("starting {} (apt-get install -y memcached)", self.bin))
    }

    /// Removes the memory file and its `.meta` companion.
    pub fn remove_files(&self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_file(meta_path(&self.file));
    }

    /// Connects, retrying until the server listens or `timeout` passes; fails at once if the
    /// server exited (bad flags, port in use, too little memory for `-e`).
    pub fn connect(&self, child: &mut Child, timeout: Duration) -> Result<TcpStream> {
        let deadline = mono_ns() + timeout.as_nanos() as u64;
        loop {
            if let Some(st) = child.try_wait()? {
                bail!(
                    "memcached exited ({st}) before listening on port {}: run `{} -m {} -e FILE -p {}` by hand to see why \
                     (with -e it needs -m 39 or more; the port may be taken)",
                    self.port, self.bin, self.mem_mib, self.port
                );
            }
            match TcpStream::connect(("127.0.0.1", self.port)) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    s.set_read_timeout(Some(Duration::from_secs(30)))?;
                    return Ok(s);
                }
                Err(e) if mono_ns() > deadline => {
                    return Err(e).context(format!("connecting to memcached on port {}", self.port))
                }
                Err(_) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    }
}

fn meta_path(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".meta");
    PathBuf::from(p)
}

/// A text-protocol connection.
pub struct Conn {
    w: TcpStream,
    r: BufReader<TcpStream>,
    line: String,
}

impl Conn {
    pub fn new(s: TcpStream) -> Result<Conn> {
        Ok(Conn { r: BufReader::with_capacity(1 << 16, s.try_clone()?), w: s, line: String::new() })
    }

    fn read_line(&mut self) -> Result<&str> {
        self.line.clear();
        if self.r.read_line(&mut self.line)? == 0 {
            bail!("memcached closed the connection");
        }
        Ok(self.line.trim_end())
    }

    /// `stats` as (name, value) pairs.
    pub fn stats(&mut self) -> Result<Vec<(String, String)>> {
        self.w.write_all(b"stats\r\n")?;
        let mut out = Vec::new();
        loop {
            let l = self.read_line()?;
            if l == "END" {
                return Ok(out);
            }
            let mut it = l.split_whitespace();
            if let (Some("STAT"), Some(k), Some(v)) = (it.next(), it.next(), it.next()) {
                out.push((k.to_string(), v.to_string()));
            }
        }
    }

    pub fn stat(&mut self, name: &str) -> Result<u64> {
        let v = self.stats()?.into_iter().find(|(k, _)| k == name).with_context(|| format!("no stat {name}"))?.1;
        Ok(v.parse()?)
    }

    /// Pipelined sets of keys 0, 1, ... until the first eviction or refused write. Returns the
    /// keys acknowledged with STORED.
    pub fn fill(&mut self) -> Result<u64> {
        let mut buf = Vec::with_capacity((BATCH as usize) * 110);
        let mut stored = 0u64;
        let mut batches = 0u64;
        loop {
            buf.clear();
            for i in stored..stored + BATCH {
                buf.extend_from_slice(b"set ");
                buf.extend_from_slice(&key(i));
                buf.extend_from_slice(format!(" 0 0 {VALUE_LEN}\r\n").as_bytes());
                buf.extend_from_slice(&value(i));
                buf.extend_from_slice(b"\r\n");
            }
            self.w.write_all(&buf)?;
            let mut refused = false;
            let mut ok = 0;
            for _ in 0..BATCH {
                match self.read_line()? {
                    "STORED" => ok += 1,
                    _ => refused = true,
                }
            }
            // Replies come in order, so the first `ok` keys of the batch were stored when none
            // was refused; after a refusal the count is no longer a prefix: stop there.
            stored += ok;
            batches += 1;
            if refused {
                return Ok(stored);
            }
            if batches == CHECK_EVERY {
                batches = 0;
                if self.stat("evictions")? > 0 {
                    return Ok(stored);
                }
            }
        }
    }

    /// Keys 0..n served with the right value, served with a wrong value, missed (multi-gets).
    pub fn count(&mut self, n: u64) -> Result<(u64, u64, u64)> {
        let (mut served, mut wrong) = (0u64, 0u64);
        let mut start = 0;
        let mut buf = Vec::new();
        let mut data = vec![0u8; VALUE_LEN + 2];
        while start < n {
            // Ten multi-gets in flight per round trip.
            buf.clear();
            let mut cmds = 0;
            let mut i = start;
            while i < n && cmds < 10 {
                buf.extend_from_slice(b"get");
                for j in i..(i + MGET).min(n) {
                    buf.push(b' ');
                    buf.extend_from_slice(&key(j));
                }
                buf.extend_from_slice(b"\r\n");
                i = (i + MGET).min(n);
                cmds += 1;
            }
            self.w.write_all(&buf)?;
            let mut ends = 0;
            while ends < cmds {
                let l = self.read_line()?.to_string();
                if l == "END" {
                    ends += 1;
                    continue;
                }
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() < 4 || f[0] != "VALUE" {
                    bail!("unexpected reply {l:?}");
                }
                let idx: u64 = f[1][1..].parse().context("reply for a foreign key")?;
                let len: usize = f[3].parse()?;
                if len != VALUE_LEN {
                    wrong += 1;
                    let mut skip = vec![0u8; len + 2];
                    self.r.read_exact(&mut skip)?;
                    continue;
                }
                self.r.read_exact(&mut data)?;
                if data[..VALUE_LEN] == value(idx) && f[2] == "0" {
                    served += 1;
                } else {
                    wrong += 1;
                }
            }
            start = i;
        }
        Ok((served, wrong, n - served - wrong))
    }

    /// Sends `get key` and waits for the reply: `true` on a hit.
    pub fn probe(&mut self, k: &[u8]) -> Result<bool> {
        let mut cmd = b"get ".to_vec();
        cmd.extend_from_slice(k);
        cmd.extend_from_slice(b"\r\n");
        self.w.write_all(&cmd)?;
        let mut hit = false;
        loop {
            let l = self.read_line()?;
            if l == "END" {
                return Ok(hit);
            }
            if l.starts_with("VALUE") {
                hit = true;
                let mut d = vec![0u8; VALUE_LEN + 2];
                self.r.read_exact(&mut d)?;
            }
        }
    }
}

/// Sends `sig` to the child and waits for it to exit.
pub fn signal_and_wait(child: &mut Child, sig: libc::c_int) -> Result<()> {
    // SAFETY: kill with the pid of a child we spawned and have not reaped yet.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    if rc != 0 {
        bail!("kill({}, {sig}): {}", child.id(), std::io::Error::last_os_error());
    }
    child.wait()?;
    Ok(())
}
