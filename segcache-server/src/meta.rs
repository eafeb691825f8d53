//! The meta protocol (`mg`, `ms`, `md`, `ma`, `me`, `mn`) of memcached 1.6: flag parsing and
//! execution.
//!
//! Deviations forced by the engine (documented in docs/server.md): `E` (caller-chosen CAS),
//! `I` (invalidate / stale items), `h` (hit before), `l` (last access) and `R` (recache window)
//! need item state the engine does not keep, so they are refused with a `CLIENT_ERROR` rather
//! than answered wrongly. `C` (compare CAS) on `md`, `ma` and non-set `ms` modes, and `c` on
//! `ms`/`ma`, take two engine calls, so they are not atomic against a concurrent writer. `N` on
//! `mg` vivifies with `W`, but no other client sees `Z`.

use base64::Engine as _;
use segcache_core::MAX_KEY_LEN;

use crate::exec::{do_arith, do_store, put_i64, put_u64, touch, Arith, Expiry, Stored};
use crate::parse::{parse_i64, parse_u64, FailKind, StoreKind};
use crate::state::Ctx;
use crate::stats::bump;

/// Which meta command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaCmd {
    Get,
    Set,
    Delete,
    Arith,
    Debug,
    Noop,
}

/// A meta command's flags. `raw` keeps the flag tokens as sent so that return flags are echoed
/// in the order the client gave them, as memcached does.
#[derive(Debug, Default, Clone, Copy)]
pub struct MetaFlags<'a> {
    pub raw: &'a [u8],
    /// `b`: the key is base64.
    pub base64: bool,
    /// `q`: suppress the common success/miss code.
    pub quiet: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `x` (md): remove the value but keep the item.
    pub remove_value: bool,
    /// `O`: opaque token echoed back.
    pub opaque: Option<&'a [u8]>,
    /// `T`: new TTL.
    pub ttl: Option<i64>,
    /// `N`: vivify on miss with this TTL.
    pub vivify: Option<i64>,
    /// `C`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `F`: client flags (ms).
    pub client_flags: Option<u32>,
    /// `M`: mode (ms: E A P R S; ma: I + D -).
    pub mode: Option<u8>,
    /// `D`: delta (ma).
    pub delta: Option<u64>,
    /// `J`: initial value on vivify (ma).
    pub initial: Option<u64>,
}

/// Splits the next space-separated token.
fn next_token<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let s = *rest;
    let start = s.iter().position(|&b| b != b' ')?;
    let s = &s[start..];
    let end = s.iter().position(|&b| b == b' ').unwrap_or(s.len());
    *rest = &s[end..];
    Some(&s[..end])
}

/// Parses the flags of `cmd` from the rest of its line.
pub fn parse_meta_flags(cmd: MetaCmd, raw: &[u8]) -> Result<MetaFlags<'_>, FailKind> {
    let (allowed, unsupported): (&[u8], &[u8]) = match cmd {
        MetaCmd::Get => (b"bcfkOqstTvNu", b"hlRE"),
        MetaCmd::Set => (b"bcCFkOqTMN", b"EI"),
        MetaCmd::Delete => (b"bCkOqTx", b"EI"),
        MetaCmd::Arith => (b"bCNJDTMOqtcvk", b"E"),
        MetaCmd::Debug => (b"b", b""),
        MetaCmd::Noop => (b"", b""),
    };
    let mut f = MetaFlags { raw, ..MetaFlags::default() };
    let mut rest = raw;
    while let Some(tok) = next_token(&mut rest) {
        let (c, val) = (tok[0], &tok[1..]);
        if unsupported.contains(&c) {
            return Err(FailKind::UnsupportedFlag);
        }
        if !allowed.contains(&c) {
            return Err(FailKind::InvalidFlag);
        }
        let num = || parse_u64(val).ok_or(FailKind::BadToken);
        let signed = || parse_i64(val).ok_or(FailKind::BadToken);
        match c {
            b'O' => {
                if val.len() > 32 {
                    return Err(FailKind::BadToken);
                }
                f.opaque = Some(val);
            }
            b'T' => f.ttl = Some(signed()?),
            b'N' => f.vivify = Some(signed()?),
            b'C' => f.compare_cas = Some(num()?),
            b'F' => f.client_flags = Some(u32::try_from(num()?).map_err(|_| FailKind::BadToken)?),
            b'D' => f.delta = Some(num()?),
            b'J' => f.initial = Some(num()?),
            b'M' => {
                let [m] = val else { return Err(FailKind::InvalidMode) };
                let ok = match cmd {
                    MetaCmd::Set => b"EAPRSeaprs".contains(m),
                    _ => b"I+iD-d".contains(m),
                };
                if !ok {
                    return Err(FailKind::InvalidMode);
                }
                f.mode = Some(m.to_ascii_uppercase());
            }
            _ => {
                // Flags without a token.
                if !val.is_empty() {
                    return Err(FailKind::InvalidFlag);
                }
                match c {
                    b'b' => f.base64 = true,
                    b'q' => f.quiet = true,
                    b'v' => f.value = true,
                    b'x' => f.remove_value = true,
                    _ => {} // return flags (c f k s t) are read from `raw`; `u` has no effect here
                }
            }
        }
    }
    Ok(f)
}

/// What return flags can report about an item.
#[derive(Debug, Clone, Copy, Default)]
struct Info {
    flags: u32,
    cas: u64,
    size: usize,
    /// Seconds left, -1 for never.
    ttl: i64,
}

impl Info {
    fn of(item: &segcache_core::Item<'_>) -> Info {
        Info {
            flags: item.flags(),
            cas: item.cas(),
            size: item.value().len(),
            ttl: item.ttl().map_or(-1, |d| d.as_secs() as i64),
        }
    }
}

/// Appends the return flags the request asked for, in its order.
fn put_ret_flags(out: &mut Vec<u8>, f: &MetaFlags<'_>, key: &[u8], info: Option<&Info>) {
    let mut rest = f.raw;
    let asked_key = f.raw.split(|&b| b == b' ').any(|t| t == b"k");
    while let Some(tok) = next_token(&mut rest) {
        match (tok[0], info) {
            (b'O', _) => {
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            (b'k', _) => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key);
            }
            (b'b', _) if asked_key => out.extend_from_slice(b" b"),
            (b'c', Some(i)) => {
                out.extend_from_slice(b" c");
                put_u64(out, i.cas);
            }
            (b'f', Some(i)) => {
                out.extend_from_slice(b" f");
                put_u64(out, u64::from(i.flags));
            }
            (b's', Some(i)) => {
                out.extend_from_slice(b" s");
                put_u64(out, i.size as u64);
            }
            (b't', Some(i)) => {
                out.extend_from_slice(b" t");
                put_i64(out, i.ttl);
            }
            _ => {}
        }
    }
}

/// Writes `CODE<flags>\r\n`.
fn put_code(out: &mut Vec<u8>, code: &[u8], f: &MetaFlags<'_>, key: &[u8], info: Option<&Info>) {
    out.extend_from_slice(code);
    put_ret_flags(out, f, key, info);
    out.extend_from_slice(b"\r\n");
}

/// Decodes a base64 key into `buf`, or checks a plain one.
fn decode_key<'k>(key: &'k [u8], base64: bool, buf: &'k mut [u8; 256]) -> Result<&'k [u8], FailKind> {
    if !base64 {
        return Ok(key);
    }
    let n = base64::engine::general_purpose::STANDARD
        .decode_slice(key, &mut buf[..])
        .map_err(|_| FailKind::BadFormat)?;
    if n == 0 || n > MAX_KEY_LEN {
        return Err(FailKind::KeyTooLong);
    }
    Ok(&buf[..n])
}

/// Runs one meta command.
pub fn execute(cmd: MetaCmd, key_token: &[u8], data: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    if cmd == MetaCmd::Noop {
        out.extend_from_slice(b"MN\r\n");
        return;
    }
    let mut buf = [0u8; 256];
    let key = match decode_key(key_token, f.base64, &mut buf) {
        Ok(k) => k,
        Err(kind) => {
            out.extend_from_slice(kind.reply().unwrap_or(b"CLIENT_ERROR bad key\r\n"));
            return;
        }
    };
    match cmd {
        MetaCmd::Get => meta_get(key, key_token, f, out, ctx),
        MetaCmd::Set => meta_set(key, key_token, data, f, out, ctx),
        MetaCmd::Delete => meta_delete(key, key_token, f, out, ctx),
        MetaCmd::Arith => meta_arith(key, key_token, f, out, ctx),
        MetaCmd::Debug => meta_debug(key, key_token, out, ctx),
        MetaCmd::Noop => unreachable!("handled above"),
    }
}

/// Writes a hit: `VA <size> <flags>\r\n<data>\r\n` with `v`, else `HD <flags>\r\n`.
fn put_hit(out: &mut Vec<u8>, f: &MetaFlags<'_>, key_token: &[u8], item: &segcache_core::Item<'_>, won: bool) {
    let info = Info::of(item);
    if f.value {
        out.extend_from_slice(b"VA ");
        put_u64(out, info.size as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    put_ret_flags(out, f, key_token, Some(&info));
    if won {
        out.extend_from_slice(b" W");
    }
    out.extend_from_slice(b"\r\n");
    if f.value {
        out.extend_from_slice(item.value());
        out.extend_from_slice(b"\r\n");
    }
}

fn meta_get(key: &[u8], key_token: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    bump(&ctx.stats.cmd_get, 1);
    let mut expire_after_read = false;
    if let Some(t) = f.ttl {
        bump(&ctx.stats.cmd_touch, 1);
        match Expiry::from_exptime(t, cache.now()).ttl() {
            Some(ttl) => {
                let hit = cache.touch(key, ttl).is_ok();
                bump(if hit { &ctx.stats.touch_hits } else { &ctx.stats.touch_misses }, 1);
            }
            None => expire_after_read = true,
        }
    }
    let mut hit = cache.get_with(key, |item| put_hit(out, f, key_token, &item, false)).is_some();
    if expire_after_read {
        let _ = cache.delete(key);
    }
    if !hit {
        if let Some(n) = f.vivify {
            // The first client to miss creates an empty placeholder and wins (W) the right to
            // fill it.
            if let Some(ttl) = Expiry::from_exptime(n, cache.now()).ttl() {
                let won = cache.add(key, b"", 0, ttl).is_ok();
                hit = cache.get_with(key, |item| put_hit(out, f, key_token, &item, won)).is_some();
            }
        }
    }
    if hit {
        bump(&ctx.stats.get_hits, 1);
    } else {
        bump(&ctx.stats.get_misses, 1);
        if !f.quiet {
            out.extend_from_slice(b"EN\r\n");
        }
    }
}

fn meta_set(key: &[u8], key_token: &[u8], data: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    let kind = match f.mode.unwrap_or(b'S') {
        b'E' => StoreKind::Add,
        b'R' => StoreKind::Replace,
        b'A' => StoreKind::Append,
        b'P' => StoreKind::Prepend,
        _ => StoreKind::Set,
    };
    let flags = f.client_flags.unwrap_or(0);
    let exptime = f.ttl.unwrap_or(0);
    let r = match (f.compare_cas, kind) {
        (Some(c), StoreKind::Set) => do_store(StoreKind::Cas, key, flags, exptime, data, c, ctx),
        (Some(c), _) => match cache.get_with(key, |i| i.cas()) {
            None => Stored::NotFound,
            Some(x) if x != c => Stored::Exists,
            Some(_) => do_store(kind, key, flags, exptime, data, 0, ctx),
        },
        (None, StoreKind::Append | StoreKind::Prepend) => {
            let r = do_store(kind, key, flags, exptime, data, 0, ctx);
            match (r, f.vivify) {
                (Stored::NotStored, Some(n)) => do_store(StoreKind::Add, key, flags, n, data, 0, ctx),
                _ => r,
            }
        }
        (None, _) => do_store(kind, key, flags, exptime, data, 0, ctx),
    };
    match r {
        Stored::Stored => {
            if !f.quiet {
                let info = cache.get_with(key, |i| Info::of(&i));
                put_code(out, b"HD", f, key_token, info.as_ref());
            }
        }
        Stored::NotStored => put_code(out, b"NS", f, key_token, None),
        Stored::Exists => put_code(out, b"EX", f, key_token, None),
        Stored::NotFound => put_code(out, b"NF", f, key_token, None),
        Stored::TooLarge => out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n"),
        Stored::NoMemory => out.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n"),
        Stored::Failed => out.extend_from_slice(b"SERVER_ERROR storage failed\r\n"),
    }
}

fn meta_delete(key: &[u8], key_token: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    let current = cache.get_with(key, |i| (i.cas(), i.flags(), i.ttl()));
    let code: &[u8] = match (current, f.compare_cas) {
        (None, _) => b"NF",
        (Some((cas, _, _)), Some(c)) if cas != c => b"EX",
        (Some((_, flags, ttl)), _) if f.remove_value => {
            // A TTL of zero means "never" to the engine: keep at least one second left.
            let ttl = ttl.map_or(std::time::Duration::ZERO, |d| d.max(std::time::Duration::from_secs(1)));
            match cache.replace(key, b"", flags, ttl) {
                Ok(()) => b"HD",
                Err(_) => b"NF",
            }
        }
        (Some(_), _) => match cache.delete(key) {
            Ok(()) => b"HD",
            Err(_) => b"NF",
        },
    };
    let hit = code == b"HD";
    if code != b"EX" {
        bump(if hit { &ctx.stats.delete_hits } else { &ctx.stats.delete_misses }, 1);
    }
    if f.quiet && code != b"EX" {
        return;
    }
    put_code(out, code, f, key_token, None);
}

fn meta_arith(key: &[u8], key_token: &[u8], f: &MetaFlags<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let cache = &ctx.shared.cache;
    let incr = !matches!(f.mode, Some(b'D' | b'-'));
    let delta = f.delta.unwrap_or(1);
    if let Some(c) = f.compare_cas {
        match cache.get_with(key, |i| i.cas()) {
            None => return put_quiet_code(out, b"NF", f, key_token),
            Some(x) if x != c => return put_code(out, b"EX", f, key_token, None),
            Some(_) => {}
        }
    }
    let mut r = do_arith(incr, key, delta, ctx);
    if r == Arith::NotFound {
        if let Some(n) = f.vivify {
            if let Some(ttl) = Expiry::from_exptime(n, cache.now()).ttl() {
                let initial = f.initial.unwrap_or(0);
                let mut digits = itoa::Buffer::new();
                r = match cache.add(key, digits.format(initial).as_bytes(), 0, ttl) {
                    Ok(()) => Arith::Value(initial),
                    // Someone created it meanwhile: apply the delta to theirs.
                    Err(_) => do_arith(incr, key, delta, ctx),
                };
            }
        }
    }
    match r {
        Arith::Value(n) => {
            if let Some(t) = f.ttl {
                touch(key, t, ctx);
            }
            if f.quiet && !f.value {
                return;
            }
            let info = cache.get_with(key, |i| Info::of(&i));
            let mut digits = itoa::Buffer::new();
            let digits = digits.format(n).as_bytes();
            if f.value {
                out.extend_from_slice(b"VA ");
                put_u64(out, digits.len() as u64);
            } else {
                out.extend_from_slice(b"HD");
            }
            put_ret_flags(out, f, key_token, info.as_ref());
            out.extend_from_slice(b"\r\n");
            if f.value {
                out.extend_from_slice(digits);
                out.extend_from_slice(b"\r\n");
            }
        }
        Arith::NotFound => put_quiet_code(out, b"NF", f, key_token),
        Arith::NotNumeric => out.extend_from_slice(b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"),
        Arith::Failed => out.extend_from_slice(b"SERVER_ERROR out of memory\r\n"),
    }
}

/// A code that `q` suppresses.
fn put_quiet_code(out: &mut Vec<u8>, code: &[u8], f: &MetaFlags<'_>, key_token: &[u8]) {
    if !f.quiet {
        put_code(out, code, f, key_token, None);
    }
}

fn meta_debug(key: &[u8], key_token: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>) {
    let found = ctx.shared.cache.get_with(key, |item| {
        let info = Info::of(&item);
        out.extend_from_slice(b"ME ");
        out.extend_from_slice(key_token);
        out.extend_from_slice(b" exp=");
        put_i64(out, info.ttl);
        out.extend_from_slice(b" cas=");
        put_u64(out, info.cas);
        out.extend_from_slice(b" flags=");
        put_u64(out, u64::from(info.flags));
        out.extend_from_slice(b" size=");
        put_u64(out, info.size as u64);
        out.extend_from_slice(b"\r\n");
    });
    if found.is_none() {
        out.extend_from_slice(b"EN\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_validate() {
        let f = parse_meta_flags(MetaCmd::Get, b" v c  Oabc T30 N-1 q").unwrap();
        assert!(f.value && f.quiet && !f.base64);
        assert_eq!((f.opaque, f.ttl, f.vivify), (Some(&b"abc"[..]), Some(30), Some(-1)));
        assert_eq!(parse_meta_flags(MetaCmd::Get, b"z").unwrap_err(), FailKind::InvalidFlag);
        assert_eq!(parse_meta_flags(MetaCmd::Get, b"h").unwrap_err(), FailKind::UnsupportedFlag);
        assert_eq!(parse_meta_flags(MetaCmd::Get, b"Tx").unwrap_err(), FailKind::BadToken);
        assert_eq!(parse_meta_flags(MetaCmd::Get, b"vv").unwrap_err(), FailKind::InvalidFlag);
        assert_eq!(parse_meta_flags(MetaCmd::Set, b"MX").unwrap_err(), FailKind::InvalidMode);
        assert_eq!(parse_meta_flags(MetaCmd::Set, b"Ma").unwrap().mode, Some(b'A'));
        assert_eq!(parse_meta_flags(MetaCmd::Arith, b"M- D5 J7").unwrap().mode, Some(b'-'));
        assert_eq!(parse_meta_flags(MetaCmd::Arith, b"MA").unwrap_err(), FailKind::InvalidMode);
        assert_eq!(parse_meta_flags(MetaCmd::Set, b"F4294967296").unwrap_err(), FailKind::BadToken);
        let long = format!("O{}", "x".repeat(33));
        assert_eq!(parse_meta_flags(MetaCmd::Get, long.as_bytes()).unwrap_err(), FailKind::BadToken);
    }

    #[test]
    fn base64_keys() {
        let mut buf = [0u8; 256];
        assert_eq!(decode_key(b"Zm9v", true, &mut buf).unwrap(), b"foo");
        let mut buf = [0u8; 256];
        assert!(decode_key(b"!!!", true, &mut buf).is_err());
        let mut buf = [0u8; 256];
        assert_eq!(decode_key(b"plain", false, &mut buf).unwrap(), b"plain");
    }
}
