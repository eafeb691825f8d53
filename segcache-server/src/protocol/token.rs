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

/// Parses a signed decimal number (an optional leading `-`).
#[inline]
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    match s.split_first() {
        Some((b'-', rest)) => {
            let n = parse_u64(rest)?;
            if n > i64::MAX as u64 + 1 {
                return None;
            }
            Some((n as i128).wrapping_neg() as i64)
        }
        _ => i64::try_from(parse_u64(s)?).ok(),
    }
}

#[inline]
pub fn parse_u32(s: &[u8]) -> Option<u32> {
    u32::try_from(parse_u64(s)?).ok()
}

/// Client flags as memcached 1.6 reads them (`safe_strtoul` into a 64-bit `long`, stored in 32
/// bits): any number up to 2^64-1, kept modulo 2^32.
#[inline]
pub fn parse_client_flags(s: &[u8]) -> Option<u32> {
    parse_u64(s).map(|n| n as u32)
}
