//! The server's two readings of a size, both through the engine's [`segcache_core::parse_size`],
//! so that `1m` means 2^20 bytes here as everywhere else in segcache (and in memcached).

use segcache_core::parse_size;

use super::error::ConfigError;

/// `-I`, `--max-reply-size`, `--segment-size`, `klog_max_bytes` and the file's sizes: bytes,
/// with an optional unit (`1048576`, `512k`, `1m`, `1MiB`).
pub fn bytes(text: &str) -> Result<u64, ConfigError> {
    parse_size(text).map_err(|source| ConfigError::Size { text: text.to_string(), source })
}

/// `-m`: megabytes, as memcached, so a bare number counts megabytes (`64`); a size with a unit
/// (`64m`, which memcached's atoi reads as 64 too, or `1g`) is taken when it is whole megabytes.
pub fn megabytes(text: &str) -> Result<u64, ConfigError> {
    let refused = || ConfigError::Megabytes { text: text.to_string() };
    let t = text.trim();
    if let Ok(mb) = t.parse::<u64>() {
        return Ok(mb);
    }
    let bytes = parse_size(t).map_err(|_| refused())?;
    match bytes % (1 << 20) {
        0 => Ok(bytes >> 20),
        _ => Err(refused()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_take_every_unit_in_powers_of_1024() {
        assert_eq!(bytes("1m").unwrap(), 1 << 20);
        assert_eq!(bytes("1MB").unwrap(), 1 << 20);
        assert_eq!(bytes("64K").unwrap(), 64 << 10);
        assert_eq!(bytes("123").unwrap(), 123);
        assert_eq!(bytes("2 g").unwrap(), 2 << 30);
        let e = bytes("").unwrap_err().to_string();
        assert_eq!(e, "invalid size \"\": expected a number of bytes with an optional k, m or g suffix");
        assert!(bytes("12x").is_err());
    }

    #[test]
    fn megabytes_as_memcached() {
        for (text, mb) in [("100", 100), ("+100", 100), (" 64 ", 64), ("100m", 100), ("64M", 64), ("2G", 2048)] {
            assert_eq!(megabytes(text).unwrap(), mb, "{text}");
        }
        assert_eq!(megabytes("1MiB").unwrap(), 1);
        assert_eq!(megabytes("0").unwrap(), 0);
        for bad in ["64x", "512k", "", "m", "-1"] {
            assert!(megabytes(bad).is_err(), "{bad:?}");
        }
        assert_eq!(megabytes("64x").unwrap_err().to_string(), "\"64x\" is not a number of megabytes (64, 64m or 1g)");
    }
}
