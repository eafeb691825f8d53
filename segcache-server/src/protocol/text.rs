//! The request parser: turns the bytes a client sent into one [`Request`] that borrows them.
//!
//! It never allocates and never copies: keys, values and flag tokens are slices of the input
//! buffer. A request is either complete ([`Parse::Done`] with the bytes it used), needs more
//! bytes ([`Parse::Incomplete`]), or is rejected ([`Parse::Fail`]) with the reply to send and the
//! number of bytes to drop so that the stream stays in sync (a rejected storage command's data
//! block is dropped too, even the part not received yet).

use memchr::memchr;
use segcache_core::MAX_KEY_LEN;

use super::meta::{parse_meta_flags, MetaCmd, MetaFlags, MetaKey};
use super::reply::FailKind;
use super::token::{
    next_token, parse_automove, parse_c_int, parse_client_flags, parse_exptime, parse_u32, parse_u64, Tokens,
};

/// The most of a command line that may be buffered without its newline once no more input is
/// waiting: as memcached, which closes a connection holding more than this with no `\n` unless
/// it is a retrieval line.
pub const MAX_LINE: usize = 2048;
/// The longest command line (with its newline) that is read whole: memcached's read buffer. A
/// longer line that arrived with its newline still within this many bytes is run, as memcached
/// runs any line whose newline its one read took in; past it the connection is closed.
pub const READ_BUFFER: usize = 16 * 1024;
/// Retrieval lines (`get`, `gets`, `gat`, `gats`) may carry any number of keys: one whose end is
/// within this many bytes is parsed whole; a longer one is run as it streams in (see [`get_head`]),
/// so that the input buffer never holds more of it than this.
pub const MAX_GET_LINE: usize = 256 * 1024;
/// The longest data block a request may declare (memcached's: its length plus the CRLF must
/// fit an `int`).
const MAX_DATA_LEN: i32 = i32::MAX - 2;
/// memcached's most tokens on a meta command line (the command, the key and the flags); a
/// longer line is refused before its flags are read.
const META_MAX_TOKENS: usize = 19;

/// The limits the parser enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest value, in bytes (`-I`).
    pub max_item_size: usize,
    /// Largest reply held for a retrieval line too long to parse whole, which is answered at
    /// its end (other multi-gets are streamed): such a line may name many keys (or one key many
    /// times); past this its reply is replaced by memcached's `SERVER_ERROR out of memory
    /// writing get response`, so one request cannot make the server buffer gigabytes.
    pub max_response: usize,
}

/// What memcached counts toward `-I` beside an item's key and value: its item header (48 bytes
/// on 64-bit), the CAS (8), the key's closing NUL (1) and the value's CRLF (2); client flags take
/// 4 more when non-zero (items.c `item_size_ok`). A value of exactly `-I` bytes never fits.
const ITEM_OVERHEAD: usize = 48 + 8 + 1 + 2;

impl Limits {
    /// Whether memcached would store an item of this key length, client flags and value length.
    pub fn item_fits(&self, key_len: usize, client_flags: u32, value_len: usize) -> bool {
        let flags_len = if client_flags != 0 { 4 } else { 0 };
        ITEM_OVERHEAD + key_len + flags_len + value_len <= self.max_item_size
    }
}

/// The default [`Limits::max_response`].
pub const MAX_RESPONSE: usize = 64 << 20;

/// The storage commands, which carry a data block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// One parsed request; every slice borrows the input buffer.
#[derive(Debug)]
pub enum Request<'a> {
    /// `get`/`gets` (with `cas`).
    Get {
        keys: Keys<'a>,
        cas: bool,
    },
    /// `gat`/`gats`: get and set the expiry time.
    Gat {
        exptime: i64,
        keys: Keys<'a>,
        cas: bool,
    },
    /// `set`, `add`, `replace`, `append`, `prepend`, `cas`.
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        data: &'a [u8],
        cas: u64,
        noreply: bool,
    },
    /// `incr`/`decr`.
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        delay: i64,
        noreply: bool,
    },
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Version,
    Quit,
    /// `stats` with its optional argument (`settings`, `items`, `slabs`, `reset`).
    Stats {
        arg: Option<&'a [u8]>,
    },
    /// One of memcached's operator commands.
    Admin(Admin<'a>),
    /// A meta command (`mg`, `ms`, `md`, `ma`, `me`, `mn`).
    Meta {
        cmd: MetaCmd,
        key: MetaKey<'a>,
        data: &'a [u8],
        flags: MetaFlags<'a>,
    },
}

/// memcached's operator commands (parsed; what they do is the executor's business).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin<'a> {
    /// `stats cachedump <class> <limit>`: `ITEM` lines for up to `limit` keys (0: all).
    CacheDump { class: u32, limit: u32 },
    /// `stats detail on|off|dump`.
    Detail(Detail),
    /// `lru_crawler metadump|mgdump <classes>`; `classes` is as sent (`all`, `hash`, `1,2`).
    Dump { mg: bool, classes: &'a [u8] },
    /// `lru_crawler crawl <classes>`: reclaim expired items now.
    Crawl { classes: &'a [u8] },
    /// `lru_crawler tocrawl|sleep <n>`, `lru_crawler enable|disable`, `slabs automove <level>`:
    /// accepted, nothing to tune.
    CrawlerTune,
    /// `watch [stream...]`: the bit set of [`WATCH_STREAMS`] asked for.
    Watch { streams: u8 },
    /// `shutdown [graceful]`; `mode_ok` is false for any other argument.
    Shutdown { mode_ok: bool },
    /// `cache_memlimit <megabytes> [noreply]`.
    MemLimit { mb: u32, noreply: bool },
    /// `refresh_certs`: reload the TLS certificates (arguments ignored, as memcached).
    RefreshCerts,
}

/// `stats detail`'s argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    On,
    Off,
    Dump,
}

/// The log streams of `watch`, by name; a stream's bit is `1 << index`.
pub const WATCH_STREAMS: [&str; 4] = ["fetchers", "mutations", "evictions", "connevents"];

/// The keys of a retrieval command, validated, yielded in order.
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a> {
    rest: &'a [u8],
}

impl<'a> Keys<'a> {
    /// What is left of the line: the keys not yet taken, space-separated.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        next_token(&mut self.rest)
    }
}

/// A rejected request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fail<'a> {
    pub kind: FailKind,
    /// Bytes to drop, counted from the start of the request; may exceed what was received
    /// (the rest of a rejected data block is dropped as it arrives).
    pub skip: usize,
    /// The request asked for no reply (`noreply`): the error is not sent, as memcached does.
    pub noreply: bool,
    /// A `set` refused as too large: memcached removes the key's current value so that a stale
    /// one is not read back; so do we.
    pub unlink: Option<&'a [u8]>,
    /// `unlink` is base64 as sent (`ms` with `b`): decoded before removing.
    pub unlink_base64: bool,
}

/// The parser's verdict on the start of a buffer.
#[derive(Debug)]
pub enum Parse<'a> {
    /// A complete request that used this many bytes.
    Done(Request<'a>, usize),
    /// Not enough bytes yet.
    Incomplete,
    Fail(Fail<'a>),
}

fn fail<'a>(kind: FailKind, skip: usize, noreply: bool) -> Parse<'a> {
    Parse::Fail(Fail { kind, skip, noreply, unlink: None, unlink_base64: false })
}

/// Checks a key: 1 to 250 bytes. As memcached's, a key is any bytes but a space (which the
/// tokenizer splits on): control characters included.
#[inline]
pub fn check_key(key: &[u8]) -> Result<(), FailKind> {
    if key.is_empty() {
        return Err(FailKind::BadFormat);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(FailKind::KeyTooLong);
    }
    Ok(())
}

/// Whether the line starts like an HTTP request (`GET / HTTP/1.1`, ...). Memcache commands are
/// lower case, so an upper-case method followed by a space is never one.
fn looks_like_http(buf: &[u8]) -> bool {
    const METHODS: [&[u8]; 10] =
        [b"GET ", b"POST ", b"PUT ", b"HEAD ", b"DELETE ", b"OPTIONS ", b"PATCH ", b"CONNECT ", b"TRACE ", b"PRI "];
    METHODS.iter().any(|m| buf.starts_with(m))
}

/// Whether `buf` starts with a retrieval command (after at most 100 spaces, as memcached allows).
fn is_get_line(buf: &[u8]) -> bool {
    let spaces = buf.iter().take(101).take_while(|&&b| b == b' ').count();
    let buf = &buf[spaces..];
    spaces <= 100
        && (buf.starts_with(b"get ")
            || buf.starts_with(b"gets ")
            || buf.starts_with(b"gat ")
            || buf.starts_with(b"gats "))
}

/// The longest line allowed for the command that `buf` starts with, without its newline.
fn line_limit(buf: &[u8]) -> usize {
    if is_get_line(buf) {
        MAX_GET_LINE
    } else {
        READ_BUFFER - 1
    }
}

/// Whether `buf`, all the input there is for now, is a command line that can no longer be
/// waited for: more than [`MAX_LINE`] bytes without a newline and not a retrieval line (those
/// stream). memcached closes such a connection as soon as a read leaves it so.
pub fn stalled_line(buf: &[u8]) -> bool {
    buf.len() > MAX_LINE && !is_get_line(buf) && memchr(b'\n', buf).is_none()
}

/// A data block's length token, read as memcached reads it into an `int` ([`parse_c_int`]), then
/// refused if negative or too long to take its CRLF.
/// `None` is a bad command line; the block that would follow is not swallowed.
fn parse_length(tok: &[u8]) -> Option<usize> {
    let n = parse_c_int(tok)?;
    (0..=MAX_DATA_LEN).contains(&n).then_some(n as usize)
}

/// The start of a retrieval line too long to parse whole ([`parse`] said [`Parse::Incomplete`]
/// for more than [`MAX_GET_LINE`] bytes): the caller runs its keys as they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetHead {
    /// `gets`/`gats`.
    pub cas: bool,
    /// `gat`/`gats`: the exptime, or the error for a bad one (the line is then dropped).
    pub gat: Option<Result<i64, FailKind>>,
    /// Where the keys start, from the start of the line.
    pub keys_at: usize,
}

/// The command (and `gat`'s exptime) of a long retrieval line; `None` if `buf` does not start
/// with one followed by a space.
pub fn get_head(buf: &[u8]) -> Option<GetHead> {
    if !is_get_line(buf) {
        return None;
    }
    let mut rest = buf;
    let cmd = next_token(&mut rest)?;
    let cas = cmd == b"gets" || cmd == b"gats";
    let gat = if cmd == b"gat" || cmd == b"gats" {
        let t = next_token(&mut rest)?;
        if rest.is_empty() {
            return None; // the exptime may not be all in
        }
        Some(parse_exptime(t).ok_or(FailKind::BadExptime))
    } else {
        None
    };
    Some(GetHead { cas, gat, keys_at: buf.len() - rest.len() })
}

/// Parses the request at the start of `buf`.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parse<'a> {
    let limit = line_limit(buf);
    let window = &buf[..buf.len().min(limit + 1)];
    let Some(nl) = memchr(b'\n', window) else {
        if looks_like_http(buf) {
            return fail(FailKind::Http, buf.len(), false);
        }
        // A retrieval line may be longer: the caller streams it (`get_head`).
        if buf.len() > limit && limit < MAX_GET_LINE {
            return fail(FailKind::LineTooLong, buf.len(), false);
        }
        return Parse::Incomplete;
    };
    let line_end = if nl > 0 && buf[nl - 1] == b'\r' { nl - 1 } else { nl };
    // memcached reads the line as a C string: it ends at a NUL.
    let line = &buf[..memchr(0, &buf[..line_end]).unwrap_or(line_end)];
    let used = nl + 1;
    if looks_like_http(line) {
        return fail(FailKind::Http, used, false);
    }

    let mut rest = line;
    let Some(cmd) = next_token(&mut rest) else {
        return fail(FailKind::Unknown, used, false);
    };
    match cmd {
        b"get" | b"gets" => parse_get(rest, cmd == b"gets", used),
        b"gat" | b"gats" => parse_gat(rest, cmd == b"gats", used),
        b"set" => parse_store(buf, rest, StoreKind::Set, used, limits),
        b"add" => parse_store(buf, rest, StoreKind::Add, used, limits),
        b"replace" => parse_store(buf, rest, StoreKind::Replace, used, limits),
        b"append" => parse_store(buf, rest, StoreKind::Append, used, limits),
        b"prepend" => parse_store(buf, rest, StoreKind::Prepend, used, limits),
        b"cas" => parse_store(buf, rest, StoreKind::Cas, used, limits),
        b"mg" | b"ms" | b"md" | b"ma" | b"me" | b"mn" => parse_meta(buf, cmd, rest, used, limits),
        _ => {
            let Some(t) = Tokens::split(rest) else {
                return fail(FailKind::Unknown, used, false);
            };
            parse_simple(cmd, t.get(), used)
        }
    }
}

fn parse_get(rest: &[u8], cas: bool, used: usize) -> Parse<'_> {
    let mut keys = Keys { rest };
    let mut any = false;
    for key in keys {
        if let Err(kind) = check_key(key) {
            return fail(kind, used, false);
        }
        any = true;
    }
    if !any {
        return fail(FailKind::Unknown, used, false);
    }
    keys = Keys { rest };
    Parse::Done(Request::Get { keys, cas }, used)
}

fn parse_gat(mut rest: &[u8], cas: bool, used: usize) -> Parse<'_> {
    let Some(t) = next_token(&mut rest) else {
        return fail(FailKind::Unknown, used, false);
    };
    let Some(exptime) = parse_exptime(t) else {
        return fail(FailKind::BadExptime, used, false);
    };
    // memcached answers `gat <exptime>` without keys with a bare END.
    let mut probe = rest;
    if next_token(&mut probe).is_none() {
        return Parse::Done(Request::Gat { exptime, keys: Keys { rest }, cas }, used);
    }
    match parse_get(rest, cas, used) {
        Parse::Done(Request::Get { keys, cas }, used) => Parse::Done(Request::Gat { exptime, keys, cas }, used),
        other => other,
    }
}

fn parse_store<'a>(buf: &'a [u8], rest: &'a [u8], kind: StoreKind, used: usize, limits: &Limits) -> Parse<'a> {
    // More tokens than memcached splits a line into: the wrong number of arguments.
    let Some(t) = Tokens::split(rest) else {
        return fail(FailKind::Unknown, used, false);
    };
    let t = t.get();
    let base = if kind == StoreKind::Cas { 5 } else { 4 };
    // As memcached: one more token is allowed and means `noreply` only when it says so (any
    // other word there is ignored); fewer or more tokens are an unknown command.
    if t.len() != base && t.len() != base + 1 {
        return fail(FailKind::Unknown, used, false);
    }
    let noreply = t.len() == base + 1 && t[base] == b"noreply";
    let (key, flags, exptime, bytes) = (t[0], parse_client_flags(t[1]), parse_exptime(t[2]), parse_length(t[3]));
    let cas = if kind == StoreKind::Cas { parse_u64(t[4]) } else { Some(0) };
    let (Some(flags), Some(exptime), Some(bytes), Some(cas)) = (flags, exptime, bytes, cas) else {
        return fail(FailKind::BadFormat, used, noreply);
    };
    // From here on the length is known: a rejected request drops its data block too.
    let whole = used + bytes + 2;
    if let Err(kind) = check_key(key) {
        return fail(kind, whole, noreply);
    }
    if !limits.item_fits(key.len(), flags, bytes) {
        let unlink = (kind == StoreKind::Set).then_some(key);
        return Parse::Fail(Fail { kind: FailKind::TooLarge, skip: whole, noreply, unlink, unlink_base64: false });
    }
    if buf.len() < whole {
        return Parse::Incomplete;
    }
    if &buf[used + bytes..whole] != b"\r\n" {
        return fail(FailKind::BadDataChunk, whole, noreply);
    }
    let data = &buf[used..used + bytes];
    Parse::Done(Request::Store { kind, key, flags, exptime, data, cas, noreply }, whole)
}

/// memcached's answer to `stats detail` with a bad argument.
const DETAIL_USAGE: &[u8] = b"CLIENT_ERROR usage: stats detail on|off|dump\r\n";

fn parse_simple<'a>(cmd: &[u8], t: &[&'a [u8]], used: usize) -> Parse<'a> {
    // memcached looks for `noreply` in the last token only, and ignores any other word there.
    let noreply = t.last() == Some(&&b"noreply"[..]);
    let req = match cmd {
        b"incr" | b"decr" => {
            if !(t.len() == 2 || t.len() == 3) {
                return fail(FailKind::Unknown, used, false);
            }
            if let Err(kind) = check_key(t[0]) {
                return fail(kind, used, noreply);
            }
            let Some(delta) = parse_u64(t[1]) else {
                return fail(FailKind::BadDelta, used, noreply);
            };
            Request::Arith { incr: cmd == b"incr", key: t[0], delta, noreply }
        }
        b"delete" => {
            // memcached accepts a legacy `0` time argument.
            let ok = match t.len() {
                1 => true,
                2 => noreply || t[1] == b"0",
                3 => noreply && t[1] == b"0",
                _ => false,
            };
            if t.is_empty() || t.len() > 3 {
                return fail(FailKind::Unknown, used, false);
            }
            if !ok {
                return fail(FailKind::DeleteUsage, used, noreply);
            }
            if let Err(kind) = check_key(t[0]) {
                return fail(kind, used, noreply);
            }
            Request::Delete { key: t[0], noreply }
        }
        b"touch" => {
            if !(t.len() == 2 || t.len() == 3) {
                return fail(FailKind::Unknown, used, false);
            }
            if let Err(kind) = check_key(t[0]) {
                return fail(kind, used, noreply);
            }
            let Some(exptime) = parse_exptime(t[1]) else {
                return fail(FailKind::BadExptime, used, noreply);
            };
            Request::Touch { key: t[0], exptime, noreply }
        }
        b"flush_all" => {
            // As memcached: at most two arguments; unless the only one is `noreply`, the first
            // is the delay (a negative one flushes now) and a second one is otherwise ignored.
            if t.len() > 2 {
                return fail(FailKind::Unknown, used, false);
            }
            let delay = match t {
                [] => 0,
                [_] if noreply => 0,
                [d, ..] => match parse_exptime(d) {
                    Some(d) => d.max(0),
                    None => return fail(FailKind::BadExptime, used, noreply),
                },
            };
            Request::FlushAll { delay, noreply }
        }
        b"verbosity" => {
            // memcached 1.6 answers `verbosity noreply` with nothing at all.
            if t.len() == 1 && noreply {
                return fail(FailKind::BadFormat, used, true);
            }
            if !(t.len() == 1 || t.len() == 2) {
                return fail(FailKind::Unknown, used, false);
            }
            // memcached takes any unsigned long (and caps the level).
            let Some(level) = parse_u64(t[0]) else {
                return fail(FailKind::BadFormat, used, noreply);
            };
            Request::Verbosity { level: level.min(u64::from(u32::MAX)) as u32, noreply }
        }
        // memcached 1.6 ignores arguments to these two.
        b"version" => Request::Version,
        b"quit" => Request::Quit,
        b"stats" => match t {
            [] => Request::Stats { arg: None },
            [a] => Request::Stats { arg: Some(a) },
            [b"cachedump", c, l, ..] => match (parse_u32(c), parse_u32(l)) {
                (Some(class), Some(limit)) => Request::Admin(Admin::CacheDump { class, limit }),
                _ => return fail(FailKind::BadFormat, used, false),
            },
            [b"detail", d, ..] => match *d {
                b"on" => Request::Admin(Admin::Detail(Detail::On)),
                b"off" => Request::Admin(Admin::Detail(Detail::Off)),
                b"dump" => Request::Admin(Admin::Detail(Detail::Dump)),
                _ => return fail(FailKind::Msg(DETAIL_USAGE), used, false),
            },
            // memcached ignores what follows a `stats` argument it knows.
            [a, ..] => Request::Stats { arg: Some(a) },
        },
        // One slab class, nothing to move: memcached's answers to its automove settings.
        b"slabs" => match t {
            [b"automove", args @ ..] => match parse_automove(args) {
                Some(true) => Request::Admin(Admin::CrawlerTune),
                Some(false) => return fail(FailKind::Unknown, used, false),
                None => return fail(FailKind::BadFormat, used, false),
            },
            _ => return fail(FailKind::Unknown, used, false),
        },
        b"lru_crawler" => match t {
            [b"metadump", c] => Request::Admin(Admin::Dump { mg: false, classes: c }),
            [b"mgdump", c] => Request::Admin(Admin::Dump { mg: true, classes: c }),
            [b"crawl", c] => Request::Admin(Admin::Crawl { classes: c }),
            // The crawler's knobs: segcache expires whole segments and has no crawler to tune.
            [b"tocrawl" | b"sleep", n] if parse_u32(n).is_some() => Request::Admin(Admin::CrawlerTune),
            [b"enable" | b"disable"] => Request::Admin(Admin::CrawlerTune),
            _ => return fail(FailKind::Unknown, used, false),
        },
        b"watch" => {
            let mut streams = 0u8;
            for name in t {
                match WATCH_STREAMS.iter().position(|s| s.as_bytes() == *name) {
                    Some(i) => streams |= 1 << i,
                    None => return fail(FailKind::Unknown, used, false),
                }
            }
            // As memcached: `watch` alone watches the fetchers.
            Request::Admin(Admin::Watch { streams: if t.is_empty() { 1 } else { streams } })
        }
        b"shutdown" => Request::Admin(Admin::Shutdown { mode_ok: matches!(t, [] | [b"graceful"]) }),
        b"refresh_certs" => Request::Admin(Admin::RefreshCerts),
        b"cache_memlimit" => {
            if !(t.len() == 1 || t.len() == 2) {
                return fail(FailKind::Unknown, used, false);
            }
            // memcached reads the number into 32 bits: a larger one wraps.
            match parse_u64(t[0]) {
                Some(mb) => Request::Admin(Admin::MemLimit { mb: mb as u32, noreply }),
                None => return fail(FailKind::Unknown, used, noreply),
            }
        }
        _ => return fail(FailKind::Unknown, used, false),
    };
    Parse::Done(req, used)
}

fn parse_meta<'a>(buf: &'a [u8], cmd: &[u8], mut rest: &'a [u8], used: usize, limits: &Limits) -> Parse<'a> {
    let cmd = match cmd {
        b"mg" => MetaCmd::Get,
        b"ms" => MetaCmd::Set,
        b"md" => MetaCmd::Delete,
        b"ma" => MetaCmd::Arith,
        b"me" => MetaCmd::Debug,
        _ => {
            return Parse::Done(
                Request::Meta { cmd: MetaCmd::Noop, key: MetaKey::plain(&[]), data: &[], flags: MetaFlags::default() },
                used,
            )
        }
    };
    let Some(key) = next_token(&mut rest) else {
        // memcached: `me` alone is a bad command line, the others an unknown command.
        let kind = if cmd == MetaCmd::Debug { FailKind::BadFormat } else { FailKind::Unknown };
        return fail(kind, used, false);
    };
    if cmd != MetaCmd::Debug {
        // memcached's checks before it reads a flag (or `ms` its data length, so nothing is
        // swallowed): the key as sent, then the number of tokens.
        if key.len() > MAX_KEY_LEN {
            return fail(FailKind::BadFormat, used, false);
        }
        let mut probe = rest;
        let mut tokens = 2;
        while tokens < META_MAX_TOKENS + 1 && next_token(&mut probe).is_some() {
            tokens += 1;
        }
        if tokens > META_MAX_TOKENS {
            let line: &'static [u8] = match cmd {
                MetaCmd::Get => b"CLIENT_ERROR options flags are too long\r\n",
                _ => b"CLIENT_ERROR options flags too long\r\n",
            };
            return fail(FailKind::Msg(line), used, false);
        }
    }
    // `ms` has the data length before the flags; the rest of a bad `ms` is dropped with it.
    let mut whole = used;
    let mut datalen = 0usize;
    if cmd == MetaCmd::Set {
        match next_token(&mut rest).and_then(parse_length) {
            Some(n) => datalen = n,
            None => return fail(FailKind::BadFormat, used, false),
        }
        whole = used + datalen + 2;
    }
    let flags = match parse_meta_flags(cmd, rest) {
        Ok(f) => f,
        Err(kind) => return fail(kind, whole, false),
    };
    let key_check = if flags.base64 {
        // Validated when decoded; here only the encoded length is bounded.
        if key.len() > MAX_KEY_LEN.div_ceil(3) * 4 {
            Err(FailKind::KeyTooLong)
        } else {
            Ok(())
        }
    } else {
        check_key(key)
    };
    if let Err(kind) = key_check {
        return fail(kind, whole, false);
    }
    let mut data: &[u8] = &[];
    if cmd == MetaCmd::Set {
        if !limits.item_fits(key.len(), flags.client_flags.unwrap_or(0), datalen) {
            // As memcached (and text `set`): a failed `ms` must not leave the old value
            // readable.
            return Parse::Fail(Fail {
                kind: FailKind::TooLarge,
                skip: whole,
                noreply: false,
                unlink: Some(key),
                unlink_base64: flags.base64,
            });
        }
        if buf.len() < whole {
            return Parse::Incomplete;
        }
        if &buf[used + datalen..whole] != b"\r\n" {
            return fail(FailKind::BadDataChunk, whole, false);
        }
        data = &buf[used..used + datalen];
    }
    let key = if flags.base64 { MetaKey::base64(cmd, key) } else { MetaKey::plain(key) };
    Parse::Done(Request::Meta { cmd, key, data, flags }, whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits { max_item_size: 1024, max_response: MAX_RESPONSE };

    fn done(buf: &[u8]) -> (Request<'_>, usize) {
        match parse(buf, &L) {
            Parse::Done(r, n) => (r, n),
            other => panic!("expected a request from {:?}, got {other:?}", String::from_utf8_lossy(buf)),
        }
    }
    fn failed(buf: &[u8]) -> Fail<'_> {
        match parse(buf, &L) {
            Parse::Fail(f) => f,
            other => panic!("expected a failure from {:?}, got {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    #[test]
    fn get_with_many_keys_and_either_line_ending() {
        let (r, n) = done(b"get a bb  ccc\r\nrest");
        assert_eq!(n, 15);
        let Request::Get { keys, cas: false } = r else { panic!("{r:?}") };
        assert_eq!(keys.collect::<Vec<_>>(), vec![&b"a"[..], b"bb", b"ccc"]);
        let (r, n) = done(b"gets k\n");
        assert_eq!(n, 7);
        assert!(matches!(r, Request::Get { cas: true, .. }));
    }

    #[test]
    fn get_without_key_is_an_error() {
        assert_eq!(failed(b"get\r\n").kind, FailKind::Unknown);
        assert_eq!(failed(b"get   \r\n").kind, FailKind::Unknown);
    }

    #[test]
    fn incomplete_until_newline_and_data() {
        assert!(matches!(parse(b"get a", &L), Parse::Incomplete));
        assert!(matches!(parse(b"set a 0 0 5\r\nhel", &L), Parse::Incomplete));
        assert!(matches!(parse(b"set a 0 0 5\r\nhello\r", &L), Parse::Incomplete));
        let (r, n) = done(b"set a 7 -1 5 noreply\r\nhello\r\nget");
        assert_eq!(n, 29);
        match r {
            Request::Store { kind, key, flags, exptime, data, noreply, .. } => {
                assert_eq!(
                    (kind, key, flags, exptime, data, noreply),
                    (StoreKind::Set, &b"a"[..], 7, -1, &b"hello"[..], true)
                );
            }
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn binary_data_with_newlines_inside() {
        let (r, _) = done(b"set k 0 0 4\r\n\r\n\0\n\r\n");
        let Request::Store { data, .. } = r else { panic!() };
        assert_eq!(data, b"\r\n\0\n");
    }

    #[test]
    fn cas_needs_its_unique() {
        let (r, _) = done(b"cas k 1 2 1 99\r\nx\r\n");
        assert!(matches!(r, Request::Store { kind: StoreKind::Cas, cas: 99, .. }));
        assert_eq!(failed(b"cas k 1 2 1\r\nx\r\n").kind, FailKind::Unknown);
    }

    #[test]
    fn too_large_value_is_swallowed_whole() {
        let f = failed(b"set k 0 0 2000\r\n");
        assert_eq!(f.kind, FailKind::TooLarge);
        assert_eq!(f.skip, 16 + 2002);
        assert_eq!(f.unlink, Some(&b"k"[..]));
        assert_eq!(failed(b"add k 0 0 2000\r\n").unlink, None);
    }

    #[test]
    fn bad_key_drops_the_data_block() {
        let long = format!("set {} 0 0 3\r\nabc\r\n", "k".repeat(251));
        let f = failed(long.as_bytes());
        assert_eq!((f.kind, f.skip), (FailKind::KeyTooLong, long.len()));
        // As memcached: control characters belong to the key; a NUL ends the line.
        assert!(matches!(done(b"get a\x01b\r\n").0, Request::Get { .. }));
        assert!(matches!(done(b"delete a\tb\r\n").0, Request::Delete { key: b"a\tb", .. }));
        assert_eq!(failed(b"set g\0h 0 0 1\r\n").kind, FailKind::Unknown);
        let ok = format!("get {}\r\n", "k".repeat(250));
        done(ok.as_bytes());
    }

    #[test]
    fn length_token_as_memcached_reads_it() {
        // strtol into an int: a sign, then the low 32 bits of what fits a long.
        assert_eq!(parse_length(b"5"), Some(5));
        assert_eq!(parse_length(b"+5"), Some(5));
        assert_eq!(parse_length(b"-0"), Some(0));
        assert_eq!(parse_length(b"\t7"), Some(7));
        assert_eq!(parse_length(b"4294967297"), Some(1));
        assert_eq!(parse_length(b"-9223372036854775808"), Some(0));
        assert_eq!(parse_length(b"2147483645"), Some(2147483645));
        for bad in [&b"2147483646"[..], b"2147483647", b"2147483648", b"-1", b"9223372036854775808", b"", b"+", b"5x"] {
            assert_eq!(parse_length(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        // A length that is not valid is a bad command line: nothing after it is swallowed.
        for line in [&b"set k 0 0 2147483647\r\n"[..], b"ms k 2147483647\r\n", b"ms k -1 T0\r\n"] {
            let f = failed(line);
            assert_eq!((f.kind, f.skip), (FailKind::BadFormat, line.len()));
        }
        // A valid one too large for an item is swallowed whole.
        let f = failed(b"set k 0 0 2147483645\r\n");
        assert_eq!((f.kind, f.skip), (FailKind::TooLarge, 22 + 2147483647));
        let (r, _) = done(b"set k 0 0 4294967297\r\nx\r\n");
        assert!(matches!(r, Request::Store { data: b"x", .. }));
        let (r, _) = done(b"ms k +1 T0\r\nx\r\n");
        assert!(matches!(r, Request::Meta { cmd: MetaCmd::Set, data: b"x", .. }));
    }

    #[test]
    fn meta_token_count_and_key_before_the_flags() {
        let flags = |cmd: &str, n: usize| format!("{cmd} k{}\r\n", " v".repeat(n)).into_bytes();
        assert_eq!(failed(&flags("mg", 17)).kind, FailKind::Msg(b"CLIENT_ERROR duplicate flag\r\n"));
        assert_eq!(failed(&flags("mg", 18)).kind, FailKind::Msg(b"CLIENT_ERROR options flags are too long\r\n"));
        let ma = format!("ma k{}\r\n", " q".repeat(5000)).into_bytes();
        let f = failed(&ma);
        assert_eq!((f.kind, f.skip), (FailKind::Msg(b"CLIENT_ERROR options flags too long\r\n"), ma.len()));
        // ms: refused before its length is read, so nothing is swallowed.
        let ms = format!("ms k 5{}\r\n", " T0".repeat(17)).into_bytes();
        let f = failed(&ms);
        assert_eq!((f.kind, f.skip), (FailKind::Msg(b"CLIENT_ERROR options flags too long\r\n"), ms.len()));
        let ms = format!("ms {} 5\r\n", "k".repeat(251)).into_bytes();
        let f = failed(&ms);
        assert_eq!((f.kind, f.skip), (FailKind::BadFormat, ms.len()));
        let mg = format!("mg k O{}\r\n", "o".repeat(2089)).into_bytes();
        assert_eq!(failed(&mg).kind, FailKind::Msg(b"CLIENT_ERROR opaque token too long\r\n"));
        // A storage line with more tokens than memcached splits: an unknown command.
        let set = format!("set k 0 0 1 noreply{}\r\nx\r\n", " x".repeat(1500)).into_bytes();
        assert_eq!(failed(&set).kind, FailKind::Unknown);
    }

    #[test]
    fn bad_data_chunk() {
        let f = failed(b"set k 0 0 3\r\nabcde\r\n");
        assert_eq!((f.kind, f.skip), (FailKind::BadDataChunk, 18));
    }

    #[test]
    fn bad_numbers() {
        assert_eq!(failed(b"set k x 0 3\r\nabc\r\n").kind, FailKind::BadFormat);
        assert_eq!(failed(b"set k 0 0 -3\r\n").kind, FailKind::BadFormat);
        assert_eq!(failed(b"set k 18446744073709551616 0 1\r\n").kind, FailKind::BadFormat);
        assert_eq!(failed(b"set k -1 0 1\r\n").kind, FailKind::BadFormat);
        // As memcached: flags are read into 64 bits and kept modulo 2^32.
        let (r, _) = done(b"set k 4294967297 0 1\r\nx\r\n");
        assert!(matches!(r, Request::Store { flags: 1, .. }), "{r:?}");
        assert_eq!(failed(b"incr k -1\r\n").kind, FailKind::BadDelta);
        assert_eq!(failed(b"incr k 18446744073709551616\r\n").kind, FailKind::BadDelta);
        let (r, _) = done(b"incr k 18446744073709551615\r\n");
        assert!(matches!(r, Request::Arith { incr: true, delta: u64::MAX, .. }));
    }

    #[test]
    fn line_limits() {
        // Without its newline a line waits up to the read buffer; the caller closes a stalled one
        // past MAX_LINE.
        let long = vec![b'x'; READ_BUFFER + 1];
        let f = failed(&long);
        assert_eq!(f.kind, FailKind::LineTooLong);
        assert!(f.kind.closes());
        assert!(matches!(parse(&long[..READ_BUFFER - 1], &L), Parse::Incomplete));
        assert!(stalled_line(&long[..MAX_LINE + 1]) && !stalled_line(&long[..MAX_LINE]));
        assert!(!stalled_line(b"get k k k k k k k k k k k k k k k k k k k k k k k k k k k k k k k k k k k k k"));
        let mut ended = long[..MAX_LINE + 1].to_vec();
        ended.extend_from_slice(b"\r\nget");
        assert!(!stalled_line(&ended));
        // With its newline within the read buffer, a long line is run.
        let mut set = b"set k 0 0 1".to_vec();
        set.resize(READ_BUFFER - 5, b' ');
        set.extend_from_slice(b"\r\nx\r\n");
        assert!(matches!(done(&set), (Request::Store { data: b"x", .. }, n) if n == set.len()));
        let mut touch = b"touch k 10".to_vec();
        touch.resize(3000, b' ');
        touch.extend_from_slice(b"\r\n");
        assert!(matches!(done(&touch).0, Request::Touch { exptime: 10, .. }));
        let mut x = vec![b'x'; READ_BUFFER - 2];
        x.extend_from_slice(b"\r\n");
        assert_eq!(failed(&x).kind, FailKind::Unknown);
        x.insert(0, b'x');
        assert_eq!(failed(&x).kind, FailKind::LineTooLong);
        // A get line may be longer.
        let mut get = b"get".to_vec();
        while get.len() < 3 * MAX_LINE {
            get.extend_from_slice(b" key");
        }
        assert!(matches!(parse(&get, &L), Parse::Incomplete));
        get.extend_from_slice(b"\r\n");
        done(&get);
        // Past MAX_GET_LINE, still incomplete (the session streams it from `get_head`).
        let mut get = b"  gat -1 ".to_vec();
        get.resize(MAX_GET_LINE + 10, b'k');
        assert!(matches!(parse(&get, &L), Parse::Incomplete));
        assert_eq!(get_head(&get), Some(GetHead { cas: false, gat: Some(Ok(-1)), keys_at: 8 }));
        assert_eq!(get_head(b"gets "), Some(GetHead { cas: true, gat: None, keys_at: 4 }));
        assert_eq!(
            get_head(b"gats x y"),
            Some(GetHead { cas: true, gat: Some(Err(FailKind::BadExptime)), keys_at: 6 })
        );
        assert_eq!(get_head(b"gat 10"), None);
        assert_eq!(get_head(b"set a"), None);
    }

    #[test]
    fn http_is_refused() {
        let f = failed(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(f.kind, FailKind::Http);
        assert!(f.kind.closes() && f.kind.reply().is_none());
        assert_eq!(failed(b"POST / HTT").kind, FailKind::Http);
    }

    #[test]
    fn binary_request_on_a_text_connection_is_read_as_text() {
        // As memcached: once a connection's first byte chose text, a binary header is just
        // bytes of a command line.
        assert!(matches!(parse(&[0x80, 0x01, 0, 0], &L), Parse::Incomplete));
        assert_eq!(failed(&[0x80, 0x0a, 0, 0]).kind, FailKind::Unknown);
    }

    #[test]
    fn simple_commands_and_their_arity() {
        assert!(matches!(done(b"version\r\n").0, Request::Version));
        assert!(matches!(done(b"version foo\r\n").0, Request::Version));
        assert!(matches!(done(b"quit\r\n").0, Request::Quit));
        assert!(matches!(done(b"quit noreply\r\n").0, Request::Quit));
        assert!(matches!(done(b"verbosity 1\r\n").0, Request::Verbosity { level: 1, noreply: false }));
        assert!(matches!(done(b"verbosity 0 noreply\r\n").0, Request::Verbosity { level: 0, noreply: true }));
        assert!(matches!(parse(b"verbosity noreply\r\n", &L), Parse::Fail(Fail { noreply: true, .. })));
        assert!(parse_is_fail(b"verbosity\r\n"));
        assert!(parse_is_fail(b"verbosity foo bar my\r\n"));
        assert!(matches!(done(b"flush_all\r\n").0, Request::FlushAll { delay: 0, noreply: false }));
        assert!(matches!(done(b"flush_all 10 noreply\r\n").0, Request::FlushAll { delay: 10, noreply: true }));
        assert!(matches!(done(b"flush_all noreply\r\n").0, Request::FlushAll { delay: 0, noreply: true }));
        assert!(parse_is_fail(b"flush_all foo\r\n"));
        assert!(matches!(done(b"delete k\r\n").0, Request::Delete { noreply: false, .. }));
        assert!(matches!(done(b"delete k 0\r\n").0, Request::Delete { noreply: false, .. }));
        assert!(matches!(done(b"delete k noreply\r\n").0, Request::Delete { noreply: true, .. }));
        assert_eq!(failed(b"delete\r\n").kind, FailKind::Unknown);
        assert_eq!(failed(b"delete a b c d e\r\n").kind, FailKind::Unknown);
        assert_eq!(failed(b"delete a b\r\n").kind, FailKind::DeleteUsage);
        assert!(matches!(done(b"touch k 10\r\n").0, Request::Touch { exptime: 10, .. }));
        assert!(matches!(done(b"stats\r\n").0, Request::Stats { arg: None }));
        assert!(matches!(done(b"stats noreply\r\n").0, Request::Stats { arg: Some(b"noreply") }));
        assert_eq!(failed(b"bogus\r\n").kind, FailKind::Unknown);
        assert_eq!(failed(b"\r\n").kind, FailKind::Unknown);
        assert_eq!(failed(b"GET\r\n").kind, FailKind::Unknown);
    }

    #[test]
    fn operator_commands() {
        fn admin(b: &[u8]) -> Admin<'_> {
            match done(b).0 {
                Request::Admin(a) => a,
                r => panic!("{r:?}"),
            }
        }
        assert_eq!(admin(b"stats cachedump 1 0\r\n"), Admin::CacheDump { class: 1, limit: 0 });
        assert_eq!(admin(b"stats cachedump 1 5 extra\r\n"), Admin::CacheDump { class: 1, limit: 5 });
        assert_eq!(failed(b"stats cachedump x 0\r\n").kind, FailKind::BadFormat);
        assert!(matches!(done(b"stats cachedump 1\r\n").0, Request::Stats { arg: Some(b"cachedump") }));
        assert_eq!(admin(b"stats detail dump\r\n"), Admin::Detail(Detail::Dump));
        assert_eq!(failed(b"stats detail foo\r\n").kind, FailKind::Msg(DETAIL_USAGE));
        assert!(matches!(done(b"stats settings x\r\n").0, Request::Stats { arg: Some(b"settings") }));
        assert_eq!(admin(b"lru_crawler metadump all\r\n"), Admin::Dump { mg: false, classes: b"all" });
        assert_eq!(admin(b"lru_crawler mgdump 1,2\r\n"), Admin::Dump { mg: true, classes: b"1,2" });
        assert_eq!(failed(b"lru_crawler metadump\r\n").kind, FailKind::Unknown);
        assert_eq!(failed(b"lru_crawler metadump all noreply\r\n").kind, FailKind::Unknown);
        assert_eq!(admin(b"watch\r\n"), Admin::Watch { streams: 1 });
        assert_eq!(admin(b"watch mutations connevents\r\n"), Admin::Watch { streams: 2 | 8 });
        assert_eq!(failed(b"watch deletions\r\n").kind, FailKind::Unknown);
        assert_eq!(admin(b"shutdown\r\n"), Admin::Shutdown { mode_ok: true });
        assert_eq!(admin(b"shutdown graceful\r\n"), Admin::Shutdown { mode_ok: true });
        assert_eq!(admin(b"shutdown now\r\n"), Admin::Shutdown { mode_ok: false });
        assert_eq!(admin(b"refresh_certs\r\n"), Admin::RefreshCerts);
        assert_eq!(admin(b"cache_memlimit 100 noreply\r\n"), Admin::MemLimit { mb: 100, noreply: true });
        assert!(matches!(parse(b"cache_memlimit x noreply\r\n", &L), Parse::Fail(Fail { noreply: true, .. })));
        assert_eq!(failed(b"cache_memlimit\r\n").kind, FailKind::Unknown);
        assert_eq!(admin(b"cache_memlimit 4294967297\r\n"), Admin::MemLimit { mb: 1, noreply: false });
        assert_eq!(admin(b"lru_crawler tocrawl 10\r\n"), Admin::CrawlerTune);
        assert!(matches!(done(b"verbosity 99999999999\r\n").0, Request::Verbosity { level: u32::MAX, .. }));
    }

    fn parse_is_fail(b: &[u8]) -> bool {
        matches!(parse(b, &L), Parse::Fail(_))
    }

    #[test]
    fn gat_takes_exptime_first() {
        let (r, _) = done(b"gats 100 a b\r\n");
        let Request::Gat { exptime: 100, keys, cas: true } = r else { panic!("{r:?}") };
        assert_eq!(keys.count(), 2);
        // memcached answers a gat without keys with END.
        assert!(matches!(done(b"gat 100\r\n").0, Request::Gat { exptime: 100, .. }));
        assert!(parse_is_fail(b"gat x a\r\n"));
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"+1"), None);
        assert_eq!(parse_u64(b""), None);
    }
}
