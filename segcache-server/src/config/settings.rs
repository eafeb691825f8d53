//! The resolved settings: every setting checked, each a plain value the rest of the server reads.

use std::path::PathBuf;

use segcache_core::Policy;

use crate::tls::TlsSettings;

/// Every setting, resolved and checked.
/// The engine's part of the settings, resolved: what [`Settings::builder`] builds from.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// `-m`: the memory the engine gets (heap and tables).
    pub memory_bytes: usize,
    /// `--max-memory-limit`: the most `cache_memlimit` may raise `memory_bytes` to
    /// (`Builder::max_heap_size`); `None`: `memory_bytes`.
    pub max_memory_bytes: Option<usize>,
    pub segment_size: usize,
    pub eviction: Policy,
    pub shards: Option<usize>,
    pub hash_power: Option<u8>,
    /// The persistence file, if any.
    pub path: Option<PathBuf>,
    pub reset_bad_file: bool,
    pub lazy_verify: bool,
    /// `--resize-file`: a persistence file of other sizes is moved into this heap
    /// (`Builder::resize_file`).
    pub resize_file: bool,
    /// `-L`: the engine's memory is faulted in at start (`Builder::prefault`).
    pub prefault: bool,
    /// A thread faults the heap in ahead of the workers (`Builder::touch_ahead`); `-o
    /// no_touch_ahead` or `[engine] touch_ahead = false` turn it off.
    pub touch_ahead: bool,
    /// `-o ext_path=FILE:SIZE`: the flash tier's file and the size asked for (see
    /// `Settings::tier_size`).
    pub tier: Option<(PathBuf, u64)>,
    /// `-o tier_promote_after=N` or `[engine] tier_promote_after`: a read on the tier brings its
    /// item back to memory once it was read N times; 0 (default): never
    /// (`Builder::tier_promote_after`).
    pub tier_promote_after: u8,
    /// `-o tier_write_queue=SIZE` or `[engine] tier_write_queue`: the bytes of flash segment
    /// images the tier's writer may hold queued; 0: each eviction writes them itself, so that a
    /// kill loses nothing demoted; unset: the engine's default (`Builder::tier_write_queue`).
    pub tier_write_queue: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub port: u16,
    pub listen: String,
    /// The engine: heap, segments, eviction, persistence.
    pub engine: EngineSettings,
    pub threads: usize,
    pub max_connections: usize,
    pub max_item_size: usize,
    /// Largest reply held for a retrieval line too long to parse whole; at least
    /// `max_item_size` + 1 KiB.
    pub max_reply_size: usize,
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

impl Settings {
    /// Whether a text connection must authenticate first (`-Y`; the server then speaks text only).
    pub fn text_auth(&self) -> bool {
        self.auth_file.is_some()
    }

    /// Whether a binary connection must authenticate first (`-S` without `-Y`; the server then
    /// speaks binary only).
    pub fn binary_auth(&self) -> bool {
        self.sasl && self.auth_file.is_none()
    }
}
