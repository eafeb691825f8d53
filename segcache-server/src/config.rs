//! Settings: memcached-style command-line flags, an optional TOML file, and defaults, merged in
//! that order of precedence (a flag overrides the file, the file overrides the default).

use std::path::PathBuf;

use clap::Parser;
use segcache_core::{Policy, MAX_SEGMENT_SIZE};
use serde::Deserialize;

/// The largest value the engine can hold is a segment less its headers; segments are at most
/// 4 MiB, so `-I` is capped just below that.
pub const MAX_ITEM_SIZE_LIMIT: usize = MAX_SEGMENT_SIZE - 4096;

/// The default largest reply to one retrieval request. Replies are copied out of the engine, so
/// this is what one connection's multi-get can make the server hold (see "Resource bounds" in
/// docs/server.md).
pub const DEFAULT_MAX_REPLY: usize = 16 << 20;
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
    /// Interface to listen on [default: 127.0.0.1].
    #[arg(short = 'l', long = "listen")]
    pub listen: Option<String>,
    /// Item memory in megabytes [default: 64].
    #[arg(short = 'm', long = "memory-limit", value_name = "MB")]
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
    #[arg(short = 'v', action = clap::ArgAction::Count)]
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
    /// Keep the cache in this file: a graceful stop (SIGTERM/SIGINT) makes the next start warm.
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
    /// Serve Prometheus metrics on 127.0.0.1:PORT/metrics [default: off].
    #[arg(long, value_name = "PORT")]
    pub admin_port: Option<u16>,
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
    pub enable_shutdown: Option<bool>,
    #[serde(default)]
    pub engine: EngineFile,
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
    pub pin: bool,
    pub cores: Option<Vec<usize>>,
    pub admin_port: Option<u16>,
    pub log_level: log::LevelFilter,
    /// `-A`: the `shutdown` command is allowed.
    pub shutdown_command: bool,
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
        Settings::resolve(cli, file)
    }

    /// Merges flags over the file over the defaults and checks the result.
    pub fn resolve(cli: Cli, file: FileConfig) -> Result<Settings, String> {
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
        let segment_size = match (cli.segment_size, e.segment_size) {
            (Some(s), _) => parse_size(&s)? as usize,
            (None, Some(s)) => s.bytes()? as usize,
            // Large enough for the largest item with its header, at least 1 MiB.
            (None, None) => (max_item_size + 1024).next_power_of_two().clamp(1 << 20, MAX_SEGMENT_SIZE),
        };
        let policy_name = cli.eviction.or(e.eviction).unwrap_or_else(|| "merge".into());
        let eviction: Policy =
            policy_name.parse().map_err(|e| format!("invalid eviction policy {policy_name:?}: {e}"))?;
        let memory_mb = cli.memory_mb.or(file.memory_mb).unwrap_or(64);
        if memory_mb == 0 {
            return Err("memory limit (-m) must be at least 1 MB".into());
        }
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
        Ok(Settings {
            port: cli.port.or(file.port).unwrap_or(11211),
            listen: cli.listen.or(file.listen).unwrap_or_else(|| "127.0.0.1".into()),
            memory_bytes: usize::try_from(memory_mb.saturating_mul(1 << 20))
                .map_err(|_| format!("memory limit {memory_mb} MB is too large"))?,
            threads,
            max_connections,
            max_item_size,
            max_reply_size: max_reply_size as usize,
            segment_size,
            eviction,
            shards: cli.shards.or(e.shards),
            hash_power: cli.hash_power.or(e.hash_power),
            path: cli.persist.or(e.path),
            reset_bad_file: cli.reset_bad_file || e.reset_bad_file.unwrap_or(false),
            lazy_verify: cli.lazy_verify || e.lazy_verify.unwrap_or(false),
            pin: !cli.no_pin && file.pin.unwrap_or(true),
            cores: cores_list,
            admin_port: cli.admin_port.or(file.admin_port),
            log_level,
            shutdown_command: cli.enable_shutdown || file.enable_shutdown.unwrap_or(false),
        })
    }

    /// The engine builder these settings describe.
    pub fn builder(&self) -> segcache_core::Builder {
        let mut b = segcache_core::Builder::new()
            .heap_size(self.memory_bytes)
            .segment_size(self.segment_size)
            .eviction(self.eviction)
            .reset_bad_file(self.reset_bad_file)
            .lazy_verify(self.lazy_verify)
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
            "port = 1\nthreads = 3\nmax_item_size = \"2m\"\npin = false\nadmin_port = 9\n[engine]\neviction = \"fifo\"\npath = \"/tmp/x\"\nlazy_verify = true\n",
        )
        .unwrap();
        let s = Settings::resolve(cli(&["-p", "2", "-I", "512k", "-vv"]), file).unwrap();
        assert_eq!((s.port, s.threads, s.max_item_size), (2, 3, 512 << 10));
        assert_eq!((s.eviction, s.pin, s.admin_port), (Policy::Fifo, false, Some(9)));
        assert_eq!(s.path.as_deref(), Some(std::path::Path::new("/tmp/x")));
        assert!(s.lazy_verify);
        assert_eq!(s.log_level, log::LevelFilter::Debug);
    }

    #[test]
    fn segment_size_follows_the_item_size() {
        let s = Settings::resolve(cli(&["-I", "2m"]), FileConfig::default()).unwrap();
        assert_eq!(s.segment_size, 4 << 20);
        let s = Settings::resolve(cli(&["-I", "100k"]), FileConfig::default()).unwrap();
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
