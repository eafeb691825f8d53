//! `segcache-server`: run with no arguments to serve 127.0.0.1:11211 with a 64 MiB cache.
//! memcached's command line works too (see "Command line" in docs/server.md).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use segcache_server::{logger, Cli, Server, Settings};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.license {
        println!("segcache-server {}: licensed under {}", env!("CARGO_PKG_VERSION"), env!("CARGO_PKG_LICENSE"));
        return ExitCode::SUCCESS;
    }
    let mut settings = match Settings::load(cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("segcache-server: {e}");
            return ExitCode::from(2);
        }
    };
    logger::init(settings.log_level);
    // SAFETY: getuid and geteuid have no preconditions.
    let root = unsafe { libc::getuid() == 0 || libc::geteuid() == 0 };
    if root && settings.user.is_none() {
        // As memcached (EX_USAGE); `-u root` is accepted to run as root anyway.
        eprintln!("segcache-server: can't run as root without the -u switch (-u USER: whom to run as once listening)");
        return ExitCode::from(64);
    }
    if settings.coredumps {
        raise_core_limit();
    }
    if settings.daemon {
        // Before any thread starts: fork(2) copies only the calling thread.
        absolutize(&mut settings);
        if let Err(e) = daemonize(settings.log_level > log::LevelFilter::Warn) {
            eprintln!("segcache-server: cannot run as a daemon: {e}");
            return ExitCode::FAILURE;
        }
    }
    if settings.lock_memory {
        // MCL_FUTURE: the heap, mapped next, is locked too.
        // SAFETY: mlockall takes flags only and touches no memory of ours.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            log::warn!(
                "-k: cannot lock memory (mlockall: {}); raise `ulimit -l` (LimitMEMLOCK= under systemd) or run without -k; going on unlocked",
                std::io::Error::last_os_error()
            );
        }
    }
    // Installed before the (maybe long) start: a stop asked meanwhile is served once listening.
    // SIGHUP reloads the auth file (-Y, or MEMCACHED_SASL_PWDB with -S) and the TLS certificates,
    // as memcached; it is otherwise ignored. SIGUSR1 stops gracefully, as memcached's (which
    // keeps a restartable cache then). SIGUSR2 writes the heap to stable storage (--persist).
    let mut signals = match Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("segcache-server: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let user = settings.user.clone();
    let auth_users = settings.users.clone();
    let pidfile = settings.pidfile.clone();
    let unix_socket = settings.unix_socket.clone();
    let persist = settings.engine.path.clone();
    let server = match Server::bind(settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("segcache-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = &persist {
        segcache_server::bus_error::report_lost_file(path);
    }
    if let Some(p) = &pidfile {
        // Written before giving up root, so that it may live in /run.
        if let Err(e) = write_pidfile(p) {
            log::warn!("cannot write the pid file {}: {e}", p.display());
        }
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    match (&user, root) {
        (Some(name), true) => {
            if let Err(e) = drop_privileges(name, unix_socket.as_deref()) {
                eprintln!("segcache-server: {e}");
                remove_pidfile(pidfile.as_deref());
                return ExitCode::from(67);
            }
            log::info!("running as user {name}");
        }
        (Some(name), false) => log::info!("-u {name} ignored: not started as root"),
        (None, _) => {}
    }
    let stop = server.stop_handle();
    let tls = server.tls();
    let sync = server.syncer();
    std::thread::spawn(move || {
        let mut seen = false;
        for sig in signals.forever() {
            if sig == SIGHUP {
                match auth_users.as_ref().map(|u| u.reload()) {
                    Some(Ok(n)) => log::info!("SIGHUP: auth file reloaded, {n} users"),
                    Some(Err(e)) => log::warn!("SIGHUP: {e}; the users stay as they were"),
                    None => {}
                }
                if let Some(tls) = &tls {
                    if let Err(e) = tls.reload() {
                        log::error!("Could not reload TLS certificates on SIGHUP: {e}");
                    }
                }
                continue;
            }
            if sig == SIGUSR2 {
                let started = std::time::Instant::now();
                match sync() {
                    Ok(()) => log::info!("SIGUSR2: the heap is on stable storage ({:?})", started.elapsed()),
                    Err(e) => log::error!("SIGUSR2: writing the heap to stable storage failed: {e}"),
                }
                continue;
            }
            if seen {
                // A second signal: the operator does not want to wait for the drain.
                eprintln!("segcache-server: second signal, exiting now");
                std::process::exit(1);
            }
            seen = true;
            log::info!("signal {sig}: stopping gracefully");
            stop.stop();
        }
    });
    let result = server.run();
    remove_pidfile(pidfile.as_deref());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("segcache-server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes our pid to `p` whole: a temporary file beside it, renamed over it, so that a script
/// polling for the file never reads it empty or half written. Where no file can be made beside
/// it (a pid file of ours in a folder we may not write), `p` is written in place.
fn write_pidfile(p: &Path) -> std::io::Result<()> {
    let line = format!("{}\n", std::process::id());
    let mut tmp = p.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    match std::fs::write(&tmp, &line).and_then(|()| std::fs::rename(&tmp, p)) {
        Ok(()) => Ok(()),
        Err(_) => {
            let _ = std::fs::remove_file(&tmp);
            std::fs::write(p, line)
        }
    }
}

fn remove_pidfile(p: Option<&Path>) {
    if let Some(p) = p {
        if let Err(e) = std::fs::remove_file(p) {
            log::warn!("cannot remove the pid file {}: {e}", p.display());
        }
    }
}

/// A daemon runs in `/`: make the paths given relative to the start directory absolute first.
fn absolutize(s: &mut Settings) {
    let Ok(cwd) = std::env::current_dir() else { return };
    let abs = |p: &mut Option<PathBuf>| {
        if let Some(path) = p.as_mut() {
            if path.is_relative() {
                *path = cwd.join(&*path);
            }
        }
    };
    abs(&mut s.pidfile);
    abs(&mut s.engine.path);
    abs(&mut s.unix_socket);
    // The TLS files are read again on a reload, long after the chdir.
    if let Some(t) = s.tls.as_mut() {
        if t.chain_cert.is_relative() {
            t.chain_cert = cwd.join(&t.chain_cert);
        }
        abs(&mut t.key);
        abs(&mut t.ca_cert);
    }
    if let Some(k) = s.klog.as_mut() {
        if k.path.is_relative() {
            k.path = cwd.join(&k.path);
        }
    }
}

/// fork, the parent exits, setsid, chdir /, stdin and stdout (and stderr unless `keep_stderr`)
/// to /dev/null: as memcached's daemonize().
fn daemonize(keep_stderr: bool) -> std::io::Result<()> {
    // SAFETY: called while the process has a single thread (before the engine, the workers and
    // the signal thread start), so the child is a complete copy; the parent only exits.
    match unsafe { libc::fork() } {
        -1 => return Err(std::io::Error::last_os_error()),
        0 => {}
        // SAFETY: _exit ends the parent at once, without running destructors twice.
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: setsid has no preconditions; the child is not a process group leader.
    if unsafe { libc::setsid() } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    std::env::set_current_dir("/")?;
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    use std::os::fd::AsRawFd;
    let targets: &[i32] = if keep_stderr { &[0, 1] } else { &[0, 1, 2] };
    for &fd in targets {
        // SAFETY: both descriptors are open; dup2 replaces the standard one atomically.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `-r`: the core file size limit raised to its hard limit.
fn raise_core_limit() {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the plain struct we own.
    let ok = unsafe {
        libc::getrlimit(libc::RLIMIT_CORE, &mut rl) == 0 && {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_CORE, &rl) == 0
        }
    };
    if !ok {
        log::warn!("-r: cannot raise the core file limit: {}", std::io::Error::last_os_error());
    }
}

/// `-u`: becomes `name` (its group, then its user); the UNIX socket, made by root, is given to it.
fn drop_privileges(name: &str, unix_socket: Option<&Path>) -> Result<(), String> {
    let cname = CString::new(name).map_err(|_| format!("can't find the user {name} to switch to"))?;
    // SAFETY: getpwnam reads a NUL-terminated name; the returned record is copied at once, before
    // any other call that could reuse its static storage (no other thread calls getpwnam).
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(cname.as_ptr());
        if pw.is_null() {
            return Err(format!("can't find the user {name} to switch to"));
        }
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    if let Some(path) = unix_socket {
        let cpath = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: chown reads a NUL-terminated path.
        if unsafe { libc::chown(cpath.as_ptr(), uid, gid) } != 0 {
            log::warn!("cannot give {} to {name}: {}", path.display(), std::io::Error::last_os_error());
        }
    }
    // SAFETY: setgroups reads one gid from a live array; setgid/setuid take plain ids. glibc
    // applies each to every thread of the process.
    unsafe {
        if libc::setgroups(1, &gid) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(format!("failed to assume the identity of {name}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_pid_file_is_replaced_whole_and_leaves_nothing_beside_it() {
        let dir = std::env::temp_dir().join(format!("segcache-pidfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("server.pid");
        std::fs::write(&p, "stale, from a crashed run\n").unwrap();
        let stale = std::fs::metadata(&p).unwrap().ino();
        write_pidfile(&p).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{}\n", std::process::id()));
        // A new file renamed over the old one, never the old one truncated then written: a
        // reader that opened the old file meanwhile reads it whole too.
        assert_ne!(std::fs::metadata(&p).unwrap().ino(), stale);
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["server.pid"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
