//! The command line: memcached's one-letter flags (meaning what they mean to memcached) and
//! segcache's long ones, and memcached's flags that segcache refuses.

use std::path::PathBuf;

use clap::Parser;

use super::error::ConfigError;
use super::size::megabytes;

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
    #[arg(short = 'm', long = "memory-limit", value_name = "MB", value_parser = megabytes)]
    pub memory_mb: Option<u64>,
    /// The most megabytes `cache_memlimit` may raise -m to while the server runs. The heap and
    /// hash table are laid out for it at start: memory only as segments are first written, but
    /// a hash table sized for it (about an eighth of it) [default: -m, which can shrink only].
    #[arg(long = "max-memory-limit", value_name = "MB", value_parser = megabytes)]
    pub max_memory_mb: Option<u64>,
    /// Worker threads [default: one per core].
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Maximum simultaneous connections [default: 1024].
    #[arg(short = 'c', long = "conn-limit")]
    pub max_connections: Option<usize>,
    /// Maximum item size, with an optional k/m suffix [default: 1m].
    #[arg(short = 'I', long = "max-item-size", value_name = "SIZE")]
    pub max_item_size: Option<String>,
    /// Largest reply held for a retrieval line too long to parse whole (other multi-gets are
    /// streamed), k/m suffix; past it the reply is `SERVER_ERROR out of memory writing get
    /// response` [default: 16m].
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
    /// Reopen a persistence file made with another -m (or segment size, shard count, hash power)
    /// by moving its items into a heap of these settings, instead of refusing to start.
    #[arg(long)]
    pub resize_file: bool,
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

impl Cli {
    /// memcached's flags that segcache refuses, and flags that contradict each other, each with
    /// what to use instead.
    pub fn refuse_unsupported(&self) -> Result<(), ConfigError> {
        if self.disable_cas {
            return Err(ConfigError::DisableCas);
        }
        if let Some(n) = self.udp_port.filter(|&n| n != 0) {
            return Err(ConfigError::Udp(n));
        }
        if let Some(d) = self.prefix_delimiter.as_deref().filter(|&d| d != ":") {
            return Err(ConfigError::PrefixDelimiter(d.to_string()));
        }
        if self.memory_file.is_some() && self.persist.is_some() {
            return Err(ConfigError::TwoPersistenceFiles);
        }
        if self.disable_evictions && self.eviction.is_some() {
            return Err(ConfigError::EvictionsOffWithPolicy);
        }
        Ok(())
    }
}
