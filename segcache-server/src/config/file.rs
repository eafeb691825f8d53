//! The TOML file of `--config`: its schema, every key optional, and its reading.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::ConfigError;
use super::size;

/// A size given as a number of bytes or as text with a unit (`"1m"`, `"64KiB"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    pub fn bytes(&self) -> Result<u64, ConfigError> {
        match self {
            Size::Bytes(n) => Ok(*n),
            Size::Text(s) => size::bytes(s),
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
    pub max_memory_mb: Option<u64>,
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
    pub resize_file: Option<bool>,
    pub prefault: Option<bool>,
    pub touch_ahead: Option<bool>,
    /// `-o ext_path`'s file, with `tier_size`.
    pub tier_path: Option<PathBuf>,
    /// `-o ext_path`'s size, with `tier_path`.
    pub tier_size: Option<Size>,
    /// `-o tier_promote_after`.
    pub tier_promote_after: Option<u8>,
    /// `-o tier_write_queue`.
    pub tier_write_queue: Option<Size>,
}

impl FileConfig {
    /// Reads and parses the file at `path`.
    pub fn read(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::ReadFile { path: path.to_path_buf(), source })?;
        toml::from_str(&text)
            .map_err(|source| ConfigError::ParseFile { path: path.to_path_buf(), source: Box::new(source) })
    }
}
