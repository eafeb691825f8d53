//! Settings: memcached-style command-line flags, an optional TOML file, and defaults, merged in
//! that order of precedence (a flag overrides the file, the file overrides the default).

use std::path::PathBuf;

use clap::Parser;
use segcache_core::{Policy, MAX_SEGMENT_SIZE};
use serde::Deserialize;

use crate::tls::{MinVersion, TlsSettings, VerifyMode};

/// The largest value the engine can hold is a segment less its headers; segments are at most
/// 4 MiB, so `-I` is capped just below that.
pub const MAX_ITEM_SIZE_LIMIT: usize = MAX_SEGMENT_SIZE - 4096;

/// The default largest reply to one retrieval request. Replies are copied out of the engine, so
/// this is what one connection's multi-get can make the server hold (see "Resource bounds" in
/// docs/server.md).
pub const DEFAULT_MAX_REPLY: usize = 16 << 20;
/// Requests one connection may run per turn of its worker's event loop before the other
/// connections of the worker get theirs, unless `-R` says otherwise: a deep pipeline (hundreds of
/// kilobytes of `touch`, or many `get`s) is cut into slices, and the rest waits on the worker's
/// ready list.
pub const DEFAULT_REQS_PER_EVENT: usize = 256;
/// The largest `--max-reply-size` accepted.
pub const MAX_REPLY_LIMIT: usize = 1 << 30;

/// Command-line flags. The one-letter ones mean what they mean to memcached.
#[derive(Debug, Default, Parser)]
#[command(name = "segcache-server", version, about = "A memcached-compatible cache server on the segcache engine")]
pub struct Cli {
    /// TOML configuration file; flags given here override its values.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TCP port to listen on [default: 11211].
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// Interfaces to listen on, comma separated or repeated, each `host` or `host:port`
    /// [default: 127.0.0.1].
    #[arg(short = 'l', long = "listen")]
    pub listen: Vec<String>,
    /// UDP port: only 0 (off) is accepted; segcache serves TCP and UNIX sockets.
    #[arg(short = 'U', long = "udp-port")]
    pub udp_port: Option<u16>,
    /// UNIX socket to listen on (instead of TCP, as memcached).
    #[arg(short = 's', long = "unix-socket", value_name = "FILE")]
    pub unix_socket: Option<PathBuf>,
    /// Access mask of the UNIX socket, in octal [default: 700].
    #[arg(short = 'a', long = "unix-mask", value_name = "MASK")]
    pub unix_mask: Option<String>,
    /// Run as a daemon (fork, new session, `/` as the working directory, stdio to /dev/null).
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,
    /// Raise the core file size limit to its maximum.
    #[arg(short = 'r', long = "enable-coredumps")]
    pub enable_coredumps: bool,
    /// Become this user after binding and opening the persistence file (when started as root).
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// Write the process id to this file once serving; removed at a graceful stop.
    #[arg(short = 'P', long = "pidfile", value_name = "FILE")]
    pub pidfile: Option<PathBuf>,
    /// Return an error when memory is full instead of evicting (eviction policy `none`).
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// Lock all memory (mlockall), the heap included.
    #[arg(short = 'k', long = "lock-memory")]
    pub lock_memory: bool,
    /// Print the license and exit.
    #[arg(short = 'i', long = "license")]
    pub license: bool,
    /// memcached's slab growth factor: accepted and ignored (segcache has no slab classes).
    #[arg(short = 'f', long = "slab-growth-factor", value_name = "FACTOR")]
    pub slab_growth_factor: Option<String>,
    /// memcached's smallest slab chunk: accepted and ignored (segcache has no slab classes).
    #[arg(short = 'n', long = "slab-min-size", value_name = "BYTES")]
    pub slab_min_size: Option<String>,
    /// Take all the memory at start, as memcached's -L: the heap (advised for transparent huge
    /// pages in any case) and the hash table are faulted in before the server listens.
    #[arg(short = 'L', long = "enable-largepages")]
    pub large_pages: bool,
    /// Key prefix delimiter of `stats detail`: only `:` is supported; turns detail on.
    #[arg(short = 'D', value_name = "CHAR")]
    pub prefix_delimiter: Option<String>,
    /// Requests one connection may run per turn before the others get theirs [default: 256].
    #[arg(short = 'R', long = "max-reqs-per-event", value_name = "N")]
    pub reqs_per_event: Option<usize>,
    /// memcached's -C (no CAS): refused, segcache always keeps CAS values.
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,
    /// Backlog of the listening sockets, for listen(2) [default: 1024].
    #[arg(short = 'b', long = "listen-backlog", value_name = "N")]
    pub backlog: Option<i32>,
    /// Protocol: auto (text or binary, per connection), ascii, binary [default: auto].
    #[arg(short = 'B', long = "protocol", value_name = "NAME")]
    pub protocol: Option<String>,
    /// SASL PLAIN authentication over the binary protocol (binary only), against the
    /// `user:password` file named by the MEMCACHED_SASL_PWDB environment variable.
    #[arg(short = 'S', long = "enable-sasl")]
    pub enable_sasl: bool,
    /// Refuse `flush_all` (and the binary FLUSH).
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,
    /// Refuse `stats cachedump` and `lru_crawler metadump|mgdump`.
    #[arg(short = 'X', long = "disable-dumping")]
    pub disable_dumping: bool,
    /// Refuse `watch`.
    #[arg(short = 'W', long = "disable-watch")]
    pub disable_watch: bool,
    /// Text protocol authentication (text only): a file of `user:password` lines, mode 600; a
    /// client's first command is `set <any> 0 0 <n>` of `user password`.
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// memcached's memory file: segcache's persistence file (`--persist`), a warm restart
    /// after a graceful stop and a recovery after a crash.
    #[arg(short = 'e', long = "memory-file", value_name = "FILE")]
    pub memory_file: Option<PathBuf>,
    /// TLS on the TCP listeners (but those `-l` marks `notls:`), with the certificate and key
    /// of `-o ssl_chain_cert=FILE,ssl_key=FILE` (and `ssl_ca_cert`, `ssl_verify_mode` for
    /// client certificates).
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,
    /// memcached's NAPI ids: accepted and ignored.
    #[arg(short = 'N', long = "napi_ids", value_name = "N")]
    pub napi_ids: Option<String>,
    /// memcached's extended options, comma separated (see docs/server.md): idle_timeout=N,
    /// hashpower=N, track_sizes, and LRU/slab tuning that is accepted and ignored.
    #[arg(short = 'o', long = "extended", value_name = "LIST")]
    pub extended: Vec<String>,
    /// Item memory in megabytes [default: 64].
    #[arg(short = 'm', long = "memory-limit", value_name = "MB", value_parser = parse_mb)]
    pub memory_mb: Option<u64>,
    /// Worker threads [default: one per core].
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Maximum simultaneous connections [default: 1024].
    #[arg(short = 'c', long = "conn-limit")]
    pub max_connections: Option<usize>,
    /// Maximum item size, with an optional k/m suffix [default: 1m].
    #[arg(short = 'I', long = "max-item-size", value_name = "SIZE")]
    pub max_item_size: Option<String>,
    /// Largest reply to one retrieval request (a multi-get), k/m suffix; past it the reply is
    /// `SERVER_ERROR out of memory writing get response` [default: 16m].
    #[arg(long, value_name = "SIZE")]
    pub max_reply_size: Option<String>,
    /// Verbose logging: -v info, -vv debug, -vvv trace.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Eviction policy: none, random, random_fifo, fifo, cte, util, merge, s3fifo [default: merge].
    #[arg(long)]
    pub eviction: Option<String>,
    /// Segment size in bytes (power of two, 4 KiB to 4 MiB) [default: fits -I, at least 1 MiB].
    #[arg(long)]
    pub segment_size: Option<String>,
    /// Engine shards (power of two) [default: chosen by the engine].
    #[arg(long)]
    pub shards: Option<usize>,
    /// log2 of the hash table's buckets per shard [default: sized for the heap].
    #[arg(long)]
    pub hash_power: Option<u8>,
    /// Keep the cache in this file: a graceful stop (SIGTERM, SIGINT, SIGUSR1) makes the next start warm.
    #[arg(long, value_name = "FILE")]
    pub persist: Option<PathBuf>,
    /// Start empty over an unusable persistence file instead of refusing to start.
    #[arg(long)]
    pub reset_bad_file: bool,
    /// After a graceful stop, serve at once and check each heap segment at its first use
    /// instead of checking the whole heap before listening (a damaged segment is then dropped
    /// with a warning rather than refusing to start).
    #[arg(long)]
    pub lazy_verify: bool,
    /// Do not pin worker threads to cores.
    #[arg(long)]
    pub no_pin: bool,
    /// Cores to pin workers to, comma separated (worker i gets the (i mod n)-th) [default: all].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub cores: Option<Vec<usize>>,
    /// Serve the admin endpoint (/metrics, /healthz, /readyz) on PORT [default: off].
    #[arg(long, value_name = "PORT")]
    pub admin_port: Option<u16>,
    /// The address the admin endpoint binds [default: 127.0.0.1].
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// Log level: error, warn, info, debug, trace (overrides -v).
    #[arg(long)]
    pub log_level: Option<String>,
    /// Enable the `shutdown` command (as memcached's -A): a client may then stop the server.
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,
}

/// A size given as a number of bytes or as text with a k/m/g suffix.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    fn bytes(&self) -> Result<u64, String> {
        match self {
            Size::Bytes(n) => Ok(*n),
            Size::Text(s) => parse_size(s),
        }
    }
}

/// The TOML file. Every key is optional; see docs/server.md for an example.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub port: Option<u16>,
    pub listen: Option<String>,
    pub memory_mb: Option<u64>,
    pub threads: Option<usize>,
    pub max_connections: Option<usize>,
    pub max_item_size: Option<Size>,
    pub max_reply_size: Option<Size>,
    pub log_level: Option<String>,
    pub pin: Option<bool>,
    pub cores: Option<Vec<usize>>,
    pub admin_port: Option<u16>,
    pub admin_listen: Option<String>,
    /// `-o busy_poll_us=N`.
    pub busy_poll_us: Option<u32>,
    /// `-o klog_file=PATH`.
    pub klog_file: Option<PathBuf>,
    /// `-o klog_sample=N`.
    pub klog_sample: Option<u64>,
    /// `-o klog_max_bytes=SIZE`.
    pub klog_max_bytes: Option<Size>,
    /// `-o hotkey_sample=N`.
    pub hotkey_sample: Option<u64>,
    /// `-o hotkey_top=K`.
    pub hotkey_top: Option<usize>,
    pub enable_shutdown: Option<bool>,
    /// `-s`.
    pub unix_socket: Option<PathBuf>,
    /// `-a`, octal digits as text ("700").
    pub unix_mask: Option<String>,
    /// `-b`.
    pub listen_backlog: Option<i32>,
    /// `-R`.
    pub reqs_per_event: Option<usize>,
    /// `-B`.
    pub protocol: Option<String>,
    /// `-o idle_timeout=N`.
    pub idle_timeout: Option<u32>,
    /// `-u`.
    pub user: Option<String>,
    /// `-P`.
    pub pidfile: Option<PathBuf>,
    #[serde(default)]
    pub engine: EngineFile,
    #[serde(default)]
    pub tls: TlsFile,
}

/// The `[tls]` table: `-Z` and the `-o ssl_*` options.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    /// `-Z`.
    pub enabled: Option<bool>,
    pub chain_cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca_cert: Option<PathBuf>,
    /// 0..3 or none, request, require, once.
    pub verify_mode: Option<VerifyModeFile>,
    /// "tlsv1.2" or "tlsv1.3".
    pub min_version: Option<String>,
}

/// `verify_mode` as memcached's number or as a word.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum VerifyModeFile {
    Number(u8),
    Text(String),
}

/// The `[engine]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineFile {
    pub eviction: Option<String>,
    pub segment_size: Option<Size>,
    pub shards: Option<usize>,
    pub hash_power: Option<u8>,
    pub path: Option<PathBuf>,
    pub reset_bad_file: Option<bool>,
    pub lazy_verify: Option<bool>,
    pub prefault: Option<bool>,
    pub touch_ahead: Option<bool>,
}

/// Every setting, resolved and checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub port: u16,
    pub listen: String,
    pub memory_bytes: usize,
    pub threads: usize,
    pub max_connections: usize,
    pub max_item_size: usize,
    /// Largest reply to one retrieval request; at least `max_item_size` + 1 KiB.
    pub max_reply_size: usize,
    pub segment_size: usize,
    pub eviction: Policy,
    pub shards: Option<usize>,
    pub hash_power: Option<u8>,
    pub path: Option<PathBuf>,
    pub reset_bad_file: bool,
    pub lazy_verify: bool,
    /// `-L`: the engine's memory is faulted in at start (`Builder::prefault`).
    pub prefault: bool,
    /// A thread faults the heap in ahead of the workers (`Builder::touch_ahead`); `-o
    /// no_touch_ahead` or `[engine] touch_ahead = false` turn it off.
    pub touch_ahead: bool,
    pub pin: bool,
    pub cores: Option<Vec<usize>>,
    pub admin_port: Option<u16>,
    /// `--admin-listen`: the admin endpoint's address (loopback unless told).
    pub admin_listen: String,
    /// `-o busy_poll_us=N`: SO_BUSY_POLL on accepted sockets (0: off).
    pub busy_poll_us: u32,
    /// `-o klog_file=PATH,...`: the sampled command log, when on.
    pub klog: Option<KlogSettings>,
    /// `-o hotkey_sample=N,hotkey_top=K`.
    pub hotkeys: HotKeySettings,
    pub log_level: log::LevelFilter,
    /// `-A`: the `shutdown` command is allowed.
    pub shutdown_command: bool,
    /// `-s`: serve on this UNIX socket (and then not on TCP, as memcached).
    pub unix_socket: Option<PathBuf>,
    /// `-a`: the UNIX socket's permission bits.
    pub unix_mask: u32,
    /// `-b`: the listen(2) backlog.
    pub backlog: i32,
    /// `-R`: requests one connection may run per turn.
    pub reqs_per_event: usize,
    /// `-B`: which protocols a connection may speak.
    pub protocol: Protocol,
    /// `-o idle_timeout=N`: close connections idle for this many seconds (0: never).
    pub idle_timeout: u32,
    /// `-o track_sizes`: `stats sizes` is on from the start.
    pub track_sizes: bool,
    /// `-D :`: `stats detail` is on from the start.
    pub detail: bool,
    /// `-u`: the user to become after binding, when started as root.
    pub user: Option<String>,
    /// `-P`: the pid file.
    pub pidfile: Option<PathBuf>,
    /// `-d`: run as a daemon.
    pub daemon: bool,
    /// `-k`: mlockall.
    pub lock_memory: bool,
    /// `-r`: raise the core file limit.
    pub coredumps: bool,
    /// `-Y`: the text protocol's user file (read at start into `users`).
    pub auth_file: Option<PathBuf>,
    /// `-S`: SASL PLAIN over the binary protocol, against `users`.
    pub sasl: bool,
    /// The users of `-Y`, or of MEMCACHED_SASL_PWDB with `-S`: read by [`Settings::load`]
    /// (`resolve` reads no file), again on SIGHUP; `None` with `-Y` or `-S` lets nobody in.
    pub users: Option<std::sync::Arc<crate::auth::UserFile>>,
    /// Not `-F`: `flush_all` is allowed.
    pub flush_enabled: bool,
    /// Not `-X`: `stats cachedump` and `lru_crawler metadump|mgdump` are allowed.
    pub dump_enabled: bool,
    /// Not `-W`: `watch` is allowed.
    pub watch_enabled: bool,
    /// `-Z`: TLS on the TCP listeners not marked `notls:`.
    pub tls: Option<TlsSettings>,
}

/// `-o klog_file=PATH,klog_sample=N,klog_max_bytes=SIZE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KlogSettings {
    pub path: PathBuf,
    /// Log one request in this many.
    pub sample: u64,
    /// Rotate once the file would grow past this.
    pub max_bytes: u64,
}

/// The hot-key settings: `-o hotkey_sample=N,hotkey_top=K`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotKeySettings {
    /// Count one request in this many (0: off).
    pub sample: u64,
    /// Keys shown.
    pub top: usize,
}

impl Default for HotKeySettings {
    fn default() -> Self {
        HotKeySettings { sample: 100, top: 10 }
    }
}

/// `-B`: the protocols a connection may speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Text (and meta) or binary, chosen by a connection's first byte.
    Auto,
    /// Text and meta only: a connection that starts with the binary magic byte is closed.
    Ascii,
    /// Binary only: a connection that starts with anything else is closed.
    Binary,
}

/// `-o` options that tune memcached's LRU, slab allocator, hash table or buffers: they mean
/// nothing to segcache's segments and are accepted and ignored (listed in docs/server.md).
const IGNORED_EXTENDED: &[&str] = &[
    "maxconns_fast",
    "no_maxconns_fast",
    "hash_algorithm",
    "no_hashexpand",
    "tail_repair_time",
    "lru_crawler",
    "no_lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "lru_maintainer",
    "no_lru_maintainer",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "slab_reassign",
    "no_slab_reassign",
    "slab_automove",
    "no_slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_automove_freeratio",
    "slab_sizes",
    "slab_chunk_max",
    "no_chunked_items",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "read_buf_mem_limit",
    "resp_obj_mem_limit",
    "inline_ascii_resp",
    "no_inline_ascii_resp",
    "modern",
    "no_modern",
    "drop_privileges",
    "no_drop_privileges",
    "meta_response_old",
    "sock_cookie_id",
];

/// What the `-o` list sets.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Extended {
    pub idle_timeout: Option<u32>,
    pub hash_power: Option<u8>,
    pub track_sizes: bool,
    pub ssl_chain_cert: Option<PathBuf>,
    pub ssl_key: Option<PathBuf>,
    pub ssl_ca_cert: Option<PathBuf>,
    pub ssl_verify_mode: Option<VerifyMode>,
    pub ssl_min_version: Option<MinVersion>,
    pub busy_poll_us: Option<u32>,
    pub klog_file: Option<PathBuf>,
    pub klog_sample: Option<u64>,
    pub klog_max_bytes: Option<u64>,
    pub hotkey_sample: Option<u64>,
    pub hotkey_top: Option<usize>,
    pub touch_ahead: Option<bool>,
}

/// Parses memcached's `-o` lists (each comma separated; `-o` may be repeated).
pub fn parse_extended(lists: &[String]) -> Result<Extended, String> {
    let mut x = Extended::default();
    for opt in lists.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|o| !o.is_empty()) {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let number = |what: &str| -> Result<u64, String> {
            value
                .ok_or_else(|| format!("-o {what} needs a value: {what}=N"))?
                .parse::<u64>()
                .map_err(|_| format!("-o {what}: {:?} is not a number", value.unwrap_or_default()))
        };
        match name {
            "idle_timeout" => {
                let n = number(name)?;
                x.idle_timeout =
                    Some(u32::try_from(n).map_err(|_| format!("-o idle_timeout: {n} seconds is too long"))?);
            }
            "hashpower" => {
                let n = number(name)?;
                if !(12..=64).contains(&n) {
                    return Err(format!("-o hashpower must be from 12 to 64, got {n}"));
                }
                x.hash_power = Some(n as u8);
            }
            "track_sizes" => x.track_sizes = true,
            "touch_ahead" => x.touch_ahead = Some(true),
            "no_touch_ahead" => x.touch_ahead = Some(false),
            "ssl_chain_cert" | "ssl_key" | "ssl_ca_cert" | "ssl_verify_mode" | "ssl_min_version" | "ssl_keyformat"
            | "ssl_wbuf_size" => {
                let v = value.filter(|v| !v.is_empty()).ok_or_else(|| format!("Missing {name} argument"))?;
                match name {
                    "ssl_chain_cert" => x.ssl_chain_cert = Some(v.into()),
                    "ssl_key" => x.ssl_key = Some(v.into()),
                    "ssl_ca_cert" => x.ssl_ca_cert = Some(v.into()),
                    "ssl_verify_mode" => x.ssl_verify_mode = Some(VerifyMode::parse(v)?),
                    "ssl_min_version" => x.ssl_min_version = Some(MinVersion::parse(v)?),
                    // memcached's 1 is PEM, the only format read here.
                    "ssl_keyformat" if v != "1" => {
                        return Err(format!("-o ssl_keyformat={v}: only 1 (PEM) is supported"));
                    }
                    // rustls sizes its own records: accepted and ignored.
                    "ssl_wbuf_size" => {
                        number(name)?;
                    }
                    _ => {}
                }
            }
            // rustls resumes sessions with its own small cache: accepted and ignored.
            "ssl_session_cache" => {}
            "busy_poll_us" => {
                let n = number(name)?;
                x.busy_poll_us = Some(u32::try_from(n).map_err(|_| format!("-o busy_poll_us: {n} is too large"))?);
            }
            "klog_file" => match value {
                Some(p) if !p.is_empty() => x.klog_file = Some(PathBuf::from(p)),
                _ => return Err("-o klog_file needs a path: klog_file=PATH".into()),
            },
            "klog_sample" => x.klog_sample = Some(number(name)?),
            "klog_max_bytes" => {
                x.klog_max_bytes =
                    Some(parse_size(value.ok_or("-o klog_max_bytes needs a size: klog_max_bytes=SIZE")?)?);
            }
            "hotkey_sample" => x.hotkey_sample = Some(number(name)?),
            "hotkey_top" => x.hotkey_top = Some(number(name)? as usize),
            n if n.starts_with("ssl_") => {
                return Err(format!(
                    "-o {n}: not supported with rustls (ssl_ciphers, ssl_kernel_tls): see docs/server.md for the TLS options"
                ));
            }
            n if n.starts_with("ext_") => {
                return Err(format!(
                    "-o {n}: extstore (flash storage) is not supported; segcache keeps items in memory, and -e FILE \
                     (--persist) keeps them across restarts"
                ));
            }
            n if n.starts_with("proxy_") => {
                return Err(format!(
                    "-o {n}: memcached's proxy is not supported; run a proxy in front of segcache-server"
                ));
            }
            n if IGNORED_EXTENDED.contains(&n) => {}
            n => return Err(format!("Illegal suboption \"{n}\" (-o): see docs/server.md for the ones supported")),
        }
    }
    Ok(x)
}

/// memcached's refusals, with what to use instead.
fn refuse_unsupported(cli: &Cli) -> Result<(), String> {
    let refuse = |on: bool, msg: &str| if on { Err(msg.to_string()) } else { Ok(()) };
    refuse(cli.disable_cas, "-C (disable CAS) is not supported: segcache always keeps CAS values; leave -C out")?;
    if let Some(n) = cli.udp_port.filter(|&n| n != 0) {
        return Err(format!("-U {n}: UDP is not supported; use TCP (-p) or a UNIX socket (-s), and -U 0"));
    }
    if let Some(d) = cli.prefix_delimiter.as_deref().filter(|&d| d != ":") {
        return Err(format!("-D {d:?}: only \":\" is supported as the stats detail prefix delimiter"));
    }
    if cli.memory_file.is_some() && cli.persist.is_some() {
        return Err("-e and --persist both name the persistence file: give one".into());
    }
    if cli.disable_evictions && cli.eviction.is_some() {
        return Err("-M means --eviction none: give one of them".into());
    }
    Ok(())
}

/// `-Z` with the `-o ssl_*` options over the `[tls]` table. As memcached, the options mean
/// nothing without `-Z`.
fn resolve_tls(enable_ssl: bool, ext: &Extended, file: TlsFile) -> Result<Option<TlsSettings>, String> {
    if !(enable_ssl || file.enabled.unwrap_or(false)) {
        return Ok(None);
    }
    let verify_mode = match (ext.ssl_verify_mode, file.verify_mode) {
        (Some(m), _) => m,
        (None, Some(VerifyModeFile::Number(n))) => VerifyMode::parse(&n.to_string())?,
        (None, Some(VerifyModeFile::Text(t))) => VerifyMode::parse(&t)?,
        (None, None) => VerifyMode::None,
    };
    let min_version = match (ext.ssl_min_version, file.min_version) {
        (Some(v), _) => v,
        (None, Some(v)) => MinVersion::parse(&v)?,
        (None, None) => MinVersion::Tls12,
    };
    let chain_cert = ext.ssl_chain_cert.clone().or(file.chain_cert).ok_or(
        "-Z (TLS) needs the server's certificate: -o ssl_chain_cert=FILE (PEM chain, leaf first) and ssl_key=FILE",
    )?;
    let t = TlsSettings {
        chain_cert,
        key: ext.ssl_key.clone().or(file.key),
        ca_cert: ext.ssl_ca_cert.clone().or(file.ca_cert),
        verify_mode,
        min_version,
    };
    t.check()?;
    Ok(Some(t))
}

impl Default for Settings {
    fn default() -> Self {
        Settings::resolve(Cli::default(), FileConfig::default()).expect("defaults are valid")
    }
}

/// Parses `1048576`, `512k`, `1m`, `1g` (binary multiples, case-insensitive, optional `b`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("invalid size {s:?}: expected a number of bytes with an optional k, m or g suffix"))
}

/// `-m`: megabytes, as memcached; a trailing `m` (megabytes, which memcached's atoi ignores) or
/// `g` (gigabytes) is taken too.
fn parse_mb(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = match t.strip_suffix('g') {
        Some(n) => (n, 1024),
        None => (t.strip_suffix('m').unwrap_or(&t), 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a number of megabytes (64, 64m or 1g)"))
}

fn parse_level(s: &str) -> Result<log::LevelFilter, String> {
    s.parse().map_err(|_| format!("invalid log level {s:?}: expected off, error, warn, info, debug or trace"))
}

impl Settings {
    /// Reads the file named by `--config` (if any) and merges it under the flags.
    pub fn load(cli: Cli) -> Result<Settings, String> {
        let file = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
                toml::from_str(&text).map_err(|e| format!("config file {}: {e}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let mut s = Settings::resolve(cli, file)?;
        s.load_users(std::env::var_os(crate::auth::SASL_PWDB_ENV).map(PathBuf::from))?;
        Ok(s)
    }

    /// Merges flags over the file over the defaults and checks the result.
    pub fn resolve(cli: Cli, file: FileConfig) -> Result<Settings, String> {
        refuse_unsupported(&cli)?;
        let ext = parse_extended(&cli.extended)?;
        let tls = resolve_tls(cli.enable_ssl, &ext, file.tls)?;
        let e = file.engine;
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let max_item_size = match (cli.max_item_size, file.max_item_size) {
            (Some(s), _) => parse_size(&s)?,
            (None, Some(s)) => s.bytes()?,
            (None, None) => 1 << 20,
        };
        if max_item_size < 1024 || max_item_size as usize > MAX_ITEM_SIZE_LIMIT {
            return Err(format!(
                "max item size (-I) must be from 1k to {} bytes (the engine's largest segment less headers), got {max_item_size}",
                MAX_ITEM_SIZE_LIMIT
            ));
        }
        let max_item_size = max_item_size as usize;
        let max_reply_size = match (cli.max_reply_size, file.max_reply_size) {
            (Some(s), _) => parse_size(&s)?,
            (None, Some(s)) => s.bytes()?,
            (None, None) => DEFAULT_MAX_REPLY as u64,
        };
        let reply_floor = max_item_size as u64 + 1024;
        if max_reply_size < reply_floor || max_reply_size > MAX_REPLY_LIMIT as u64 {
            return Err(format!(
                "max reply size must be from the max item size (-I) + 1k ({reply_floor}) to {MAX_REPLY_LIMIT} bytes, got {max_reply_size}"
            ));
        }
        let memory_mb = cli.memory_mb.or(file.memory_mb).unwrap_or(64);
        if memory_mb == 0 {
            return Err("memory limit (-m) must be at least 1 MB".into());
        }
        let memory_bytes = usize::try_from(memory_mb.saturating_mul(1 << 20))
            .map_err(|_| format!("memory limit {memory_mb} MB is too large"))?;
        let path = cli.persist.or(cli.memory_file).or(e.path);
        // A persistence file opens only with the layout it was made with: what is not set here
        // comes from the file, so that a default that changed since, or a shard count chosen
        // for other cores, does not turn a warm restart away. Not from a file of another heap
        // size, which cannot open anyway (and `--reset-bad-file` then starts over with settings
        // for this heap). A file that cannot be read is reported by the engine's open.
        let made = path
            .as_deref()
            .and_then(|p| segcache_core::FileLayout::read(p).ok().flatten())
            .filter(|m| m.has_heap_of(memory_bytes));
        // The smallest segment that holds every item `-I` admits (see the default below).
        let fits_items = max_item_size.next_power_of_two();
        let segment_size = match (cli.segment_size, e.segment_size) {
            (Some(s), _) => parse_size(&s)? as usize,
            (None, Some(s)) => s.bytes()? as usize,
            // The file's, unless its segments are too small for `-I`. Else the smallest power of
            // two that holds every item `-I` admits, at least 1 MiB. `-I` counts memcached's item
            // header (at least 59 bytes) where a record's is at most 18, so `-I` bytes of segment
            // hold the largest item. No larger: a merge stops the writer for as long as reading
            // two segments' records takes (`target/release/stalls`: at 1 MiB, half as many
            // operations over 100 us as at 2 MiB, a quarter of their time).
            (None, None) => made
                .map(|m| m.segment_size)
                .filter(|&s| s >= fits_items)
                .unwrap_or_else(|| fits_items.clamp(1 << 20, MAX_SEGMENT_SIZE)),
        };
        let policy_name = match cli.disable_evictions {
            true => "none".into(),
            false => cli.eviction.or(e.eviction).unwrap_or_else(|| "merge".into()),
        };
        let eviction: Policy =
            policy_name.parse().map_err(|e| format!("invalid eviction policy {policy_name:?}: {e}"))?;
        let threads = cli.threads.or(file.threads).unwrap_or(cores);
        if threads == 0 || threads > 1024 {
            return Err(format!("threads (-t) must be from 1 to 1024, got {threads}"));
        }
        let max_connections = cli.max_connections.or(file.max_connections).unwrap_or(1024);
        if max_connections == 0 {
            return Err("connection limit (-c) must be at least 1".into());
        }
        let log_level = match (cli.log_level, cli.verbose, file.log_level) {
            (Some(l), _, _) => parse_level(&l)?,
            (None, v, _) if v > 0 => match v {
                1 => log::LevelFilter::Info,
                2 => log::LevelFilter::Debug,
                _ => log::LevelFilter::Trace,
            },
            (None, _, Some(l)) => parse_level(&l)?,
            (None, _, None) => log::LevelFilter::Warn,
        };
        let cores_list = cli.cores.or(file.cores);
        if let Some(c) = &cores_list {
            if c.is_empty() {
                return Err("the core list (--cores) is empty".into());
            }
        }
        let unix_mask = match cli.unix_mask.as_ref().or(file.unix_mask.as_ref()) {
            Some(m) => u32::from_str_radix(m, 8)
                .ok()
                .filter(|&m| m <= 0o777)
                .ok_or_else(|| format!("-a {m:?}: expected an octal mode such as 700"))?,
            None => 0o700,
        };
        let backlog = cli.backlog.or(file.listen_backlog).unwrap_or(1024);
        if backlog <= 0 {
            return Err(format!("listen backlog (-b) must be at least 1, got {backlog}"));
        }
        let reqs_per_event = cli.reqs_per_event.or(file.reqs_per_event).unwrap_or(DEFAULT_REQS_PER_EVENT);
        if reqs_per_event == 0 {
            return Err("requests per event (-R) must be at least 1".into());
        }
        let protocol_given = cli.protocol.is_some() || file.protocol.is_some();
        let mut protocol = match cli.protocol.as_deref().or(file.protocol.as_deref()) {
            None | Some("auto") | Some("negotiate") => Protocol::Auto,
            Some("ascii") => Protocol::Ascii,
            Some("binary") => Protocol::Binary,
            Some(p) => return Err(format!("-B {p:?}: expected ascii, binary or auto")),
        };
        // As memcached: SASL is the binary protocol's, the auth file the text protocol's; each
        // makes the server speak only that protocol unless -B says otherwise, which it may
        // not (so with both -S and -Y, and no -B, the text protocol and the file win).
        if cli.enable_sasl {
            match protocol_given {
                false => protocol = Protocol::Binary,
                true if protocol != Protocol::Binary => {
                    return Err(
                        "You cannot allow the ASCII protocol while using SASL (-S speaks -B binary only).".into()
                    )
                }
                true => {}
            }
        }
        if cli.auth_file.is_some() {
            match protocol_given {
                false => protocol = Protocol::Ascii,
                true if protocol != Protocol::Ascii => {
                    return Err(
                        "You cannot allow the BINARY protocol while using ascii authentication tokens (-Y speaks -B ascii only)."
                            .into(),
                    )
                }
                true => {}
            }
        }
        let klog = match ext.klog_file.or(file.klog_file) {
            Some(path) => {
                let sample = ext.klog_sample.or(file.klog_sample).unwrap_or(100);
                let max_bytes = match (ext.klog_max_bytes, file.klog_max_bytes) {
                    (Some(n), _) => n,
                    (None, Some(s)) => s.bytes()?,
                    (None, None) => 1 << 30,
                };
                if sample == 0 {
                    return Err("-o klog_sample must be at least 1 (one request in N is logged)".into());
                }
                if max_bytes < 4096 {
                    return Err(format!("-o klog_max_bytes must be at least 4k, got {max_bytes}"));
                }
                Some(KlogSettings { path, sample, max_bytes })
            }
            None => None,
        };
        let hotkeys = HotKeySettings {
            sample: ext.hotkey_sample.or(file.hotkey_sample).unwrap_or(100),
            top: ext.hotkey_top.or(file.hotkey_top).unwrap_or(10),
        };
        if hotkeys.top == 0 || hotkeys.top > 1000 {
            return Err(format!("-o hotkey_top must be from 1 to 1000, got {}", hotkeys.top));
        }
        let listen: Vec<String> = cli.listen.iter().flat_map(|l| l.split(',')).map(|l| l.trim().to_string()).collect();
        let listen = match listen.is_empty() {
            true => file.listen.unwrap_or_else(|| "127.0.0.1".into()),
            false => listen.join(","),
        };
        Ok(Settings {
            port: cli.port.or(file.port).unwrap_or(11211),
            listen,
            unix_socket: cli.unix_socket.or(file.unix_socket),
            unix_mask,
            backlog,
            reqs_per_event,
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
            memory_bytes,
            threads,
            max_connections,
            max_item_size,
            max_reply_size: max_reply_size as usize,
            segment_size,
            eviction,
            shards: cli.shards.or(e.shards).or(made.map(|m| m.shards)),
            hash_power: cli.hash_power.or(ext.hash_power).or(e.hash_power).or(made.map(|m| m.hash_power)),
            path,
            reset_bad_file: cli.reset_bad_file || e.reset_bad_file.unwrap_or(false),
            lazy_verify: cli.lazy_verify || e.lazy_verify.unwrap_or(false),
            prefault: cli.large_pages || e.prefault.unwrap_or(false),
            touch_ahead: ext.touch_ahead.or(e.touch_ahead).unwrap_or(true),
            pin: !cli.no_pin && file.pin.unwrap_or(true),
            cores: cores_list,
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

    /// Whether a text connection must authenticate first (`-Y`; the server then speaks text only).
    pub fn text_auth(&self) -> bool {
        self.auth_file.is_some()
    }

    /// Whether a binary connection must authenticate first (`-S` without `-Y`; the server then
    /// speaks binary only).
    pub fn binary_auth(&self) -> bool {
        self.sasl && self.auth_file.is_none()
    }

    /// Reads the user file that `-Y` names, or (with `-S` alone) that MEMCACHED_SASL_PWDB names,
    /// into `users`; refuses one that group or others may read or write, and `-S` without
    /// MEMCACHED_SASL_PWDB.
    pub fn load_users(&mut self, sasl_pwdb: Option<PathBuf>) -> Result<(), String> {
        let (path, what) = match (&self.auth_file, self.binary_auth()) {
            (Some(p), _) => (p.clone(), "-Y"),
            (None, true) => match sasl_pwdb {
                Some(p) => (p, crate::auth::SASL_PWDB_ENV),
                None => {
                    return Err(format!(
                        "-S: name the SASL user file (user:password lines, mode 600) in the {} environment variable",
                        crate::auth::SASL_PWDB_ENV
                    ))
                }
            },
            (None, false) => return Ok(()),
        };
        self.users = Some(std::sync::Arc::new(crate::auth::UserFile::load(&path, what)?));
        Ok(())
    }

    /// The engine builder these settings describe.
    pub fn builder(&self) -> segcache_core::Builder {
        let mut b = segcache_core::Builder::new()
            .heap_size(self.memory_bytes)
            .segment_size(self.segment_size)
            .eviction(self.eviction)
            .reset_bad_file(self.reset_bad_file)
            .lazy_verify(self.lazy_verify)
            .prefault(self.prefault)
            .touch_ahead(self.touch_ahead)
            // Clients see memcached's bytes for a number that got shorter.
            .pad_numbers(true);
        if let Some(s) = self.shards {
            b = b.shards(s);
        }
        if let Some(h) = self.hash_power {
            b = b.hash_power(h);
        }
        if let Some(p) = &self.path {
            b = b.path(p);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        let mut v = vec!["segcache-server"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).unwrap()
    }

    #[test]
    fn defaults_match_memcached() {
        let s = Settings::resolve(cli(&[]), FileConfig::default()).unwrap();
        assert_eq!((s.port, s.listen.as_str(), s.memory_bytes), (11211, "127.0.0.1", 64 << 20));
        assert_eq!((s.max_connections, s.max_item_size, s.eviction), (1024, 1 << 20, Policy::Merge));
        assert!(s.pin && s.admin_port.is_none() && s.path.is_none() && !s.shutdown_command);
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
        assert_eq!((s.eviction, s.pin, s.admin_port), (Policy::Fifo, false, Some(9)));
        assert_eq!(s.path.as_deref(), Some(std::path::Path::new("/tmp/x")));
        assert!(s.lazy_verify && s.prefault);
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
            assert_eq!(s.segment_size, segment, "-I {item}");
        }
        let s = Settings::resolve(cli(&[]), FileConfig::default()).unwrap();
        assert_eq!(s.segment_size, 1 << 20);
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
        assert!(Settings::resolve(cli(&["--max-reply-size", "2g"]), FileConfig::default()).is_err());
    }

    fn refused(args: &[&str]) -> String {
        Settings::resolve(cli(args), FileConfig::default()).unwrap_err()
    }

    #[test]
    fn memcached_command_lines_parse() {
        // The line, and what init scripts and containers pass.
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
            assert_eq!(s.memory_bytes as u64, mb << 20, "{m}");
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
        assert_eq!((s.protocol, s.eviction), (Protocol::Ascii, Policy::None));
        assert_eq!(s.path.as_deref(), Some(std::path::Path::new("/tmp/mc.file")));
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
        assert!(parse_extended(&["klog_file".into()]).unwrap_err().contains("klog_file=PATH"));
    }

    /// The touch-ahead thread runs unless `-o no_touch_ahead` or the file's `[engine]` says not;
    /// the flag wins over the file.
    #[test]
    fn touch_ahead_is_on_unless_turned_off() {
        let off: FileConfig = toml::from_str("[engine]\ntouch_ahead = false\n").unwrap();
        assert!(Settings::resolve(cli(&[]), FileConfig::default()).unwrap().touch_ahead);
        assert!(!Settings::resolve(cli(&["-o", "no_touch_ahead"]), FileConfig::default()).unwrap().touch_ahead);
        assert!(!Settings::resolve(cli(&[]), off).unwrap().touch_ahead);
        let off: FileConfig = toml::from_str("[engine]\ntouch_ahead = false\n").unwrap();
        assert!(Settings::resolve(cli(&["-o", "touch_ahead"]), off).unwrap().touch_ahead);
    }

    #[test]
    fn extended_options() {
        let x = parse_extended(&["modern,no_lru_crawler, no_lru_maintainer".into(), "hashpower=20,track_sizes".into()])
            .unwrap();
        assert_eq!(x, Extended { hash_power: Some(20), track_sizes: true, ..Extended::default() });
        let s =
            Settings::resolve(cli(&["-o", "hashpower=18,idle_timeout=5,lru_crawler"]), FileConfig::default()).unwrap();
        assert_eq!((s.hash_power, s.idle_timeout), (Some(18), 5));
        assert!(parse_extended(&["idle_timeout".into()]).unwrap_err().contains("idle_timeout=N"));
        assert!(parse_extended(&["idle_timeout=x".into()]).is_err());
        assert!(parse_extended(&["hashpower=70".into()]).is_err());
        assert!(parse_extended(&["frobnicate".into()]).unwrap_err().contains("Illegal suboption"));
        assert_eq!(parse_extended(&["ssl_chain_cert=/x".into()]).unwrap().ssl_chain_cert, Some("/x".into()));
        assert!(parse_extended(&["ssl_ciphers=x".into()]).unwrap_err().contains("not supported"));
        assert!(parse_extended(&["ssl_verify_mode=5".into()]).is_err());
        assert!(parse_extended(&["ext_path=/x:1G".into()]).unwrap_err().contains("--persist"));
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
        assert!(s.load_users(None).unwrap_err().contains("MEMCACHED_SASL_PWDB"));
        let mut s = Settings::resolve(cli(&[]), FileConfig::default()).unwrap();
        s.load_users(None).unwrap();
        assert!(s.users.is_none());
    }

    #[test]
    fn bad_settings_are_explained() {
        for args in [
            &["-I", "8m"][..],
            &["-I", "12x"],
            &["-t", "0"],
            &["-m", "0"],
            &["--eviction", "lru"],
            &["--log-level", "loud"],
        ] {
            let e = Settings::resolve(cli(args), FileConfig::default()).unwrap_err();
            assert!(!e.is_empty(), "{args:?}");
        }
        assert!(toml::from_str::<FileConfig>("prot = 1").is_err());
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("123").unwrap(), 123);
        assert!(parse_size("").is_err());
    }
}
