//! Meta-command parsing (`mg`, `ms`, `md`, `ma`, `me`, `mn`): the key (a base64 one decoded)
//! and the flags, their values and their order, with memcached 1.6's checks and error words.

use base64::Engine as _;
use segcache_core::MAX_KEY_LEN;

use super::reply::FailKind;
use super::token::{next_token, parse_client_flags, parse_exptime, parse_u64};

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

/// A meta command's key: the token as sent (what the `k` flag echoes) and the key it names.
#[derive(Clone)]
pub struct MetaKey<'a> {
    sent: &'a [u8],
    decoded: Decoded,
}

#[derive(Clone)]
enum Decoded {
    /// The key is the token.
    Plain,
    /// A base64 token, decoded (the one request form the parser allocates for: a plain key
    /// borrows the client's bytes, and keeping room for a decoded one in every request would
    /// make each as large as a key).
    Base64(Box<[u8]>),
    /// A base64 token that names no key: the reply.
    Bad(FailKind),
}

impl<'a> MetaKey<'a> {
    /// A key used as sent.
    pub fn plain(sent: &'a [u8]) -> MetaKey<'a> {
        MetaKey { sent, decoded: Decoded::Plain }
    }

    /// A key sent in base64 (`b`), decoded now; a failure is kept for `cmd`'s reply, which
    /// memcached sends only once the request (an `ms` with its data) has been read whole.
    pub fn base64(cmd: MetaCmd, sent: &'a [u8]) -> MetaKey<'a> {
        // memcached's words: `md` and `ma` lump every flag problem together.
        let bad = match cmd {
            MetaCmd::Delete | MetaCmd::Arith => FailKind::Msg(b"CLIENT_ERROR invalid or duplicate flag\r\n"),
            _ => FailKind::Msg(b"CLIENT_ERROR error decoding key\r\n"),
        };
        let mut buf = [0u8; 256];
        let decoded = match base64::engine::general_purpose::STANDARD.decode_slice(sent, &mut buf[..]) {
            Ok(n) if n == 0 || n > MAX_KEY_LEN => Decoded::Bad(FailKind::KeyTooLong),
            Ok(n) => Decoded::Base64(buf[..n].into()),
            Err(_) => Decoded::Bad(bad),
        };
        MetaKey { sent, decoded }
    }

    /// The token as sent.
    pub fn sent(&self) -> &'a [u8] {
        self.sent
    }

    /// The key the request names, or the reply for a token that names none.
    pub fn key(&self) -> Result<&[u8], FailKind> {
        match &self.decoded {
            Decoded::Plain => Ok(self.sent),
            Decoded::Base64(key) => Ok(key),
            Decoded::Bad(kind) => Err(*kind),
        }
    }
}

impl std::fmt::Debug for MetaKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaKey").field("sent", &self.sent).field("key", &self.key()).finish()
    }
}

/// The flag letters of a request in the order sent: memcached echoes return flags in that
/// order, and applies `T` and `N` where it meets them among the others. (A letter appears at
/// most once: a duplicate is refused.)
#[derive(Debug, Default, Clone, Copy)]
pub struct FlagOrder {
    letters: [u8; KNOWN_FLAGS.len()],
    len: u8,
}

impl FlagOrder {
    fn push(&mut self, c: u8) {
        self.letters[usize::from(self.len)] = c;
        self.len += 1;
    }

    /// The letters, in the order sent.
    pub fn letters(&self) -> &[u8] {
        &self.letters[..usize::from(self.len)]
    }

    /// Whether the request gave the flag `c`.
    pub fn has(&self, c: u8) -> bool {
        self.letters().contains(&c)
    }

    /// Whether `first` was given, and before `second` if that was given too.
    pub fn before(&self, first: u8, second: u8) -> bool {
        self.letters().iter().find(|&&c| c == first || c == second) == Some(&first)
    }
}

/// A meta command's flags: each one's value, and (`order`) the order they came in.
#[derive(Debug, Default, Clone, Copy)]
pub struct MetaFlags<'a> {
    pub order: FlagOrder,
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
    /// `E`: the CAS value the item takes (ms, md, ma; mg with `N`).
    pub explicit_cas: Option<u64>,
    /// `I`: invalidate (md: mark stale; ms with `C`: store a lost recache as stale).
    pub invalidate: bool,
    /// `R`: win the recache token when the TTL left is below this (mg).
    pub recache: Option<i64>,
    /// `u`: leave the item's fetched bit and access time alone (mg).
    pub no_update: bool,
}

impl MetaFlags<'_> {
    /// The TTL token that wins among `T` and (when `created`: `N` sets the TTL only of an item
    /// the request creates) `N`: the later one, as memcached applies them in order.
    pub fn last_ttl(&self, created: bool) -> Option<i64> {
        self.order.letters().iter().rev().find_map(|&c| match c {
            b'T' => Some(self.ttl),
            b'N' if created => Some(self.vivify),
            _ => None,
        })?
    }

    /// Whether a flag after position `i` changes the TTL (`T`, or `N` when `created`).
    pub fn ttl_changes_after(&self, i: usize, created: bool) -> bool {
        self.order.letters()[i + 1..].iter().any(|&c| c == b'T' || (c == b'N' && created))
    }
}

/// Every flag letter memcached 1.6 knows (it accepts each on every meta command, and ignores
/// those that mean nothing to that command). `x` (md: keep the item, drop its value) and `E`
/// (the client sets the CAS value) are from later memcached versions; `P` and `L` are proxy
/// hints, accepted and ignored.
const KNOWN_FLAGS: &[u8] = b"bNTRlOPLkstcfvhuqFCMJDIxE";

/// memcached's longest opaque token, counting its `O`.
const MAX_OPAQUE_TOKEN: usize = 32;

/// Parses the flags of `cmd` from the rest of its line, with memcached's checks and words:
/// `mg`/`ms` name the problem, `md`/`ma` answer `invalid or duplicate flag` for any of them.
pub fn parse_meta_flags(cmd: MetaCmd, raw: &[u8]) -> Result<MetaFlags<'_>, FailKind> {
    let lumped = matches!(cmd, MetaCmd::Delete | MetaCmd::Arith);
    let err = |line: &'static [u8]| {
        if lumped {
            FailKind::Msg(b"CLIENT_ERROR invalid or duplicate flag\r\n")
        } else {
            FailKind::Msg(line)
        }
    };
    let mut f = MetaFlags::default();
    let mut seen = [false; 128];
    // memcached reads every flag before it reports a bad number; the last message set wins.
    let mut bad_number: Option<&'static [u8]> = None;
    let mut rest = raw;
    while let Some(tok) = next_token(&mut rest) {
        let (c, val) = (tok[0], &tok[1..]);
        if c >= 128 || seen[usize::from(c)] {
            return Err(err(b"CLIENT_ERROR duplicate flag\r\n"));
        }
        seen[usize::from(c)] = true;
        if !KNOWN_FLAGS.contains(&c) || (c == b'x' && cmd != MetaCmd::Delete) {
            return Err(err(b"CLIENT_ERROR invalid flag\r\n"));
        }
        f.order.push(c);
        const BAD_TOKEN: &[u8] = b"CLIENT_ERROR bad token in command line format\r\n";
        match c {
            b'O' => {
                if tok.len() > MAX_OPAQUE_TOKEN {
                    return Err(err(b"CLIENT_ERROR opaque token too long\r\n"));
                }
                f.opaque = Some(val);
            }
            b'T' => match parse_exptime(val) {
                Some(t) => f.ttl = Some(t),
                None => bad_number = Some(BAD_TOKEN),
            },
            b'N' => match parse_exptime(val) {
                Some(t) => f.vivify = Some(t),
                None => bad_number = Some(BAD_TOKEN),
            },
            b'R' => match parse_exptime(val) {
                Some(t) => f.recache = Some(t),
                None => bad_number = Some(BAD_TOKEN),
            },
            b'E' => match parse_u64(val) {
                Some(c) => f.explicit_cas = Some(c),
                None => bad_number = Some(BAD_TOKEN),
            },
            b'I' => f.invalidate = true,
            b'u' => f.no_update = true,
            b'C' => match parse_u64(val) {
                Some(c) => f.compare_cas = Some(c),
                None => bad_number = Some(BAD_TOKEN),
            },
            b'F' => match parse_client_flags(val) {
                Some(n) => f.client_flags = Some(n),
                // memcached sets no message of its own for a bad F.
                None => {
                    bad_number.get_or_insert(b"CLIENT_ERROR bad command line format\r\n");
                }
            },
            b'D' => match parse_u64(val) {
                Some(n) => f.delta = Some(n),
                None => bad_number = Some(b"CLIENT_ERROR invalid numeric delta value\r\n"),
            },
            b'J' => match parse_u64(val) {
                Some(n) => f.initial = Some(n),
                None => bad_number = Some(b"CLIENT_ERROR invalid numeric initial value\r\n"),
            },
            b'M' => match val {
                [m] => f.mode = Some(*m),
                _ => bad_number = Some(b"CLIENT_ERROR incorrect length for M token\r\n"),
            },
            // The other flags take no token; memcached ignores anything after their letter.
            b'b' => f.base64 = true,
            b'q' => f.quiet = true,
            b'v' => f.value = true,
            b'x' => f.remove_value = true,
            _ => {} // return flags (c f h k l s t) are read from `raw`; P L have no effect
        }
    }
    if let Some(line) = bad_number {
        return Err(err(line));
    }
    // Only `ms` and `ma` read the mode; memcached checks it after the flags.
    match (cmd, f.mode) {
        (MetaCmd::Set, Some(m)) if !b"EAPRS".contains(&m) => {
            return Err(FailKind::Msg(b"CLIENT_ERROR invalid mode for ms M token\r\n"))
        }
        (MetaCmd::Arith, Some(m)) if !b"I+D-".contains(&m) => {
            return Err(FailKind::Msg(b"CLIENT_ERROR invalid mode for ma M token\r\n"))
        }
        _ => {}
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_keys_are_decoded_once_parsed() {
        let k = MetaKey::base64(MetaCmd::Get, b"Zm9v");
        assert_eq!((k.sent(), k.key()), (&b"Zm9v"[..], Ok(&b"foo"[..])));
        let decoding = FailKind::Msg(b"CLIENT_ERROR error decoding key\r\n");
        assert_eq!(MetaKey::base64(MetaCmd::Get, b"!!!").key(), Err(decoding));
        let lumped = FailKind::Msg(b"CLIENT_ERROR invalid or duplicate flag\r\n");
        assert_eq!(MetaKey::base64(MetaCmd::Arith, b"!!!").key(), Err(lumped));
        assert_eq!(MetaKey::base64(MetaCmd::Get, b"").key(), Err(FailKind::KeyTooLong));
        // 251 bytes decoded: one past the longest key.
        let long = base64::engine::general_purpose::STANDARD.encode([7u8; 251]);
        assert_eq!(MetaKey::base64(MetaCmd::Set, long.as_bytes()).key(), Err(FailKind::KeyTooLong));
        let longest = base64::engine::general_purpose::STANDARD.encode([7u8; 250]);
        assert_eq!(MetaKey::base64(MetaCmd::Set, longest.as_bytes()).key(), Ok(&[7u8; 250][..]));
        assert_eq!(MetaKey::plain(b"plain").key(), Ok(&b"plain"[..]));
    }

    #[test]
    fn flag_order_is_recorded() {
        let f = parse_meta_flags(MetaCmd::Get, b"t Oab T30 k N5 R10").unwrap();
        assert_eq!(f.order.letters(), b"tOTkNR");
        assert!(f.order.has(b'k') && !f.order.has(b'v'));
        assert!(f.order.before(b't', b'T') && !f.order.before(b'R', b'T') && f.order.before(b'T', b'R'));
        // Without `second`, `first` given is enough; without `first`, never.
        assert!(f.order.before(b'k', b'v') && !f.order.before(b'v', b'k'));
        // The later of T and (for an item the request creates) N.
        assert_eq!((f.last_ttl(true), f.last_ttl(false)), (Some(5), Some(30)));
        assert!(f.ttl_changes_after(0, false) && !f.ttl_changes_after(2, false) && f.ttl_changes_after(2, true));
        let none = parse_meta_flags(MetaCmd::Get, b"v").unwrap();
        assert_eq!(none.last_ttl(true), None);
        // Every known flag at once fits.
        let all: Vec<u8> = KNOWN_FLAGS
            .iter()
            .filter(|&&c| c != b'x')
            .flat_map(|&c| [c, if b"TNRECFDJ".contains(&c) { b'1' } else { b'a' }, b' '])
            .collect();
        assert_eq!(parse_meta_flags(MetaCmd::Get, &all).unwrap().order.letters().len(), KNOWN_FLAGS.len() - 1);
    }

    #[test]
    fn flags_parse_and_validate() {
        let f = parse_meta_flags(MetaCmd::Get, b" v c  Oabc T30 N-1 q").unwrap();
        assert!(f.value && f.quiet && !f.base64);
        assert_eq!((f.opaque, f.ttl, f.vivify), (Some(&b"abc"[..]), Some(30), Some(-1)));
        let invalid = FailKind::Msg(b"CLIENT_ERROR invalid flag\r\n");
        let lumped = FailKind::Msg(b"CLIENT_ERROR invalid or duplicate flag\r\n");
        let bad_token = FailKind::Msg(b"CLIENT_ERROR bad token in command line format\r\n");
        assert_eq!(parse_meta_flags(MetaCmd::Get, b"z").unwrap_err(), invalid);
        assert_eq!(parse_meta_flags(MetaCmd::Delete, b"z").unwrap_err(), lumped);
        let f = parse_meta_flags(MetaCmd::Get, b"h l R30 u E9 I").unwrap();
        assert_eq!((f.recache, f.no_update, f.explicit_cas, f.invalidate), (Some(30), true, Some(9), true));
        assert_eq!(parse_meta_flags(MetaCmd::Set, b"Ex").unwrap_err(), bad_token);
        assert_eq!(parse_meta_flags(MetaCmd::Delete, b"Rx").unwrap_err(), lumped);
        assert_eq!(parse_meta_flags(MetaCmd::Get, b"Tx").unwrap_err(), bad_token);
        assert_eq!(
            parse_meta_flags(MetaCmd::Get, b"v v").unwrap_err(),
            FailKind::Msg(b"CLIENT_ERROR duplicate flag\r\n")
        );
        assert_eq!(parse_meta_flags(MetaCmd::Arith, b"q q").unwrap_err(), lumped);
        // Known flags that mean nothing to the command are accepted, as memcached does.
        assert!(parse_meta_flags(MetaCmd::Get, b"F5 C3 M1").is_ok());
        assert_eq!(
            parse_meta_flags(MetaCmd::Set, b"MX").unwrap_err(),
            FailKind::Msg(b"CLIENT_ERROR invalid mode for ms M token\r\n")
        );
        assert!(parse_meta_flags(MetaCmd::Set, b"Ma").is_err());
        assert_eq!(parse_meta_flags(MetaCmd::Set, b"MA").unwrap().mode, Some(b'A'));
        assert_eq!(parse_meta_flags(MetaCmd::Arith, b"M- D5 J7").unwrap().mode, Some(b'-'));
        assert!(parse_meta_flags(MetaCmd::Arith, b"MA").is_err());
        assert_eq!(
            parse_meta_flags(MetaCmd::Set, b"F18446744073709551616").unwrap_err(),
            FailKind::Msg(b"CLIENT_ERROR bad command line format\r\n")
        );
        // As memcached: flags are read into 64 bits and kept modulo 2^32.
        assert_eq!(parse_meta_flags(MetaCmd::Set, b"F4294967297").unwrap().client_flags, Some(1));
        let ok = format!("O{}", "x".repeat(31));
        assert!(parse_meta_flags(MetaCmd::Get, ok.as_bytes()).is_ok());
        let long = format!("O{}", "x".repeat(32));
        assert_eq!(
            parse_meta_flags(MetaCmd::Get, long.as_bytes()).unwrap_err(),
            FailKind::Msg(b"CLIENT_ERROR opaque token too long\r\n")
        );
    }
}
