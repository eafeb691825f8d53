//! TLS settings: `-Z` with the `-o ssl_*` options over the file's `[tls]` table. As memcached,
//! the options mean nothing without `-Z` (or `enabled = true`).

use super::error::ConfigError;
use super::file::{TlsFile, VerifyModeFile};
use super::memcached_opts::Extended;
use crate::tls::{MinVersion, TlsSettings, VerifyMode};

/// The TLS settings, or `None` when TLS is off; checked as far as can be without reading the
/// certificate files.
pub fn resolve(enable_ssl: bool, ext: &Extended, file: &TlsFile) -> Result<Option<TlsSettings>, ConfigError> {
    if !(enable_ssl || file.enabled.unwrap_or(false)) {
        return Ok(None);
    }
    let verify_mode = match (ext.ssl_verify_mode, &file.verify_mode) {
        (Some(m), _) => m,
        (None, Some(VerifyModeFile::Number(n))) => VerifyMode::parse(&n.to_string()).map_err(ConfigError::Tls)?,
        (None, Some(VerifyModeFile::Text(t))) => VerifyMode::parse(t).map_err(ConfigError::Tls)?,
        (None, None) => VerifyMode::None,
    };
    let min_version = match (ext.ssl_min_version, &file.min_version) {
        (Some(v), _) => v,
        (None, Some(v)) => MinVersion::parse(v).map_err(ConfigError::Tls)?,
        (None, None) => MinVersion::Tls12,
    };
    let chain_cert =
        ext.ssl_chain_cert.clone().or_else(|| file.chain_cert.clone()).ok_or(ConfigError::TlsNoCertificate)?;
    let t = TlsSettings {
        chain_cert,
        key: ext.ssl_key.clone().or_else(|| file.key.clone()),
        ca_cert: ext.ssl_ca_cert.clone().or_else(|| file.ca_cert.clone()),
        verify_mode,
        min_version,
    };
    t.check().map_err(ConfigError::Tls)?;
    Ok(Some(t))
}
