//! memcached's binary protocol: the 24-byte request header, the per-opcode body checks, and the
//! response writers.
//!
//! A connection speaks it when its first byte is the request magic `0x80` (the `Session`
//! decides, once per connection, as memcached does). [`parse`] looks at the start of a buffer
//! and never allocates or copies: the key, extras and value of a [`Request`] borrow the input.
//! It checks what memcached 1.6.18 checks (`proto_bin.c`), in the same order, and a rejected
//! request carries memcached's status and whether the connection closes after it:
//!
//! - a header whose magic is not `0x80`: closed without a reply;
//! - key or extras longer than the body: `UNKNOWN_COMMAND`, then closed;
//! - a key over 250 bytes, or extras/key/body lengths that do not fit the opcode: `EINVAL`,
//!   then closed;
//! - an opcode memcached does not serve (including `VERBOSITY` 0x1b, and the SASL opcodes of a
//!   server without SASL): `UNKNOWN_COMMAND`, its body dropped;
//! - with SASL ([`parse_with`]), a mechanism name over 32 bytes: `EINVAL`, its body dropped; a
//!   SASL message larger than an item: `ENOMEM`, its body dropped;
//! - a value over the item size limit: `E2BIG`, its body dropped even before it arrives.
//!
//! The value of a storage request is the only part of a body that must be received whole;
//! bytes after the key of a request that has no value (memcached ignores them) are dropped as
//! they arrive, so a request is at most `24 + 8 + 250 + max_item_size` bytes of buffer.

use segcache_core::MAX_KEY_LEN;

use super::text::{Limits, StoreKind};

/// The first byte of every request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// The first byte of every response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Request and response headers are this long.
pub const HEADER_LEN: usize = 24;
/// memcached's longest SASL mechanism name (`MAX_SASL_MECH_LEN`).
pub const MAX_SASL_MECH_LEN: usize = 32;
/// The `expiration` of an incr/decr that must not create a missing item.
pub const NO_CREATE: u32 = 0xffff_ffff;

/// The opcodes memcached 1.6 knows (`protocol_binary.h`).
pub mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    /// Defined by the protocol, not served by memcached 1.6 (`UNKNOWN_COMMAND`).
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Success = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooLarge = 0x03,
    Invalid = 0x04,
    NotStored = 0x05,
    DeltaBadValue = 0x06,
    /// Not authenticated, or a failed SASL exchange (and `-F`'s FLUSH).
    AuthError = 0x20,
    /// A SASL exchange goes on: send SASL_STEP.
    AuthContinue = 0x21,
    UnknownCommand = 0x81,
    NoMemory = 0x82,
}

impl Status {
    /// The body memcached sends with an error of this status (`write_bin_error`).
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Success => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::Invalid => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::DeltaBadValue => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::AuthContinue => b"",
            Status::UnknownCommand => b"Unknown command",
            Status::NoMemory => b"Out of memory",
        }
    }
}

/// A request header, numbers in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub body_len: u32,
    /// Echoed in the response, untouched.
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// Decodes the first 24 bytes of `buf` (which must hold them); the magic is not checked.
    pub fn decode(buf: &[u8]) -> Header {
        let be16 = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
        let be32 = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        Header {
            opcode: buf[1],
            key_len: be16(2),
            extras_len: buf[4],
            body_len: be32(8),
            opaque: u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]),
            cas: (u64::from(be32(16)) << 32) | u64::from(be32(20)),
        }
    }

    /// The whole request's length: header and body.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.body_len as usize
    }
}

/// What a request asks for, with its fields decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// GET, GETK, GAT, GATK, TOUCH and their quiet forms: `exptime` is set for the touching
    /// ones; `with_key` returns the key (the K forms); TOUCH returns no value.
    Get {
        key: &'a [u8],
        exptime: Option<u32>,
        with_key: bool,
        with_value: bool,
    },
    /// SET, ADD, REPLACE (with the extras' flags and expiration), APPEND, PREPEND (flags and
    /// expiration 0). A CAS in the header makes SET, ADD and REPLACE compare it.
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: u32,
        value: &'a [u8],
    },
    Delete {
        key: &'a [u8],
    },
    /// INCREMENT/DECREMENT: a missing item is created with `initial` unless `exptime` is
    /// [`NO_CREATE`].
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: u32,
    },
    Flush {
        exptime: u32,
    },
    Noop,
    Version,
    Quit,
    /// STAT with its (possibly empty) group name in the key.
    Stat {
        group: &'a [u8],
    },
    /// SASL_LIST_MECHS (only from [`parse_with`] with SASL on).
    SaslList,
    /// SASL_AUTH (`step` false) or SASL_STEP: the mechanism in the key, the client's message
    /// in the value (only from [`parse_with`] with SASL on).
    Sasl {
        step: bool,
        mech: &'a [u8],
        data: &'a [u8],
    },
}

/// One parsed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    pub header: Header,
    /// A quiet opcode: a success is not answered (except a get's hit), nor a get's miss.
    pub quiet: bool,
    pub cmd: Command<'a>,
}

/// A rejected request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fail<'a> {
    pub header: Header,
    /// The error to answer, or `None` for no reply (bad magic).
    pub status: Option<Status>,
    /// Bytes to drop from the start of the request; may exceed what was received (the rest
    /// of a rejected body is dropped as it arrives).
    pub skip: usize,
    /// Close the connection after the reply.
    pub close: bool,
    /// A SET refused as too large: memcached removes the key's current value; so do we.
    pub unlink: Option<&'a [u8]>,
}

/// The parser's verdict on the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse<'a> {
    /// A request, and the bytes it takes, counted from its start: this may exceed what was
    /// received when bytes the request does not use follow its key (they are dropped as
    /// they arrive).
    Done(Request<'a>, usize),
    /// Not enough bytes yet.
    Incomplete,
    Fail(Fail<'a>),
}

fn fail(header: Header, status: Option<Status>, skip: usize, close: bool) -> Parse<'static> {
    Parse::Fail(Fail { header, status, skip, close, unlink: None })
}

/// The quiet opcodes and the command each is the quiet form of.
fn unquiet(opcode: u8) -> (u8, bool) {
    let loud = match opcode {
        op::SETQ => op::SET,
        op::ADDQ => op::ADD,
        op::REPLACEQ => op::REPLACE,
        op::DELETEQ => op::DELETE,
        op::INCREMENTQ => op::INCREMENT,
        op::DECREMENTQ => op::DECREMENT,
        op::QUITQ => op::QUIT,
        op::FLUSHQ => op::FLUSH,
        op::APPENDQ => op::APPEND,
        op::PREPENDQ => op::PREPEND,
        op::GETQ => op::GET,
        op::GETKQ => op::GETK,
        op::GATQ => op::GAT,
        op::GATKQ => op::GATK,
        _ => return (opcode, false),
    };
    (loud, true)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    (u64::from(be32(b)) << 32) | u64::from(be32(&b[4..]))
}

/// Parses the request at the start of `buf` (a binary connection's input), as a server without
/// SASL.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parse<'a> {
    parse_with(buf, limits, false)
}

/// As [`parse`]; with `sasl`, the SASL opcodes are requests ([`Command::SaslList`],
/// [`Command::Sasl`]) rather than unknown.
pub fn parse_with<'a>(buf: &'a [u8], limits: &Limits, sasl: bool) -> Parse<'a> {
    if buf.len() < HEADER_LEN {
        return Parse::Incomplete;
    }
    let h = Header::decode(buf);
    if buf[0] != REQUEST_MAGIC {
        return fail(h, None, buf.len(), true);
    }
    let (ext_len, key_len, body_len) = (usize::from(h.extras_len), usize::from(h.key_len), h.body_len as usize);
    let total = h.total_len();
    if key_len > body_len || key_len + ext_len > body_len {
        return fail(h, Some(Status::UnknownCommand), total, true);
    }
    if key_len > MAX_KEY_LEN {
        return fail(h, Some(Status::Invalid), total, true);
    }
    let (cmd, quiet) = unquiet(h.opcode);
    // Each opcode's shape, as memcached checks it; a misfit is a protocol error.
    let shape_ok = match cmd {
        op::VERSION | op::NOOP | op::QUIT | op::SASL_LIST_MECHS => ext_len == 0 && key_len == 0 && body_len == 0,
        op::FLUSH => key_len == 0 && body_len == ext_len && (ext_len == 0 || ext_len == 4),
        op::SET | op::ADD | op::REPLACE => ext_len == 8 && key_len != 0,
        op::GET | op::GETK | op::DELETE => ext_len == 0 && key_len != 0 && body_len == key_len,
        op::INCREMENT | op::DECREMENT => ext_len == 20 && key_len != 0 && body_len == key_len + ext_len,
        op::APPEND | op::PREPEND => ext_len == 0 && key_len != 0,
        op::STAT => ext_len == 0,
        op::SASL_AUTH | op::SASL_STEP => ext_len == 0 && key_len != 0,
        op::TOUCH | op::GAT | op::GATK => ext_len == 4 && key_len != 0,
        // Anything else: unknown, its body dropped.
        _ => return fail(h, Some(Status::UnknownCommand), total, false),
    };
    if !shape_ok {
        return fail(h, Some(Status::Invalid), total, true);
    }
    if matches!(cmd, op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP) {
        if !sasl {
            // As memcached started without `-S`.
            return fail(h, Some(Status::UnknownCommand), total, false);
        }
        if cmd == op::SASL_LIST_MECHS {
            return Parse::Done(Request { header: h, quiet, cmd: Command::SaslList }, total);
        }
        // As memcached: a long mechanism name, or a message that would not fit an item, is
        // refused and its body dropped.
        if key_len > MAX_SASL_MECH_LEN {
            return fail(h, Some(Status::Invalid), total, false);
        }
        if !limits.item_fits(key_len, 0, body_len - key_len) {
            return fail(h, Some(Status::NoMemory), total, false);
        }
        if buf.len() < total {
            return Parse::Incomplete;
        }
        let mech = &buf[HEADER_LEN..HEADER_LEN + key_len];
        let data = &buf[HEADER_LEN + key_len..total];
        return Parse::Done(
            Request { header: h, quiet, cmd: Command::Sasl { step: cmd == op::SASL_STEP, mech, data } },
            total,
        );
    }
    let head = HEADER_LEN + ext_len + key_len;
    if buf.len() < head {
        return Parse::Incomplete;
    }
    let extras = &buf[HEADER_LEN..HEADER_LEN + ext_len];
    let key = &buf[HEADER_LEN + ext_len..head];
    let cmd = match cmd {
        op::SET | op::ADD | op::REPLACE | op::APPEND | op::PREPEND => {
            let kind = match cmd {
                op::SET => StoreKind::Set,
                op::ADD => StoreKind::Add,
                op::REPLACE => StoreKind::Replace,
                op::APPEND => StoreKind::Append,
                _ => StoreKind::Prepend,
            };
            let flags = if ext_len == 8 { be32(extras) } else { 0 };
            if !limits.item_fits(key_len, flags, total - head) {
                let unlink = (kind == StoreKind::Set).then_some(key);
                return Parse::Fail(Fail {
                    header: h,
                    status: Some(Status::TooLarge),
                    skip: total,
                    close: false,
                    unlink,
                });
            }
            if buf.len() < total {
                return Parse::Incomplete;
            }
            let exptime = if ext_len == 8 { be32(&extras[4..]) } else { 0 };
            Command::Store { kind, key, flags, exptime, value: &buf[head..total] }
        }
        op::GET | op::GETK => Command::Get { key, exptime: None, with_key: cmd == op::GETK, with_value: true },
        op::TOUCH | op::GAT | op::GATK => {
            Command::Get { key, exptime: Some(be32(extras)), with_key: cmd == op::GATK, with_value: cmd != op::TOUCH }
        }
        op::DELETE => Command::Delete { key },
        op::INCREMENT | op::DECREMENT => Command::Arith {
            incr: cmd == op::INCREMENT,
            key,
            delta: be64(extras),
            initial: be64(&extras[8..]),
            exptime: be32(&extras[16..]),
        },
        op::FLUSH => Command::Flush { exptime: if ext_len == 4 { be32(extras) } else { 0 } },
        op::NOOP => Command::Noop,
        op::VERSION => Command::Version,
        op::QUIT => Command::Quit,
        _ => Command::Stat { group: key },
    };
    Parse::Done(Request { header: h, quiet, cmd }, total)
}

/// Appends a response: header, then `extras`, `key` and `value` as its body.
#[allow(clippy::too_many_arguments)]
pub fn put_response(
    out: &mut Vec<u8>,
    opcode: u8,
    status: Status,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    let body = extras.len() + key.len() + value.len();
    out.reserve(HEADER_LEN + body);
    out.push(RESPONSE_MAGIC);
    out.push(opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0); // data type: raw bytes
    out.extend_from_slice(&(status as u16).to_be_bytes());
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends an error response for `h`'s request, with memcached's message as its body.
pub fn put_error(out: &mut Vec<u8>, h: &Header, status: Status) {
    put_response(out, h.opcode, status, h.opaque, 0, &[], &[], status.message());
}

/// Encodes a request as a client sends it (for clients, tests and tools built on this module).
pub fn request(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
    let mut v = vec![REQUEST_MAGIC, opcode];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    v.extend_from_slice(&opaque.to_be_bytes());
    v.extend_from_slice(&cas.to_be_bytes());
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_item_size: 1024, max_response: 1 << 20 };

    fn req(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
        request(opcode, key, extras, value, opaque, cas)
    }

    fn done(buf: &[u8]) -> (Request<'_>, usize) {
        match parse(buf, &LIMITS) {
            Parse::Done(r, n) => (r, n),
            other => panic!("expected a request, got {other:?}"),
        }
    }

    fn failed(buf: &[u8]) -> Fail<'_> {
        match parse(buf, &LIMITS) {
            Parse::Fail(f) => f,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn header_fields_decode_big_endian() {
        let b = req(op::GETK, &[], b"key", &[], 0xdead_beef, 0x0102_0304_0506_0708);
        let (r, n) = done(&b);
        assert_eq!(n, b.len());
        assert_eq!(r.header.opaque, 0xdead_beef);
        assert_eq!(r.header.cas, 0x0102_0304_0506_0708);
        assert_eq!(r.header.key_len, 3);
        assert!(!r.quiet);
        assert_eq!(r.cmd, Command::Get { key: b"key", exptime: None, with_key: true, with_value: true });
    }

    #[test]
    fn set_and_its_quiet_form() {
        let mut extras = 7u32.to_be_bytes().to_vec();
        extras.extend_from_slice(&100u32.to_be_bytes());
        for (opcode, quiet) in [(op::SET, false), (op::SETQ, true)] {
            let b = req(opcode, &extras, b"k", b"value", 1, 0);
            let (r, n) = done(&b);
            assert_eq!(n, b.len());
            assert_eq!(r.quiet, quiet);
            assert_eq!(
                r.cmd,
                Command::Store { kind: StoreKind::Set, key: b"k", flags: 7, exptime: 100, value: b"value" }
            );
        }
    }

    #[test]
    fn incomplete_until_the_value_is_in() {
        let b = req(op::SET, &[0; 8], b"k", b"value", 1, 0);
        for cut in 0..b.len() {
            assert_eq!(parse(&b[..cut], &LIMITS), Parse::Incomplete, "cut at {cut}");
        }
        // A get needs only its key: a pipelined next request does not matter.
        let mut two = req(op::GET, &[], b"k", &[], 0, 0);
        two.extend_from_slice(&req(op::NOOP, &[], &[], &[], 0, 0)[..5]);
        assert_eq!(done(&two).1, HEADER_LEN + 1);
    }

    #[test]
    fn incr_extras() {
        let mut extras = 5u64.to_be_bytes().to_vec();
        extras.extend_from_slice(&42u64.to_be_bytes());
        extras.extend_from_slice(&NO_CREATE.to_be_bytes());
        let b = req(op::DECREMENTQ, &extras, b"n", &[], 0, 0);
        let (r, _) = done(&b);
        assert!(r.quiet);
        assert_eq!(r.cmd, Command::Arith { incr: false, key: b"n", delta: 5, initial: 42, exptime: NO_CREATE });
    }

    #[test]
    fn bad_magic_closes_without_reply() {
        let mut b = req(op::NOOP, &[], &[], &[], 0, 0);
        b[0] = RESPONSE_MAGIC;
        let f = failed(&b);
        assert_eq!((f.status, f.close), (None, true));
        // memcached waits for a whole header first.
        assert_eq!(parse(b"hello\r\n", &LIMITS), Parse::Incomplete);
    }

    #[test]
    fn unknown_opcodes_drop_their_body() {
        for opcode in [op::VERBOSITY, 0x50, 0xff, op::SASL_AUTH] {
            let b = req(opcode, &[], b"mech", b"some data", 9, 0);
            let f = failed(&b);
            assert_eq!(f.status, Some(Status::UnknownCommand), "opcode {opcode:#x}");
            assert!(!f.close);
            assert_eq!(f.skip, b.len());
        }
        let b = req(op::SASL_LIST_MECHS, &[], &[], &[], 0, 0);
        let f = failed(&b);
        assert_eq!((f.status, f.close), (Some(Status::UnknownCommand), false));
    }

    #[test]
    fn protocol_errors_close() {
        // A get with extras, a set without, a key over 250 bytes, a noop with a body.
        for b in [
            req(op::GET, &[0; 4], b"k", &[], 0, 0),
            req(op::SET, &[], b"k", b"v", 0, 0),
            req(op::GET, &[], &[b'x'; 251], &[], 0, 0),
            req(op::NOOP, &[], &[], b"x", 0, 0),
            req(op::FLUSH, &[0; 8], &[], &[], 0, 0),
            req(op::INCREMENT, &[0; 8], b"k", &[], 0, 0),
        ] {
            let f = failed(&b);
            assert_eq!((f.status, f.close), (Some(Status::Invalid), true), "{b:?}");
        }
        // A key longer than the body.
        let mut b = req(op::GET, &[], b"key", &[], 0, 0);
        b[11] = 1;
        let f = failed(&b);
        assert_eq!((f.status, f.close), (Some(Status::UnknownCommand), true));
    }

    #[test]
    fn too_large_is_refused_before_the_value_arrives() {
        let b = req(op::SET, &[0; 8], b"big", &[b'x'; 2000], 3, 0);
        let f = failed(&b[..HEADER_LEN + 8 + 3]);
        assert_eq!(f.status, Some(Status::TooLarge));
        assert_eq!(f.skip, b.len());
        assert_eq!(f.unlink, Some(&b"big"[..]));
        assert!(!f.close);
        let b = req(op::APPENDQ, &[], b"big", &[b'x'; 2000], 3, 0);
        let f = failed(&b);
        assert_eq!((f.status, f.unlink), (Some(Status::TooLarge), None));
    }

    #[test]
    fn trailing_bytes_after_a_key_are_skipped() {
        // memcached does not check a touch's body length: the bytes after its key are dropped.
        let b = req(op::TOUCH, &[0, 0, 0, 10], b"k", b"junk", 0, 0);
        let (r, n) = done(&b[..HEADER_LEN + 5]);
        assert_eq!(n, b.len());
        assert_eq!(r.cmd, Command::Get { key: b"k", exptime: Some(10), with_key: false, with_value: false });
    }

    #[test]
    fn response_layout() {
        let mut out = Vec::new();
        let h = Header { opcode: op::GET, opaque: 0x0a0b_0c0d, ..Header::default() };
        put_error(&mut out, &h, Status::KeyNotFound);
        assert_eq!(
            &out[..HEADER_LEN],
            &[0x81, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(&out[HEADER_LEN..], b"Not found");
        out.clear();
        put_response(&mut out, op::GETK, Status::Success, 1, 2, &[0, 0, 0, 5], b"k", b"val");
        assert_eq!(out.len(), HEADER_LEN + 8);
        assert_eq!(&out[2..4], &[0, 1]);
        assert_eq!(out[4], 4);
        assert_eq!(&out[8..12], &[0, 0, 0, 8]);
        assert_eq!(&out[16..24], &2u64.to_be_bytes());
        assert_eq!(&out[HEADER_LEN..], b"\0\0\0\x05kval");
    }
}
