//! Starting, checking and stopping the servers under test.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How to start one server.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub port: u16,
    /// Pin the server to this core (taskset).
    pub core: Option<usize>,
    /// Run it SCHED_FIFO at this priority (chrt).
    pub rt_priority: Option<i32>,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// memcached with memcached's own flags; `-u root` only when running as root (it refuses otherwise).
pub fn memcached(program: &Path, port: u16, threads: usize, memory_mb: u64, core: Option<usize>) -> ServerSpec {
    let mut args: Vec<String> = Vec::new();
    if is_root() {
        args.extend(["-u".into(), "root".into()]);
    }
    args.extend(["-U", "0", "-l", "127.0.0.1", "-c", "4096"].iter().map(|s| s.to_string()));
    args.extend(["-t".into(), threads.to_string(), "-m".into(), memory_mb.to_string(), "-p".into(), port.to_string()]);
    ServerSpec { name: "memcached".into(), program: program.into(), args, port, core, rt_priority: None }
}

/// segcache-server takes the same -p -l -m -t flags, and refuses root without -u as memcached;
/// `prefault` adds -L (its memory faulted in at start).
pub fn segcache(
    program: &Path,
    port: u16,
    threads: usize,
    memory_mb: u64,
    core: Option<usize>,
    prefault: bool,
) -> ServerSpec {
    let mut args: Vec<String> = Vec::new();
    if is_root() {
        args.extend(["-u".into(), "root".into()]);
    }
    if prefault {
        args.push("-L".into());
    }
    args.extend(["-l", "127.0.0.1"].iter().map(|s| s.to_string()));
    args.extend(["-t".into(), threads.to_string(), "-m".into(), memory_mb.to_string(), "-p".into(), port.to_string()]);
    ServerSpec { name: "segcache".into(), program: program.into(), args, port, core, rt_priority: None }
}

impl ServerSpec {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn command_line(&self) -> String {
        let mut s = String::new();
        if let Some(c) = self.core {
            s.push_str(&format!("taskset -c {c} "));
        }
        if let Some(p) = self.rt_priority {
            s.push_str(&format!("chrt -f {p} "));
        }
        s.push_str(&self.program.display().to_string());
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }

    /// Starts the server (its stderr goes to `log`) and waits until it answers `version`.
    pub fn start(&self, log: &Path) -> Result<Running> {
        if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(100)).is_ok() {
            bail!("port {} is already in use; pick another --base-port", self.port);
        }
        let err = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        // taskset and chrt exec what follows them, so the child pid is the server's pid.
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        if let Some(c) = self.core {
            argv.extend(["taskset".into(), "-c".into(), c.to_string().into()]);
        }
        if let Some(p) = self.rt_priority {
            argv.extend(["chrt".into(), "-f".into(), p.to_string().into()]);
        }
        argv.push(self.program.clone().into_os_string());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        cmd.args(&self.args).stdin(Stdio::null()).stdout(err.try_clone()?).stderr(err);
        let child = cmd.spawn().with_context(|| format!("starting {}", self.command_line()))?;
        let mut running = Running { name: self.name.clone(), pid: child.id(), addr: self.addr(), child };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = running.child.try_wait()? {
                let tail = std::fs::read_to_string(log).unwrap_or_default();
                bail!("{} exited at start ({status}): {}", self.name, tail.trim());
            }
            if version(self.addr()).is_ok() {
                return Ok(running);
            }
            if Instant::now() > deadline {
                bail!("{} did not answer `version` on {} within 15 s", self.name, self.addr());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Asks a server for its version line.
pub fn version(addr: SocketAddr) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"version\r\n")?;
    let mut buf = [0u8; 256];
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            bail!("connection closed");
        }
        got.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&got).trim().to_string();
    if !line.starts_with("VERSION") {
        bail!("unexpected reply to version: {line:?}");
    }
    Ok(line)
}

/// A started server; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Running {
    pub name: String,
    pub pid: u32,
    pub addr: SocketAddr,
    child: Child,
}

impl Running {
    pub fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        // SAFETY: kill with our own child's pid and a valid signal number.
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}
