//! memcached's `-o` list: the extended options that segcache serves (`ext_path` among them, for
//! the flash tier), those it accepts and ignores (they tune parts of memcached that segcache does
//! not have), and those it refuses with what to use instead.

use std::path::PathBuf;

use super::error::ConfigError;
use super::size;
use crate::tls::{MinVersion, VerifyMode};

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

/// extstore's `-o` options that tune how it lays out and writes its file, which the flash tier
/// does its own way: accepted and ignored (listed in docs/server.md). Those that choose which
/// items go to flash, stay there or come back are refused (`extstore_refusal`).
const IGNORED_EXTSTORE: &[&str] = &["ext_page_size", "ext_wbuf_size", "ext_threads", "ext_io_depth", "ext_max_sleep"];

/// Why an extstore option other than `ext_path` and `IGNORED_EXTSTORE` is refused: each changes
/// which items extstore keeps, in a way the flash tier does not.
fn extstore_refusal(name: &str) -> &'static str {
    match name {
        "ext_item_size" => "every item that eviction takes out of memory goes to the flash tier, whatever its size",
        "ext_item_age" => "items go to the flash tier when eviction takes them out of memory, not after an idle time",
        "ext_low_ttl" => "the flash tier keeps items of every TTL in one FIFO, with no place apart for short ones",
        "ext_recache_rate" => {
            "a write to an item on the flash tier brings it back to memory, and so does a read once the item was \
             read tier_promote_after=N times"
        }
        "ext_compact_under" | "ext_max_frag" => {
            "the flash tier does not compact: when full it drops its oldest segment"
        }
        "ext_drop_under" | "ext_drop_unread" => "the flash tier drops its oldest segment when full, read or not",
        _ => "not an extstore option segcache knows (see docs/server.md)",
    }
}

/// memcached's `ext_path=FILE:SIZE`: the file and its size in bytes. SIZE is a whole number with
/// a unit, m, g, t or p (powers of 1024, either case), as memcached reads it; memcached's third
/// part, a page bucket, has no meaning for one FIFO of segments and is refused.
fn ext_path(value: Option<&str>) -> Result<(PathBuf, u64), ConfigError> {
    let value = value.filter(|v| !v.is_empty()).ok_or(ConfigError::ExtPath { value: String::new(), why: "missing" })?;
    let bad = |why| ConfigError::ExtPath { value: value.to_string(), why };
    let mut parts = value.split(':');
    let file = parts.next().filter(|f| !f.is_empty()).ok_or_else(|| bad("no file"))?;
    let size = parts.next().filter(|s| !s.is_empty()).ok_or_else(|| bad("no size"))?;
    if parts.next().is_some() {
        return Err(bad("a page bucket after the size is not supported: the flash tier is one FIFO of segments"));
    }
    let unit = size.chars().last().unwrap_or_default();
    let digits = &size[..size.len() - unit.len_utf8()];
    let shift = match unit.to_ascii_lowercase() {
        'm' => 20,
        'g' => 30,
        't' => 40,
        'p' => 50,
        _ => return Err(bad("the size needs a unit")),
    };
    let n: u64 = digits.parse().ok().filter(|&n| n > 0).ok_or_else(|| bad("the size is not a whole number above 0"))?;
    let bytes = n.checked_mul(1 << shift).ok_or_else(|| bad("the size is too large"))?;
    Ok((PathBuf::from(file), bytes))
}

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
    /// `tier_promote_after=N` (`Builder::tier_promote_after`).
    pub tier_promote_after: Option<u8>,
    /// `tier_write_queue=SIZE` (`Builder::tier_write_queue`).
    pub tier_write_queue: Option<u64>,
    /// `ext_path=FILE:SIZE`: the flash tier's file and its size in bytes.
    pub ext_path: Option<(PathBuf, u64)>,
}

/// Parses memcached's `-o` lists (each comma separated; `-o` may be repeated).
pub fn parse_extended(lists: &[String]) -> Result<Extended, ConfigError> {
    let mut x = Extended::default();
    for opt in lists.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|o| !o.is_empty()) {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let number = |what: &str| -> Result<u64, ConfigError> {
            let v = value.ok_or_else(|| ConfigError::OptionNeedsNumber(what.to_string()))?;
            v.parse::<u64>().map_err(|_| ConfigError::OptionNotNumber { name: what.to_string(), value: v.to_string() })
        };
        match name {
            "idle_timeout" => {
                let n = number(name)?;
                x.idle_timeout = Some(u32::try_from(n).map_err(|_| ConfigError::IdleTimeoutTooLong(n))?);
            }
            "hashpower" => {
                let n = number(name)?;
                if !(12..=64).contains(&n) {
                    return Err(ConfigError::HashPower(n));
                }
                x.hash_power = Some(n as u8);
            }
            "track_sizes" => x.track_sizes = true,
            "touch_ahead" => x.touch_ahead = Some(true),
            "no_touch_ahead" => x.touch_ahead = Some(false),
            "ssl_chain_cert" | "ssl_key" | "ssl_ca_cert" | "ssl_verify_mode" | "ssl_min_version" | "ssl_keyformat"
            | "ssl_wbuf_size" => {
                let v =
                    value.filter(|v| !v.is_empty()).ok_or_else(|| ConfigError::MissingArgument(name.to_string()))?;
                match name {
                    "ssl_chain_cert" => x.ssl_chain_cert = Some(v.into()),
                    "ssl_key" => x.ssl_key = Some(v.into()),
                    "ssl_ca_cert" => x.ssl_ca_cert = Some(v.into()),
                    "ssl_verify_mode" => x.ssl_verify_mode = Some(VerifyMode::parse(v).map_err(ConfigError::Tls)?),
                    "ssl_min_version" => x.ssl_min_version = Some(MinVersion::parse(v).map_err(ConfigError::Tls)?),
                    // memcached's 1 is PEM, the only format read here.
                    "ssl_keyformat" if v != "1" => return Err(ConfigError::KeyFormat(v.to_string())),
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
                x.busy_poll_us = Some(u32::try_from(n).map_err(|_| ConfigError::BusyPollTooLarge(n))?);
            }
            "klog_file" => match value {
                Some(p) if !p.is_empty() => x.klog_file = Some(PathBuf::from(p)),
                _ => return Err(ConfigError::KlogFileMissing),
            },
            "klog_sample" => x.klog_sample = Some(number(name)?),
            "klog_max_bytes" => x.klog_max_bytes = Some(size::bytes(value.ok_or(ConfigError::KlogMaxBytesMissing)?)?),
            "hotkey_sample" => x.hotkey_sample = Some(number(name)?),
            "hotkey_top" => x.hotkey_top = Some(number(name)? as usize),
            "tier_promote_after" => {
                let n = number(name)?;
                x.tier_promote_after = Some(
                    u8::try_from(n)
                        .map_err(|_| ConfigError::OptionNotNumber { name: name.to_string(), value: n.to_string() })?,
                );
            }
            "tier_write_queue" => {
                let v =
                    value.filter(|v| !v.is_empty()).ok_or_else(|| ConfigError::OptionNeedsSize(name.to_string()))?;
                x.tier_write_queue = Some(size::bytes(v)?);
            }
            n if n.starts_with("ssl_") => return Err(ConfigError::SslOption(n.to_string())),
            "ext_path" if x.ext_path.is_some() => return Err(ConfigError::ExtPathTwice),
            "ext_path" => x.ext_path = Some(ext_path(value)?),
            n if IGNORED_EXTSTORE.contains(&n) => {}
            n if n.starts_with("ext_") => {
                return Err(ConfigError::Extstore { name: n.to_string(), why: extstore_refusal(n) })
            }
            n if n.starts_with("proxy_") => return Err(ConfigError::Proxy(n.to_string())),
            n if IGNORED_EXTENDED.contains(&n) => {}
            n => return Err(ConfigError::IllegalSuboption(n.to_string())),
        }
    }
    Ok(x)
}
