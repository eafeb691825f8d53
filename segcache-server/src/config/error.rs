//! Why the settings were refused: one variant per refusal, each with the words the server prints
//! (after `segcache-server: `) before it exits. Many are memcached's own words, and scripts and
//! the tests under tests/server match on them, so a message changes only on purpose.

use std::path::PathBuf;

use segcache_core::SizeError;

/// A setting that cannot be used, or a file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // The file of `--config`.
    #[error("cannot read config file {}: {source}", .path.display())]
    ReadFile { path: PathBuf, source: std::io::Error },
    #[error("config file {}: {source}", .path.display())]
    ParseFile { path: PathBuf, source: Box<toml::de::Error> },

    // Sizes and numbers.
    #[error("invalid size {text:?}: expected a number of bytes with an optional k, m or g suffix")]
    Size { text: String, source: SizeError },
    #[error("{text:?} is not a number of megabytes (64, 64m or 1g)")]
    Megabytes { text: String },
    #[error("invalid log level {0:?}: expected off, error, warn, info, debug or trace")]
    LogLevel(String),
    #[error("invalid eviction policy {name:?}: {source}")]
    Eviction { name: String, source: segcache_core::Error },

    // memcached flags that segcache refuses, or that contradict each other.
    #[error("-C (disable CAS) is not supported: segcache always keeps CAS values; leave -C out")]
    DisableCas,
    #[error("-U {0}: UDP is not supported; use TCP (-p) or a UNIX socket (-s), and -U 0")]
    Udp(u16),
    #[error("-D {0:?}: only \":\" is supported as the stats detail prefix delimiter")]
    PrefixDelimiter(String),
    #[error("-e and --persist both name the persistence file: give one")]
    TwoPersistenceFiles,
    #[error("-M means --eviction none: give one of them")]
    EvictionsOffWithPolicy,

    // memcached's `-o` list.
    #[error("-o {0} needs a value: {0}=N")]
    OptionNeedsNumber(String),
    #[error("-o {name}: {value:?} is not a number")]
    OptionNotNumber { name: String, value: String },
    #[error("-o {0} needs a size: {0}=SIZE")]
    OptionNeedsSize(String),
    /// memcached's words for an `ssl_*` option without its value.
    #[error("Missing {0} argument")]
    MissingArgument(String),
    #[error("Illegal suboption \"{0}\" (-o): see docs/server.md for the ones supported")]
    IllegalSuboption(String),
    #[error("-o idle_timeout: {0} seconds is too long")]
    IdleTimeoutTooLong(u64),
    #[error("-o hashpower must be from 12 to 64, got {0}")]
    HashPower(u64),
    #[error("-o busy_poll_us: {0} is too large")]
    BusyPollTooLarge(u64),
    #[error("-o klog_file needs a path: klog_file=PATH")]
    KlogFileMissing,
    #[error("-o klog_max_bytes needs a size: klog_max_bytes=SIZE")]
    KlogMaxBytesMissing,
    #[error("-o klog_sample must be at least 1 (one request in N is logged)")]
    KlogSample,
    #[error("-o klog_max_bytes must be at least 4k, got {0}")]
    KlogMaxBytes(u64),
    #[error("-o hotkey_top must be from 1 to 1000, got {0}")]
    HotkeyTop(usize),
    #[error("-o ssl_keyformat={0}: only 1 (PEM) is supported")]
    KeyFormat(String),
    #[error("-o {0}: not supported with rustls (ssl_ciphers, ssl_kernel_tls): see docs/server.md for the TLS options")]
    SslOption(String),
    #[error("-o {name}: not supported: {why}")]
    Extstore { name: String, why: &'static str },
    #[error("-o ext_path={value:?}: {why}; as memcached: ext_path=FILE:SIZE, SIZE with a unit m, g, t or p (ext_path=/mnt/flash/cache:64g)")]
    ExtPath { value: String, why: &'static str },
    #[error("-o ext_path is given twice: segcache's flash tier is one file")]
    ExtPathTwice,
    #[error("[engine] tier_path and tier_size go together: give both (tier_path = \"/mnt/flash/cache\", tier_size = \"64g\"), or -o ext_path=FILE:SIZE")]
    TierHalf,
    #[error("-o {0}: memcached's proxy is not supported; run a proxy in front of segcache-server")]
    Proxy(String),

    // TLS.
    #[error(
        "-Z (TLS) needs the server's certificate: -o ssl_chain_cert=FILE (PEM chain, leaf first) and ssl_key=FILE"
    )]
    TlsNoCertificate,
    /// A TLS setting that the TLS layer refuses (`ssl_verify_mode`, `ssl_min_version`, a client
    /// check without a CA); the message is that layer's.
    #[error("{0}")]
    Tls(String),

    // Ranges.
    #[error(
        "max item size (-I) must be from 1k to {max} bytes (at most 1 GiB, and half the memory limit -m), got {got}"
    )]
    MaxItemSize { got: u64, max: usize },
    #[error("max reply size must be from the max item size (-I) + 1k ({floor}) to {max} bytes, got {got}")]
    MaxReplySize { got: u64, floor: u64, max: usize },
    #[error("memory limit (-m) must be at least 1 MB")]
    NoMemory,
    #[error("memory limit {0} MB is too large")]
    MemoryTooLarge(u64),
    #[error("--max-memory-limit {max} MB is less than the memory limit (-m) {memory} MB")]
    MaxMemoryBelowLimit { max: u64, memory: u64 },
    #[error("threads (-t) must be from 1 to 1024, got {0}")]
    Threads(usize),
    #[error("connection limit (-c) must be at least 1")]
    NoConnections,
    #[error("the core list (--cores) is empty")]
    NoCores,
    #[error("-a {0:?}: expected an octal mode such as 700")]
    UnixMask(String),
    #[error("listen backlog (-b) must be at least 1, got {0}")]
    Backlog(i32),
    #[error("requests per event (-R) must be at least 1")]
    NoRequestsPerEvent,

    // Protocols and authentication.
    #[error("-B {0:?}: expected ascii, binary or auto")]
    Protocol(String),
    #[error("You cannot allow the ASCII protocol while using SASL (-S speaks -B binary only).")]
    SaslNeedsBinary,
    #[error("You cannot allow the BINARY protocol while using ascii authentication tokens (-Y speaks -B ascii only).")]
    AuthFileNeedsAscii,
    #[error(
        "-S: name the SASL user file (user:password lines, mode 600) in the {} environment variable",
        crate::auth::SASL_PWDB_ENV
    )]
    SaslUsersUnnamed,
    /// The user file of `-Y` or `-S` cannot be used; the message is the file reader's (memcached's
    /// words where it has them).
    #[error("{0}")]
    Users(String),
}
