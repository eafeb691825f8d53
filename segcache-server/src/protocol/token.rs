//! The tokenizer and the number parsers shared by the text and the meta protocol.

use memchr::memchr;

/// The most space-separated tokens one non-retrieval command line may have.
pub const MAX_TOKENS: usize = 24;
/// Splits off the next space-separated token.
#[inline]
pub fn next_token<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let s = *rest;
    let start = s.iter().position(|&b| b != b' ')?;
    let s = &s[start..];
    let end = memchr(b' ', s).unwrap_or(s.len());
    *rest = &s[end..];
    Some(&s[..end])
}

/// The command line split into at most [`MAX_TOKENS`] tokens.
pub struct Tokens<'a> {
    toks: [&'a [u8]; MAX_TOKENS],
    n: usize,
}

impl<'a> Tokens<'a> {
    /// `None` when the line has more than [`MAX_TOKENS`] tokens.
    pub fn split(mut line: &'a [u8]) -> Option<Self> {
        let mut t = Tokens { toks: [&[][..]; MAX_TOKENS], n: 0 };
        while let Some(tok) = next_token(&mut line) {
            if t.n == MAX_TOKENS {
                return None;
            }
            t.toks[t.n] = tok;
            t.n += 1;
        }
        Some(t)
    }
    pub fn get(&self) -> &[&'a [u8]] {
        &self.toks[..self.n]
    }
}

/// Parses an unsigned decimal number: digits only, no sign, no overflow.
#[inline]
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

#[inline]
pub fn parse_u32(s: &[u8]) -> Option<u32> {
    u32::try_from(parse_u64(s)?).ok()
}

/// A number as memcached 1.6 reads one into an `int` (`safe_strtol`): C `strtol` into a 64-bit
/// `long`, then kept in a signed 32-bit integer. So leading C whitespace, a `+` or `-` sign and
/// any number of leading zeros are accepted, and whitespace after the digits; a number outside
/// the 64-bit range is an error (`ERANGE`); any other keeps its low 32 bits, read as signed.
pub fn parse_c_int(s: &[u8]) -> Option<i32> {
    let start = s.iter().position(|b| !C_SPACE.contains(b))?;
    let s = &s[start..];
    let (negative, rest) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || !rest[digits..].iter().all(|b| C_SPACE.contains(b)) {
        return None;
    }
    // strtol accumulates the magnitude; i128 holds every in-range one and the first step past it.
    let mut n: i128 = 0;
    for &b in &rest[..digits] {
        n = n * 10 + i128::from(b - b'0');
        if n > i128::from(i64::MAX) + 1 {
            return None;
        }
    }
    let l = i64::try_from(if negative { -n } else { n }).ok()?;
    Some(l as i32)
}

/// An exptime as memcached 1.6 reads one ([`parse_c_int`]): 2^31 to 2^32-1 become negative
/// (expired at once), 2^32 becomes 0 (never), 2^63-1 becomes -1. Clients rely on it (PHP's -1
/// and Django's "do not keep" arrive as 4294967295).
pub fn parse_exptime(s: &[u8]) -> Option<i64> {
    parse_c_int(s).map(i64::from)
}

/// memcached's `slabs automove <0|1|2>` / `slabs automove ratio <r>` (arguments after
/// `automove`, a trailing `noreply` included): `Some(true)` is accepted, `Some(false)` is
/// memcached's `ERROR`, `None` its `CLIENT_ERROR bad command line format` (a level that
/// `safe_strtoul` refuses).
pub fn parse_automove(args: &[&[u8]]) -> Option<bool> {
    match args {
        [] => Some(false),
        [b"ratio"] => Some(false),
        [b"ratio", r, ..] => Some(parse_strtod(r).is_some()),
        [level, ..] => match parse_strtoul_u32(level)? {
            0..=2 => Some(true),
            _ => Some(false),
        },
    }
}

/// C `safe_strtoul` into 32 bits: `strtoul` (a sign allowed, a negative number refused, a
/// number past 2^64-1 refused), kept modulo 2^32.
fn parse_strtoul_u32(s: &[u8]) -> Option<u32> {
    let start = s.iter().position(|b| !C_SPACE.contains(b))?;
    let s = &s[start..];
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let mut n: u64 = 0;
    if digits.is_empty() {
        return None;
    }
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    // strtoul negates a `-` number; memcached refuses one that then reads as a negative long.
    let n = if negative { n.wrapping_neg() } else { n };
    if negative && (n as i64) < 0 {
        return None;
    }
    Some(n as u32)
}

/// C `safe_strtod`, near enough for a ratio: a decimal float, out-of-range refused.
fn parse_strtod(s: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(s).ok()?;
    let d: f64 = s.parse().ok()?;
    let named = s.trim_start_matches(['+', '-']).to_ascii_lowercase();
    if d.is_infinite() && !named.starts_with("inf") {
        return None;
    }
    Some(d)
}

/// The bytes C's `isspace` accepts.
const C_SPACE: &[u8] = b" \t\n\x0b\x0c\r";

/// Client flags as memcached 1.6 reads them (`safe_strtoul` into a 64-bit `long`, stored in 32
/// bits): any number up to 2^64-1, kept modulo 2^32.
#[inline]
pub fn parse_client_flags(s: &[u8]) -> Option<u32> {
    parse_u64(s).map(|n| n as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptime_as_safe_strtol_reads_it() {
        let e = |s: &str| parse_exptime(s.as_bytes());
        assert_eq!(e("0"), Some(0));
        assert_eq!(e("-1"), Some(-1));
        assert_eq!(e("100"), Some(100));
        assert_eq!(e("+100"), Some(100));
        assert_eq!(e("000100"), Some(100));
        assert_eq!(e("2147483647"), Some(2147483647));
        assert_eq!(e("2147483648"), Some(-2147483648));
        assert_eq!(e("4294967295"), Some(-1));
        assert_eq!(e("4294967296"), Some(0));
        assert_eq!(e("4294967396"), Some(100));
        assert_eq!(e("9223372036854775807"), Some(-1));
        assert_eq!(e("-9223372036854775808"), Some(0));
        assert_eq!(e("0000000000000000000000000000009223372036854775807"), Some(-1));
        assert_eq!(e("9223372036854775808"), None);
        assert_eq!(e("-9223372036854775809"), None);
        assert_eq!(e("18446744073709551615"), None);
        assert_eq!(e("100000000000000000000"), None);
        assert_eq!(e(""), None);
        assert_eq!(e("-"), None);
        assert_eq!(e("+"), None);
        assert_eq!(e("+-1"), None);
        assert_eq!(e("1x"), None);
        assert_eq!(e("0x10"), None);
    }

    #[test]
    fn automove_as_memcached_answers() {
        let a = |args: &[&str]| parse_automove(&args.iter().map(|s| s.as_bytes()).collect::<Vec<_>>());
        assert_eq!(a(&["0"]), Some(true));
        assert_eq!(a(&["2", "noreply"]), Some(true));
        assert_eq!(a(&["4294967297"]), Some(true));
        assert_eq!(a(&["3"]), Some(false));
        assert_eq!(a(&["invalid"]), None);
        assert_eq!(a(&["-1"]), None);
        assert_eq!(a(&["ratio", "0.8"]), Some(true));
        assert_eq!(a(&["ratio", "x"]), Some(false));
        assert_eq!(a(&["ratio"]), Some(false));
        assert_eq!(a(&[]), Some(false));
    }
}
