//! Sizes written as text (`64MiB`, `512k`, `4096`): the one reading that every face shares, so
//! that a unit means the same bytes to the server, the Python package and the tools.
//!
//! Every unit is a power of 1024, as memcached reads `-m 64` and `-I 1m`: `k`, `m`, `g` and `t`,
//! each alone or with `b` or `ib` after it (`1m`, `1MB` and `1MiB` are all 1,048,576 bytes).

/// Why a text is not a size.
///
/// ```
/// use segcache_core::{parse_size, SizeError};
/// assert_eq!(parse_size("12 parsecs"), Err(SizeError::UnknownUnit("parsecs".into())));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// Nothing but whitespace.
    #[error("empty size: expected a number of bytes with an optional unit, such as 4096, 512k or 64MiB")]
    Empty,
    /// The number is missing or malformed (`k`, `lots`, `1.2.3m`, `-1m`, `1__0`).
    #[error("{0:?} is not a size: expected a number of bytes with an optional unit, such as 4096, 512k or 64MiB")]
    Invalid(String),
    /// The number is followed by something other than a unit.
    #[error("unknown size unit {0:?}: expected k, m, g or t (powers of 1024), alone or with b or ib")]
    UnknownUnit(String),
    /// More bytes than a `u64` holds.
    #[error("{0:?} is too large: at most 2^64 - 1 bytes")]
    Overflow(String),
}

/// Reads a size: a number of bytes with an optional unit, such as `4096`, `512k`, `1m`, `64MiB`,
/// `1.5 GB` or `2t`.
///
/// - The units are `k`, `m`, `g` and `t`, each a power of 1024 (`KiB`, `MiB`, `GiB`, `TiB`),
///   alone or followed by `b` or `ib`; a bare `b` is bytes. Case does not matter, so `64MB`,
///   `64mb`, `64M` and `64MiB` are all 67,108,864 bytes (memcached's and the server's meaning;
///   there are no powers of 1000).
/// - The number may have `_` between digits (`8_388_608`), a leading `+`, and a decimal fraction
///   (`1.5g`); the bytes are rounded down to a whole byte.
/// - Whitespace around the number and the unit is ignored.
///
/// ```
/// use segcache_core::parse_size;
/// assert_eq!(parse_size("64MB"), Ok(64 << 20));
/// assert_eq!(parse_size("512k"), Ok(512 << 10));
/// assert_eq!(parse_size("1.5 GiB"), Ok(3 << 29));
/// assert_eq!(parse_size("4096"), Ok(4096));
/// assert!(parse_size("64 parsecs").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(SizeError::Empty);
    }
    let invalid = || SizeError::Invalid(text.to_string());
    let body = t.strip_prefix('+').unwrap_or(t);
    let end = body.find(|c: char| !(c.is_ascii_digit() || c == '_' || c == '.')).unwrap_or(body.len());
    let (number, unit) = body.split_at(end);
    if number.is_empty() {
        return Err(invalid());
    }
    let multiple = unit_bytes(unit.trim()).ok_or_else(|| SizeError::UnknownUnit(unit.trim().to_string()))?;
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (number, None),
    };
    let whole = digits(whole).ok_or_else(invalid)?;
    let whole: u128 = match whole.parse() {
        Ok(n) => n,
        // Only digits are left, so the number is too long for a u128.
        Err(_) => return Err(SizeError::Overflow(text.to_string())),
    };
    let mut bytes = whole.checked_mul(u128::from(multiple)).ok_or_else(|| SizeError::Overflow(text.to_string()))?;
    if let Some(fraction) = fraction {
        let fraction = digits(fraction).ok_or_else(invalid)?;
        // 10^18 times 2^40 still fits in a u128; more decimals than 18 say nothing about bytes.
        if fraction.len() > 18 {
            return Err(invalid());
        }
        let scale = 10u128.pow(fraction.len() as u32);
        let part: u128 = fraction.parse().map_err(|_| invalid())?;
        bytes = bytes
            .checked_add(part * u128::from(multiple) / scale)
            .ok_or_else(|| SizeError::Overflow(text.to_string()))?;
    }
    u64::try_from(bytes).map_err(|_| SizeError::Overflow(text.to_string()))
}

/// The bytes of one unit, or `None` for a word that is not one.
fn unit_bytes(unit: &str) -> Option<u64> {
    let u = unit.to_ascii_lowercase();
    let prefix = u.strip_suffix("ib").or_else(|| u.strip_suffix('b')).unwrap_or(&u);
    // `ib` alone is no unit; `b` alone is bytes.
    if u == "ib" {
        return None;
    }
    match prefix {
        "" => Some(1),
        "k" => Some(1 << 10),
        "m" => Some(1 << 20),
        "g" => Some(1 << 30),
        "t" => Some(1 << 40),
        _ => None,
    }
}

/// `s` without its `_` separators, when it is digits with each `_` between two of them.
fn digits(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_digit()
        && b[b.len() - 1].is_ascii_digit()
        && b.iter().all(|c| c.is_ascii_digit() || *c == b'_')
        && !s.contains("__");
    ok.then(|| s.replace('_', ""))
}

#[cfg(test)]
mod tests {
    use super::{parse_size, SizeError};

    #[test]
    fn plain_bytes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("+5"), Ok(5));
        assert_eq!(parse_size("8_388_608"), Ok(8 << 20));
        assert_eq!(parse_size("7b"), Ok(7));
        assert_eq!(parse_size("7 B"), Ok(7));
        assert_eq!(parse_size(&u64::MAX.to_string()), Ok(u64::MAX));
    }

    #[test]
    fn every_unit_is_a_power_of_1024() {
        for (letter, shift) in [("k", 10), ("m", 20), ("g", 30), ("t", 40)] {
            for suffix in ["", "b", "ib"] {
                for unit in [format!("{letter}{suffix}"), format!("{letter}{suffix}").to_ascii_uppercase()] {
                    assert_eq!(parse_size(&format!("3{unit}")), Ok(3 << shift), "3{unit}");
                    assert_eq!(parse_size(&format!("3 {unit}")), Ok(3 << shift), "3 {unit}");
                }
            }
        }
        // Mixed case, as people write them.
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64Mb"), Ok(64 << 20));
        assert_eq!(parse_size("64kB"), Ok(64 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
    }

    #[test]
    fn fractions_round_down_to_a_byte() {
        assert_eq!(parse_size("1.5K"), Ok(1536));
        assert_eq!(parse_size("0.0625GiB"), Ok(64 << 20));
        assert_eq!(parse_size("1.1k"), Ok(1126));
        assert_eq!(parse_size("1.5"), Ok(1));
        assert_eq!(parse_size("0.999999999999999999t"), Ok((1 << 40) - 1));
        assert!(matches!(parse_size("1.0000000000000000001t"), Err(SizeError::Invalid(_))));
    }

    #[test]
    fn whitespace_is_ignored_around_number_and_unit() {
        assert_eq!(parse_size("  64m  "), Ok(64 << 20));
        assert_eq!(parse_size("\t64 \t MiB\n"), Ok(64 << 20));
        assert_eq!(parse_size(" 4096 "), Ok(4096));
        // Not inside the number or the unit.
        assert!(parse_size("4 096").is_err());
        assert!(parse_size("64 M iB").is_err());
    }

    #[test]
    fn empty() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(parse_size("   "), Err(SizeError::Empty));
    }

    #[test]
    fn overflow() {
        assert_eq!(parse_size("18446744073709551616"), Err(SizeError::Overflow("18446744073709551616".into())));
        assert!(matches!(parse_size("16777216t"), Err(SizeError::Overflow(_))));
        assert_eq!(parse_size("16777215t"), Ok(16_777_215 << 40));
        assert!(matches!(parse_size("99999999999999999999999T"), Err(SizeError::Overflow(_))));
        assert!(matches!(parse_size(&"9".repeat(60)), Err(SizeError::Overflow(_))));
        assert!(matches!(parse_size("17179869184g"), Err(SizeError::Overflow(_))));
    }

    #[test]
    fn garbage() {
        for bad in ["k", "MiB", "-1m", "1.2.3M", ".5m", "1.m", "_1", "1_", "1__0", "0x10", "1e6", "++1", "1,5m"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_size("12 parsecs"), Err(SizeError::UnknownUnit("parsecs".into())));
        assert_eq!(parse_size("64x"), Err(SizeError::UnknownUnit("x".into())));
        assert_eq!(parse_size("1ib"), Err(SizeError::UnknownUnit("ib".into())));
        assert_eq!(parse_size("1kk"), Err(SizeError::UnknownUnit("kk".into())));
        assert_eq!(parse_size("lots"), Err(SizeError::Invalid("lots".into())));
    }

    #[test]
    fn messages_name_the_text() {
        assert!(parse_size("lots").unwrap_err().to_string().contains("\"lots\""));
        assert!(parse_size("1.2.3m").unwrap_err().to_string().contains("\"1.2.3m\""));
        assert!(parse_size("99999999999999999999999T").unwrap_err().to_string().contains("too large"));
    }
}
