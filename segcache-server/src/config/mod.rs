//! Settings: memcached-style command-line flags, an optional TOML file, and defaults, merged in
//! that order of precedence (a flag overrides the file, the file overrides the default).
//!
//! - [`cli`]: the command line; [`file`]: the TOML file; [`memcached_opts`]: memcached's `-o`
//!   list; [`size`]: sizes, read with the engine's parser.
//! - [`tls`]: TLS from `-Z`, `-o ssl_*` and `[tls]`; [`engine`]: the engine's settings, the
//!   persistence file's layout and the engine's `Builder`.
//! - [`settings`]: what they resolve to; [`error`]: why they may not.
//!
//! This file composes them: [`Settings::load`] and [`Settings::resolve`], a step per concern.

mod cli;
mod engine;
mod error;
mod file;
mod memcached_opts;
mod settings;
mod size;
mod tls;

use std::path::PathBuf;

pub use cli::Cli;
pub use error::ConfigError;
pub use file::FileConfig;
pub use memcached_opts::{parse_extended, Extended};
pub use settings::{HotKeySettings, KlogSettings, Protocol, Settings};

/// The default largest reply held for a retrieval line too long to parse whole (other multi-gets
/// are streamed). Replies are copied out of the engine, so this is what such a line can make
/// the server hold (see "Resource bounds" in docs/server.md).
pub const DEFAULT_MAX_REPLY: usize = 16 << 20;
/// Requests one connection may run per turn of its worker's event loop before the other
/// connections of the worker get theirs, unless `-R` says otherwise: a deep pipeline (hundreds of
/// kilobytes of `touch`, or many `get`s) is cut into slices, and the rest waits on the worker's
/// ready list.
pub const DEFAULT_REQS_PER_EVENT: usize = 256;
/// The largest `--max-reply-size` accepted: room for one value of the largest `-I` (1 GiB) and
/// more.
pub const MAX_REPLY_LIMIT: usize = 2 << 30;

impl Default for Settings {
    fn default() -> Self {
        Settings::resolve(Cli::default(), FileConfig::default()).expect("defaults are valid")
    }
}

impl Settings {
    /// Reads the file named by `--config` (if any) and merges it under the flags.
    pub fn load(cli: Cli) -> Result<Settings, ConfigError> {
        let file = match &cli.config {
            Some(path) => FileConfig::read(path)?,
            None => FileConfig::default(),
        };
        let mut s = Settings::resolve(cli, file)?;
        s.load_users(std::env::var_os(crate::auth::SASL_PWDB_ENV).map(PathBuf::from))?;
        Ok(s)
    }

    /// Merges flags over the file over the defaults and checks the result. A step's refusal is
    /// the first one met in the order below.
    pub fn resolve(cli: Cli, file: FileConfig) -> Result<Settings, ConfigError> {
        cli.refuse_unsupported()?;
        let ext = parse_extended(&cli.extended)?;
        let tls = tls::resolve(cli.enable_ssl, &ext, &file.tls)?;
        let max_item_size = engine::max_item_size(&cli, &file)?;
        let max_reply_size = max_reply_size(&cli, &file, max_item_size)?;
        let engine = engine::resolve(&cli, &ext, &file, max_item_size)?;
        let (threads, max_connections) = workers(&cli, &file)?;
        let log_level = log_level(&cli, &file)?;
        let cores = cores(&cli, &file)?;
        let listen = listeners(&cli, &file)?;
        let protocol = protocol(&cli, &file)?;
        let klog = klog(&ext, &file)?;
        let hotkeys = hotkeys(&ext, &file)?;
        Ok(Settings {
            port: listen.port,
            listen: listen.addresses,
            unix_socket: listen.unix_socket,
            unix_mask: listen.unix_mask,
            backlog: listen.backlog,
            reqs_per_event: listen.reqs_per_event,
            protocol,
            idle_timeout: ext.idle_timeout.or(file.idle_timeout).unwrap_or(0),
            track_sizes: ext.track_sizes,
            detail: cli.prefix_delimiter.is_some(),
            user: cli.user.or(file.user),
            pidfile: cli.pidfile.or(file.pidfile),
            daemon: cli.daemon,
            lock_memory: cli.lock_memory,
            coredumps: cli.enable_coredumps,
            tls,
            threads,
            max_connections,
            max_item_size,
            max_reply_size,
            engine,
            pin: !cli.no_pin && file.pin.unwrap_or(true),
            cores,
            admin_port: cli.admin_port.or(file.admin_port),
            admin_listen: cli.admin_listen.or(file.admin_listen).unwrap_or_else(|| "127.0.0.1".into()),
            busy_poll_us: ext.busy_poll_us.or(file.busy_poll_us).unwrap_or(0),
            klog,
            hotkeys,
            log_level,
            shutdown_command: cli.enable_shutdown || file.enable_shutdown.unwrap_or(false),
            auth_file: cli.auth_file,
            sasl: cli.enable_sasl,
            users: None,
            flush_enabled: !cli.disable_flush_all,
            dump_enabled: !cli.disable_dumping,
            watch_enabled: !cli.disable_watch,
        })
    }

    /// Reads the user file that `-Y` names, or (with `-S` alone) that MEMCACHED_SASL_PWDB names,
    /// into `users`; refuses one that group or others may read or write, and `-S` without
    /// MEMCACHED_SASL_PWDB.
    pub fn load_users(&mut self, sasl_pwdb: Option<PathBuf>) -> Result<(), ConfigError> {
        let (path, what) = match (&self.auth_file, self.binary_auth()) {
            (Some(p), _) => (p.clone(), "-Y"),
            (None, true) => match sasl_pwdb {
                Some(p) => (p, crate::auth::SASL_PWDB_ENV),
                None => return Err(ConfigError::SaslUsersUnnamed),
            },
            (None, false) => return Ok(()),
        };
        let users = crate::auth::UserFile::load(&path, what).map_err(ConfigError::Users)?;
        self.users = Some(std::sync::Arc::new(users));
        Ok(())
    }
}

/// `--max-reply-size` over the file's: at least one value of the largest size and its header
/// (unless told, the default or that floor, whichever is larger).
fn max_reply_size(cli: &Cli, file: &FileConfig, max_item_size: usize) -> Result<usize, ConfigError> {
    let floor = max_item_size as u64 + 1024;
    let n = match (&cli.max_reply_size, &file.max_reply_size) {
        (Some(s), _) => size::bytes(s)?,
        (None, Some(s)) => s.bytes()?,
        (None, None) => (DEFAULT_MAX_REPLY as u64).max(floor),
    };
    if n < floor || n > MAX_REPLY_LIMIT as u64 {
        return Err(ConfigError::MaxReplySize { got: n, floor, max: MAX_REPLY_LIMIT });
    }
    Ok(n as usize)
}

/// `-t` (one worker per core unless told) and `-c` (memcached's 1024 unless told).
fn workers(cli: &Cli, file: &FileConfig) -> Result<(usize, usize), ConfigError> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = cli.threads.or(file.threads).unwrap_or(cores);
    if threads == 0 || threads > 1024 {
        return Err(ConfigError::Threads(threads));
    }
    let max_connections = cli.max_connections.or(file.max_connections).unwrap_or(1024);
    if max_connections == 0 {
        return Err(ConfigError::NoConnections);
    }
    Ok((threads, max_connections))
}

/// `--log-level` over `-v`s over the file's, else warnings.
fn log_level(cli: &Cli, file: &FileConfig) -> Result<log::LevelFilter, ConfigError> {
    let parse = |s: &str| s.parse().map_err(|_| ConfigError::LogLevel(s.to_string()));
    match (&cli.log_level, cli.verbose, &file.log_level) {
        (Some(l), _, _) => parse(l),
        (None, 1, _) => Ok(log::LevelFilter::Info),
        (None, 2, _) => Ok(log::LevelFilter::Debug),
        (None, v, _) if v > 2 => Ok(log::LevelFilter::Trace),
        (None, _, Some(l)) => parse(l),
        (None, _, None) => Ok(log::LevelFilter::Warn),
    }
}

/// `--cores` over the file's: the cores workers are pinned to, when given.
fn cores(cli: &Cli, file: &FileConfig) -> Result<Option<Vec<usize>>, ConfigError> {
    let cores = cli.cores.clone().or_else(|| file.cores.clone());
    if cores.as_ref().is_some_and(Vec::is_empty) {
        return Err(ConfigError::NoCores);
    }
    Ok(cores)
}

/// Where and how connections are taken.
struct Listeners {
    port: u16,
    /// `-l`'s addresses, comma separated.
    addresses: String,
    unix_socket: Option<PathBuf>,
    unix_mask: u32,
    backlog: i32,
    reqs_per_event: usize,
}

/// `-p -l -s -a -b -R` over the file's.
fn listeners(cli: &Cli, file: &FileConfig) -> Result<Listeners, ConfigError> {
    let unix_mask = match cli.unix_mask.as_ref().or(file.unix_mask.as_ref()) {
        Some(m) => {
            u32::from_str_radix(m, 8).ok().filter(|&m| m <= 0o777).ok_or_else(|| ConfigError::UnixMask(m.clone()))?
        }
        None => 0o700,
    };
    let backlog = cli.backlog.or(file.listen_backlog).unwrap_or(1024);
    if backlog <= 0 {
        return Err(ConfigError::Backlog(backlog));
    }
    let reqs_per_event = cli.reqs_per_event.or(file.reqs_per_event).unwrap_or(DEFAULT_REQS_PER_EVENT);
    if reqs_per_event == 0 {
        return Err(ConfigError::NoRequestsPerEvent);
    }
    // -l takes a comma list, and may be repeated.
    let listen: Vec<String> = cli.listen.iter().flat_map(|l| l.split(',')).map(|l| l.trim().to_string()).collect();
    let addresses = match listen.is_empty() {
        true => file.listen.clone().unwrap_or_else(|| "127.0.0.1".into()),
        false => listen.join(","),
    };
    Ok(Listeners {
        port: cli.port.or(file.port).unwrap_or(11211),
        addresses,
        unix_socket: cli.unix_socket.clone().or_else(|| file.unix_socket.clone()),
        unix_mask,
        backlog,
        reqs_per_event,
    })
}

/// `-B` over the file's, and what `-S` and `-Y` make of it.
fn protocol(cli: &Cli, file: &FileConfig) -> Result<Protocol, ConfigError> {
    let given = cli.protocol.as_deref().or(file.protocol.as_deref());
    let mut protocol = match given {
        None | Some("auto") | Some("negotiate") => Protocol::Auto,
        Some("ascii") => Protocol::Ascii,
        Some("binary") => Protocol::Binary,
        Some(p) => return Err(ConfigError::Protocol(p.to_string())),
    };
    // As memcached: SASL is the binary protocol's, the auth file the text protocol's; each
    // makes the server speak only that protocol unless -B says otherwise, which it may
    // not (so with both -S and -Y, and no -B, the text protocol and the file win).
    if cli.enable_sasl {
        match given.is_some() {
            false => protocol = Protocol::Binary,
            true if protocol != Protocol::Binary => return Err(ConfigError::SaslNeedsBinary),
            true => {}
        }
    }
    if cli.auth_file.is_some() {
        match given.is_some() {
            false => protocol = Protocol::Ascii,
            true if protocol != Protocol::Ascii => return Err(ConfigError::AuthFileNeedsAscii),
            true => {}
        }
    }
    Ok(protocol)
}

/// `-o klog_file=PATH,klog_sample=N,klog_max_bytes=SIZE` over the file's: the sampled command
/// log, when it has a file.
fn klog(ext: &Extended, file: &FileConfig) -> Result<Option<KlogSettings>, ConfigError> {
    let Some(path) = ext.klog_file.clone().or_else(|| file.klog_file.clone()) else {
        return Ok(None);
    };
    let sample = ext.klog_sample.or(file.klog_sample).unwrap_or(100);
    let max_bytes = match (ext.klog_max_bytes, &file.klog_max_bytes) {
        (Some(n), _) => n,
        (None, Some(s)) => s.bytes()?,
        (None, None) => 1 << 30,
    };
    if sample == 0 {
        return Err(ConfigError::KlogSample);
    }
    if max_bytes < 4096 {
        return Err(ConfigError::KlogMaxBytes(max_bytes));
    }
    Ok(Some(KlogSettings { path, sample, max_bytes }))
}

/// `-o hotkey_sample=N,hotkey_top=K` over the file's.
fn hotkeys(ext: &Extended, file: &FileConfig) -> Result<HotKeySettings, ConfigError> {
    let d = HotKeySettings::default();
    let hotkeys = HotKeySettings {
        sample: ext.hotkey_sample.or(file.hotkey_sample).unwrap_or(d.sample),
        top: ext.hotkey_top.or(file.hotkey_top).unwrap_or(d.top),
    };
    if hotkeys.top == 0 || hotkeys.top > 1000 {
        return Err(ConfigError::HotkeyTop(hotkeys.top));
    }
    Ok(hotkeys)
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use segcache_core::Policy;

    use super::*;

    fn cli(args: &[&str]) -> Cli {
        let mut v = vec!["segcache-server"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap()
    }

    #[test]
    fn defaults_match_memcached() {
        let s = Settings::resolve(cli(&[]), FileConfig::default()).unwrap();
        assert_eq!((s.port, s.listen.as_str(), s.engine.memory_bytes), (11211, "127.0.0.1", 64 << 20));
        assert_eq!((s.max_connections, s.max_item_size, s.engine.eviction), (1024, 1 << 20, Policy::Merge));
        assert!(s.pin && s.admin_port.is_none() && s.engine.path.is_none() && !s.shutdown_command);
        assert!(Settings::resolve(cli(&["-A"]), FileConfig::default()).unwrap().shutdown_command);
        assert_eq!(s.threads, std::thread::available_parallelism().unwrap().get());
    }

    #[test]
    fn flags_override_the_file() {
        let file: FileConfig = toml::from_str(
            "port = 1\nthreads = 3\nmax_item_size = \"2m\"\npin = false\nadmin_port = 9\n[engine]\neviction = \"fifo\"\npath = \"/tmp/x\"\nlazy_verify = true\nprefault = true\n",
        )
        .unwrap();
        let s = Settings::resolve(cli(&["-p", "2", "-I", "512k", "-vv"]), file).unwrap();
        assert_eq!((s.port, s.threads, s.max_item_size), (2, 3, 512 << 10));
        assert_eq!((s.engine.eviction, s.pin, s.admin_port), (Policy::Fifo, false, Some(9)));
        assert_eq!(s.engine.path.as_deref(), Some(std::path::Path::new("/tmp/x")));
        assert!(s.engine.lazy_verify && s.engine.prefault);
        assert_eq!(s.log_level, log::LevelFilter::Debug);
        let file: FileConfig = toml::from_str(
            "unix_socket = \"/tmp/s\"\nunix_mask = \"770\"\nlisten_backlog = 9\nreqs_per_event = 3\nprotocol = \"binary\"\nidle_timeout = 30\nuser = \"mc\"\npidfile = \"/tmp/p\"\n",
        )
        .unwrap();
        let s = Settings::resolve(cli(&["-R", "5"]), file).unwrap();
        assert_eq!(s.unix_socket.as_deref(), Some(std::path::Path::new("/tmp/s")));
        assert_eq!((s.unix_mask, s.backlog, s.reqs_per_event, s.idle_timeout), (0o770, 9, 5, 30));
        assert_eq!((s.protocol, s.user.as_deref()), (Protocol::Binary, Some("mc")));
        assert_eq!(s.pidfile.as_deref(), Some(std::path::Path::new("/tmp/p")));
    }

    #[test]
    fn segment_size_follows_the_item_size() {
        for (item, segment) in
            [("1m", 1 << 20), ("100k", 1 << 20), ("1025k", 2 << 20), ("2m", 2 << 20), ("3m", 4 << 20)]
        {
            let s = Settings::resolve(cli(&["-I", item]), FileConfig::default()).unwrap();
            assert_eq!(s.engine.segment_size, segment, "-I {item}");
        }
        let s = Settings::resolve(cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(s.engine.segment_size, 1 << 20);
    }

    /// memcached's `-I` rules: from 1k to 1 GiB, at most half of `-m`. Items above what a segment
    /// holds are chunked: the segments stay at most 4 MiB, and the shards are few enough that
    /// each holds four of the largest item.
    #[test]
    fn the_item_size_goes_to_a_gigabyte_and_half_the_memory() {
        let s = Settings::resolve(cli(&["-I", "32m", "-m", "1024"]), FileConfig::default()).unwrap();
        assert_eq!((s.max_item_size, s.engine.segment_size), (32 << 20, 4 << 20));
        assert!(s.max_reply_size > 32 << 20);
        let b = s.builder();
        assert!(b.shard_count().unwrap() <= 8);
        let s = Settings::resolve(cli(&["-I", "1024m", "-m", "4096"]), FileConfig::default()).unwrap();
        assert_eq!((s.max_item_size, s.engine.segment_size), (1 << 30, 4 << 20));
        for bad in [&["-I", "1025m", "-m", "4096"][..], &["-I", "33m", "-m", "64"], &["-I", "1000"]] {
            let err = Settings::resolve(cli(bad), FileConfig::default()).unwrap_err();
            assert!(matches!(err, ConfigError::MaxItemSize { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn max_reply_size_defaults_and_floor() {
        let s = Settings::resolve(cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(s.max_reply_size, DEFAULT_MAX_REPLY);
        let s = Settings::resolve(cli(&["--max-reply-size", "4m"]), FileConfig::default()).unwrap();
        assert_eq!(s.max_reply_size, 4 << 20);
        let file: FileConfig = toml::from_str("max_reply_size = \"3m\"\n").unwrap();
        assert_eq!(Settings::resolve(cli(&[]), file).unwrap().max_reply_size, 3 << 20);
        // A reply must hold at least one value of the largest size.
        assert!(Settings::resolve(cli(&["-I", "2m", "--max-reply-size", "2m"]), FileConfig::default()).is_err());
        assert!(Settings::resolve(cli(&["--max-reply-size", "3g"]), FileConfig::default()).is_err());
    }

    fn refused(args: &[&str]) -> String {
        Settings::resolve(cli(args), FileConfig::default()).unwrap_err().to_string()
    }

    #[test]
    fn memcached_command_lines_parse() {
        // memcached's flags as init scripts and containers pass them.
        let s = Settings::resolve(
            cli(&["-u", "memcache", "-U", "0", "-P", "/run/mc.pid", "-o", "idle_timeout=600", "-d", "-k", "-L"]),
            FileConfig::default(),
        )
        .unwrap();
        assert_eq!(s.user.as_deref(), Some("memcache"));
        assert_eq!(s.pidfile.as_deref(), Some(std::path::Path::new("/run/mc.pid")));
        assert_eq!(s.idle_timeout, 600);
        assert!(s.daemon && s.lock_memory);
        for (m, mb) in [("100", 100u64), ("100m", 100), ("2G", 2048)] {
            let s = Settings::resolve(cli(&["-m", m]), FileConfig::default()).unwrap();
            assert_eq!(s.engine.memory_bytes as u64, mb << 20, "{m}");
        }
        assert!(Cli::try_parse_from(["segcache-server", "-m", "64x"]).is_err());
        let s = Settings::resolve(
            cli(
                &"-s /tmp/mc.sock -a 0766 -b 64 -R 1 -B ascii -e /tmp/mc.file -M -f 1.25 -n 48 -r -D : -N 0 -c 10 -t 2"
                    .split(' ')
                    .collect::<Vec<_>>(),
            ),
            FileConfig::default(),
        )
        .unwrap();
        assert_eq!(s.unix_socket.as_deref(), Some(std::path::Path::new("/tmp/mc.sock")));
        assert_eq!((s.unix_mask, s.backlog, s.reqs_per_event), (0o766, 64, 1));
        assert_eq!((s.protocol, s.engine.eviction), (Protocol::Ascii, Policy::None));
        assert_eq!(s.engine.path.as_deref(), Some(std::path::Path::new("/tmp/mc.file")));
        assert!(s.coredumps && s.detail);
        let d = Settings::resolve(cli(&[]), FileConfig::default()).unwrap();
        assert_eq!((d.unix_mask, d.backlog, d.reqs_per_event), (0o700, 1024, DEFAULT_REQS_PER_EVENT));
        assert_eq!((d.protocol, d.idle_timeout, d.daemon, d.user.is_none()), (Protocol::Auto, 0, false, true));
        // -l takes a comma list, and may be repeated.
        let s = Settings::resolve(cli(&["-l", "127.0.0.1,::1", "-l", "127.0.0.2:99"]), FileConfig::default()).unwrap();
        assert_eq!(s.listen, "127.0.0.1,::1,127.0.0.2:99");
        let s = Settings::resolve(cli(&["-B", "binary"]), FileConfig::default()).unwrap();
        assert_eq!(s.protocol, Protocol::Binary);
    }

    #[test]
    fn observability_options() {
        let s = Settings::default();
        assert_eq!((s.admin_listen.as_str(), s.busy_poll_us, s.klog.is_none()), ("127.0.0.1", 0, true));
        assert_eq!((s.hotkeys.sample, s.hotkeys.top), (100, 10));
        let s = Settings::resolve(
            cli(&[
                "-o",
                "klog_file=/tmp/k.log,klog_sample=10,klog_max_bytes=1m",
                "-o",
                "busy_poll_us=50,hotkey_sample=0,hotkey_top=3",
                "--admin-listen",
                "0.0.0.0",
            ]),
            FileConfig::default(),
        )
        .unwrap();
        let k = s.klog.unwrap();
        assert_eq!((k.path.to_str(), k.sample, k.max_bytes), (Some("/tmp/k.log"), 10, 1 << 20));
        assert_eq!((s.busy_poll_us, s.hotkeys.sample, s.hotkeys.top, s.admin_listen.as_str()), (50, 0, 3, "0.0.0.0"));
        let file: FileConfig =
            toml::from_str("klog_file = \"k\"\nklog_max_bytes = \"64k\"\nbusy_poll_us = 20\nadmin_listen = \"::1\"\n")
                .unwrap();
        let s = Settings::resolve(cli(&[]), file).unwrap();
        assert_eq!(s.klog.map(|k| (k.sample, k.max_bytes)), Some((100, 64 << 10)));
        assert_eq!((s.busy_poll_us, s.admin_listen.as_str()), (20, "::1"));
        assert!(Settings::resolve(cli(&["-o", "klog_file=/k,klog_sample=0"]), FileConfig::default()).is_err());
        assert!(parse_extended(&["klog_file".into()]).unwrap_err().to_string().contains("klog_file=PATH"));
    }

    /// The touch-ahead thread runs unless `-o no_touch_ahead` or the file's `[engine]` says not;
    /// the flag wins over the file.
    #[test]
    fn touch_ahead_is_on_unless_turned_off() {
        let off: FileConfig = toml::from_str("[engine]\ntouch_ahead = false\n").unwrap();
        assert!(Settings::resolve(cli(&[]), FileConfig::default()).unwrap().engine.touch_ahead);
        assert!(!Settings::resolve(cli(&["-o", "no_touch_ahead"]), FileConfig::default()).unwrap().engine.touch_ahead);
        assert!(!Settings::resolve(cli(&[]), off).unwrap().engine.touch_ahead);
        let off: FileConfig = toml::from_str("[engine]\ntouch_ahead = false\n").unwrap();
        assert!(Settings::resolve(cli(&["-o", "touch_ahead"]), off).unwrap().engine.touch_ahead);
    }

    /// Promotion on read is off unless `-o tier_promote_after=N` or the file's `[engine]` sets it;
    /// `-o` wins, and N past 255 is refused.
    #[test]
    fn tier_promotion_is_off_unless_set() {
        let file = || -> FileConfig { toml::from_str("[engine]\ntier_promote_after = 4\n").unwrap() };
        let resolve =
            |args: &[&str], f: FileConfig| Settings::resolve(cli(args), f).map(|s| s.engine.tier_promote_after);
        assert_eq!(resolve(&[], FileConfig::default()).unwrap(), 0);
        assert_eq!(resolve(&[], file()).unwrap(), 4);
        assert_eq!(resolve(&["-o", "tier_promote_after=2"], file()).unwrap(), 2);
        assert!(resolve(&["-o", "tier_promote_after=256"], FileConfig::default()).is_err());
        assert!(resolve(&["-o", "tier_promote_after"], FileConfig::default()).is_err());
    }

    /// The tier's write queue is the engine's default unless `-o tier_write_queue=SIZE` or the
    /// file's `[engine]` sets it; `-o` wins, and 0 turns the queue off.
    #[test]
    fn the_tier_write_queue_is_the_engines_unless_set() {
        let file = || -> FileConfig { toml::from_str("[engine]\ntier_write_queue = \"1m\"\n").unwrap() };
        let resolve = |args: &[&str], f: FileConfig| Settings::resolve(cli(args), f).map(|s| s.engine.tier_write_queue);
        assert_eq!(resolve(&[], FileConfig::default()).unwrap(), None);
        assert_eq!(resolve(&[], file()).unwrap(), Some(1 << 20));
        assert_eq!(resolve(&["-o", "tier_write_queue=0"], file()).unwrap(), Some(0));
        assert_eq!(resolve(&["-o", "tier_write_queue=64k"], FileConfig::default()).unwrap(), Some(64 << 10));
        assert!(resolve(&["-o", "tier_write_queue"], FileConfig::default()).is_err());
        assert!(resolve(&["-o", "tier_write_queue=lots"], FileConfig::default()).is_err());
    }

    #[test]
    fn extended_options() {
        let x = parse_extended(&["modern,no_lru_crawler, no_lru_maintainer".into(), "hashpower=20,track_sizes".into()])
            .unwrap();
        assert_eq!(x, Extended { hash_power: Some(20), track_sizes: true, ..Extended::default() });
        let s =
            Settings::resolve(cli(&["-o", "hashpower=18,idle_timeout=5,lru_crawler"]), FileConfig::default()).unwrap();
        assert_eq!((s.engine.hash_power, s.idle_timeout), (Some(18), 5));
        assert!(parse_extended(&["idle_timeout".into()]).unwrap_err().to_string().contains("idle_timeout=N"));
        assert!(parse_extended(&["idle_timeout=x".into()]).is_err());
        assert!(parse_extended(&["hashpower=70".into()]).is_err());
        assert!(parse_extended(&["frobnicate".into()]).unwrap_err().to_string().contains("Illegal suboption"));
        assert_eq!(parse_extended(&["ssl_chain_cert=/x".into()]).unwrap().ssl_chain_cert, Some("/x".into()));
        assert!(parse_extended(&["ssl_ciphers=x".into()]).unwrap_err().to_string().contains("not supported"));
        assert!(parse_extended(&["ssl_verify_mode=5".into()]).is_err());
    }

    /// memcached's `ext_path=FILE:SIZE` sets the flash tier, SIZE read as memcached reads it; the
    /// extstore options that only tune extstore's own file are accepted, those that change which
    /// items go to flash or stay there are refused, each saying why.
    #[test]
    fn ext_path_sets_the_flash_tier() {
        let tier = |opts: &str| parse_extended(&[opts.into()]).map(|x| x.ext_path);
        assert_eq!(tier("ext_path=/mnt/f/cache:64G").unwrap(), Some(("/mnt/f/cache".into(), 64 << 30)));
        assert_eq!(tier("ext_path=/x:512m").unwrap(), Some(("/x".into(), 512 << 20)));
        assert_eq!(tier("ext_path=/x:2t").unwrap(), Some(("/x".into(), 2 << 40)));
        assert_eq!(tier("ext_path=/x:1P").unwrap(), Some(("/x".into(), 1 << 50)));
        assert_eq!(
            tier("ext_page_size=8,ext_wbuf_size=4,ext_threads=2,ext_io_depth=4,ext_max_sleep=100").unwrap(),
            None
        );
        for (opts, words) in [
            ("ext_path", "missing"),
            ("ext_path=", "missing"),
            ("ext_path=/x", "no size"),
            ("ext_path=:1G", "no file"),
            ("ext_path=/x:1024", "unit"),
            ("ext_path=/x:1k", "unit"),
            ("ext_path=/x:1é", "unit"),
            ("ext_path=/x:G", "whole number"),
            ("ext_path=/x:1.5G", "whole number"),
            ("ext_path=/x:0G", "whole number"),
            ("ext_path=/x:99999999999P", "too large"),
            ("ext_path=/x:1G:compact", "bucket"),
            ("ext_path=/x:1G,ext_path=/y:1G", "one file"),
            ("ext_item_size=512", "whatever its size"),
            ("ext_item_age=10", "idle time"),
            ("ext_low_ttl=10", "TTL"),
            ("ext_recache_rate=2000", "brings it back"),
            ("ext_compact_under=10", "compact"),
            ("ext_max_frag=0.5", "compact"),
            ("ext_drop_under=10", "oldest segment"),
            ("ext_drop_unread", "oldest segment"),
            ("ext_frobnicate=1", "docs/server.md"),
        ] {
            let e = tier(opts).unwrap_err().to_string();
            assert!(e.contains(words), "{opts}: {e}");
        }
    }

    /// The file's `[engine]` table sets the tier with `tier_path` and `tier_size` together;
    /// `-o ext_path` wins over it.
    #[test]
    fn the_config_file_sets_the_tier() {
        let file = |text: &str| toml::from_str::<FileConfig>(text).unwrap();
        let both = "[engine]\ntier_path = \"/mnt/f/cache\"\ntier_size = \"2g\"\n";
        let s = Settings::resolve(cli(&[]), file(both)).unwrap();
        assert_eq!(s.engine.tier, Some(("/mnt/f/cache".into(), 2 << 30)));
        let s = Settings::resolve(cli(&["-o", "ext_path=/x:1g"]), file(both)).unwrap();
        assert_eq!(s.engine.tier, Some(("/x".into(), 1 << 30)));
        let s = Settings::resolve(cli(&[]), file("[engine]\ntier_path = \"/x\"\ntier_size = 1048576\n")).unwrap();
        assert_eq!(s.engine.tier, Some(("/x".into(), 1 << 20)));
        for half in ["[engine]\ntier_path = \"/x\"\n", "[engine]\ntier_size = \"1g\"\n"] {
            let e = Settings::resolve(cli(&[]), file(half)).unwrap_err().to_string();
            assert!(e.contains("tier_path and tier_size go together"), "{e}");
        }
        assert!(Settings::resolve(cli(&[]), file("[engine]\ntier_path = \"/x\"\ntier_size = \"1q\"\n")).is_err());
    }

    /// The tier's size is rounded down to whole segments that split over the shards, as
    /// memcached rounds it to whole pages, and the engine gets it.
    #[test]
    fn the_tier_is_rounded_to_whole_segments_per_shard() {
        let s = Settings::resolve(cli(&["-m", "64", "--shards", "4", "-o", "ext_path=/x:1g"]), FileConfig::default())
            .unwrap();
        assert_eq!(s.engine.segment_size, 1 << 20);
        assert_eq!(s.tier_size(&s.builder()), Some(1 << 30));
        let odd = |mb: u64| {
            let mut s = s.clone();
            s.engine.tier = Some(("/x".into(), mb << 20));
            s.tier_size(&s.builder())
        };
        assert_eq!(odd(1023), Some(1020 << 20), "whole segments, 4 shards");
        assert_eq!(odd(8), Some(8 << 20));
        assert_eq!(odd(7), Some(7 << 20), "too small: left for the engine to refuse");
        let none = Settings::resolve(cli(&["-m", "64"]), FileConfig::default()).unwrap();
        assert_eq!(none.tier_size(&none.builder()), None);
    }

    #[test]
    fn refusals_name_what_to_use() {
        assert!(refused(&["-Z"]).contains("ssl_chain_cert"));
        assert!(refused(&["-Z", "-o", "ssl_chain_cert=/c,ssl_verify_mode=2"]).contains("ssl_ca_cert"));
        assert!(refused(&["-U", "11211"]).contains("-U 0"));
        assert!(refused(&["-C"]).contains("CAS"));
        assert!(refused(&["-B", "utf8"]).contains("ascii"));
        assert!(refused(&["-a", "999"]).contains("octal"));
        assert!(refused(&["-b", "0"]).contains("-b"));
        assert!(refused(&["-R", "0"]).contains("-R"));
        assert!(refused(&["-D", "/"]).contains(":"));
        assert!(refused(&["-e", "/a", "--persist", "/b"]).contains("one"));
        assert!(refused(&["-M", "--eviction", "fifo"]).contains("none"));
    }

    /// Scripts and tests/server match these words; the typed error keeps them.
    #[test]
    fn messages_keep_their_words() {
        for (args, message) in [
            (&["-I", "12x"][..], "invalid size \"12x\": expected a number of bytes with an optional k, m or g suffix"),
            (&["-o", "idle_timeout=x"], "-o idle_timeout: \"x\" is not a number"),
            (&["-o", "ssl_key"], "Missing ssl_key argument"),
            (&["-o", "frobnicate"], "Illegal suboption \"frobnicate\" (-o): see docs/server.md for the ones supported"),
            (
                &["-o", "ext_item_size=512"],
                "-o ext_item_size: not supported: every item that eviction takes out of memory goes to the flash tier, \
                 whatever its size",
            ),
            (
                &["-o", "ext_path=/x:64"],
                "-o ext_path=\"/x:64\": the size needs a unit; as memcached: ext_path=FILE:SIZE, SIZE with a unit m, g, \
                 t or p (ext_path=/mnt/flash/cache:64g)",
            ),
            (&["-D", "/"], "-D \"/\": only \":\" is supported as the stats detail prefix delimiter"),
            (
                &["-I", "2m", "--max-reply-size", "2m"],
                "max reply size must be from the max item size (-I) + 1k (2098176) to 2147483648 bytes, got 2097152",
            ),
            (&["--eviction", "lru"], "invalid eviction policy \"lru\": invalid configuration: unknown eviction policy \"lru\"; expected one of none, random, random-fifo, fifo, cte, util, merge, s3fifo"),
        ] {
            assert_eq!(refused(args), message, "{args:?}");
        }
        let e = Cli::try_parse_from(["segcache-server", "-m", "64x"]).unwrap_err().to_string();
        assert!(e.contains("\"64x\" is not a number of megabytes (64, 64m or 1g)"), "{e}");
    }

    #[test]
    fn command_switches_and_auth() {
        let d = Settings::resolve(cli(&[]), FileConfig::default()).unwrap();
        assert!(d.flush_enabled && d.dump_enabled && d.watch_enabled && !d.sasl && d.auth_file.is_none());
        assert!(!d.text_auth() && !d.binary_auth());
        let s = Settings::resolve(cli(&["-F", "-X", "-W"]), FileConfig::default()).unwrap();
        assert!(!s.flush_enabled && !s.dump_enabled && !s.watch_enabled);
        // -Y: the text protocol only; -S: the binary protocol only (as memcached).
        let s = Settings::resolve(cli(&["-Y", "/etc/auth"]), FileConfig::default()).unwrap();
        assert_eq!(s.protocol, Protocol::Ascii);
        assert!(s.text_auth() && !s.binary_auth());
        let s = Settings::resolve(cli(&["-S"]), FileConfig::default()).unwrap();
        assert_eq!(s.protocol, Protocol::Binary);
        assert!(s.binary_auth() && !s.text_auth());
        assert_eq!(
            Settings::resolve(cli(&["-S", "-B", "binary"]), FileConfig::default()).unwrap().protocol,
            Protocol::Binary
        );
        assert_eq!(
            Settings::resolve(cli(&["-Y", "/f", "-B", "ascii"]), FileConfig::default()).unwrap().protocol,
            Protocol::Ascii
        );
        // Both, no -B: memcached ends on the text protocol with the file.
        let s = Settings::resolve(cli(&["-S", "-Y", "/f"]), FileConfig::default()).unwrap();
        assert!(s.text_auth() && !s.binary_auth());
        assert!(refused(&["-S", "-B", "ascii"]).contains("ASCII protocol while using SASL"));
        assert!(refused(&["-S", "-B", "auto"]).contains("ASCII protocol while using SASL"));
        assert!(refused(&["-Y", "/f", "-B", "binary"]).contains("BINARY protocol while using ascii"));
        assert!(refused(&["-S", "-Y", "/f", "-B", "binary"]).contains("BINARY protocol"));
        // -S needs its user file named.
        let mut s = Settings::resolve(cli(&["-S"]), FileConfig::default()).unwrap();
        assert!(s.load_users(None).unwrap_err().to_string().contains("MEMCACHED_SASL_PWDB"));
        let mut s = Settings::resolve(cli(&[]), FileConfig::default()).unwrap();
        s.load_users(None).unwrap();
        assert!(s.users.is_none());
    }

    #[test]
    fn room_to_grow_comes_from_the_flag_or_the_file_and_is_never_below_the_limit() {
        let s = Settings::resolve(cli(&["-m", "64", "--max-memory-limit", "1g"]), FileConfig::default()).unwrap();
        assert_eq!((s.engine.memory_bytes, s.engine.max_memory_bytes), (64 << 20, Some(1 << 30)));
        let file: FileConfig = toml::from_str(
            "memory_mb = 32
max_memory_mb = 128
",
        )
        .unwrap();
        let s = Settings::resolve(cli(&[]), file).unwrap();
        assert_eq!((s.engine.memory_bytes, s.engine.max_memory_bytes), (32 << 20, Some(128 << 20)));
        assert_eq!(Settings::resolve(cli(&[]), FileConfig::default()).unwrap().engine.max_memory_bytes, None);
        let e = Settings::resolve(cli(&["-m", "64", "--max-memory-limit", "32"]), FileConfig::default()).unwrap_err();
        assert_eq!(e.to_string(), "--max-memory-limit 32 MB is less than the memory limit (-m) 64 MB");
    }

    #[test]
    fn bad_settings_are_explained() {
        for args in [
            &["-I", "40m"][..],
            &["-I", "12x"],
            &["-t", "0"],
            &["-m", "0"],
            &["--eviction", "lru"],
            &["--log-level", "loud"],
        ] {
            let e = Settings::resolve(cli(args), FileConfig::default()).unwrap_err();
            assert!(!e.to_string().is_empty(), "{args:?}");
        }
        assert!(toml::from_str::<FileConfig>("prot = 1").is_err());
        assert_eq!(size::bytes("1m").unwrap(), 1 << 20);
        assert_eq!(size::bytes("64K").unwrap(), 64 << 10);
        assert_eq!(size::bytes("123").unwrap(), 123);
        assert!(size::bytes("").is_err());
    }
}
