//! One connection's protocol state, independent of sockets: bytes in, replies out. The workers
//! drive it from their event loops; the tests and the fuzz target drive it directly.
//!
//! As memcached, a connection's first byte picks its protocol for good: the binary protocol's
//! request magic (`0x80`) makes it a binary connection, anything else a text (and meta) one.
//!
//! With `-Y`, a text connection is answered nothing but `CLIENT_ERROR unauthenticated` until
//! its `set` of `user password` names a user of the file; with `-S`, a binary connection gets
//! an auth error (and is closed) for anything but VERSION and the SASL exchange until a
//! SASL PLAIN exchange names one (memcached 1.6.18's `try_read_command_asciiauth` and
//! `proto_bin.c`, byte for byte).

use memchr::{memchr, memrchr};
use segcache_core::MAX_KEY_LEN;

use crate::exec::{execute_binary, execute_within, Flow, GetStream, Retrieval};
use crate::observe::Probe;
use crate::protocol::binary::{self, op, Command, Header, Status, HEADER_LEN, REQUEST_MAGIC};
use crate::protocol::{get_head, parse, stalled_line, FailKind, MetaCmd, MetaKey, Parse, MAX_GET_LINE};
use crate::state::Ctx;
pub use crate::state::OUT_HIGH_WATER;

/// How much one [`Session::process_within`] call may do before it returns, so that the caller
/// can give other connections a turn. At least one request runs whatever the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Requests (including rejected ones).
    pub requests: usize,
    /// Input bytes.
    pub bytes: usize,
    /// Stop once the output buffer holds this much.
    pub out_high: usize,
}

impl Budget {
    /// No limit but the output high-water mark: what [`Session::process`] uses.
    pub const UNLIMITED: Budget = Budget { requests: usize::MAX, bytes: usize::MAX, out_high: OUT_HIGH_WATER };
}

/// What [`Session::process`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes used; the caller drops them and keeps the rest for the next call.
    pub consumed: usize,
    /// Close the connection once the output is sent.
    pub close: bool,
    /// Requests run (or rejected).
    pub requests: usize,
}

/// The protocol a connection speaks, decided by its first byte.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Nothing received yet.
    #[default]
    Undecided,
    Text,
    Binary,
}

/// What one request did to the loop of [`Session::process_within`].
enum Step {
    /// Run the next one.
    Next,
    /// The request is not all in: wait for more input.
    Incomplete,
    /// Close the connection once the output is sent.
    Close,
}

/// The per-connection state that outlives one read: the protocol, bytes still to drop from a
/// rejected data block, and a retrieval line too long to parse whole that is being run as it
/// arrives (as memcached, `get`/`gets`/`gat`/`gats` take any number of keys).
#[derive(Debug, Default)]
pub struct Session {
    swallow: usize,
    /// The refusal of the data block being dropped, sent once its last byte came: as memcached,
    /// which answers a refused store only after it read the value. A client that takes an
    /// earlier reply for the end of its request would read the rest as a reply to the next.
    held: Vec<u8>,
    mode: Mode,
    get: Option<GetStream>,
    /// A retrieval line whose reply reached the output's high-water mark: the rest of its keys,
    /// run before any later request once the client has read the reply so far.
    retrieval: Option<Retrieval>,
    /// The client authenticated (only looked at with `-Y` or `-S`).
    authed: bool,
    /// `-Y`: the authenticating `set` line came; its value (with its CRLF) is this long.
    auth_value: Option<usize>,
    /// `-S`: a SASL_AUTH asked for a SASL_STEP.
    sasl_step: bool,
}

/// The text protocol's line before authentication may be this long without its `\n` before the
/// connection is closed (memcached's).
const AUTH_LINE_MAX: usize = 2048;
/// The largest value of the authenticating `set` (the newest memcached's limit; 1.6.18 has none).
const AUTH_VALUE_MAX: usize = 16384;

/// How a SASL exchange step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SaslResult {
    Ok,
    Continue,
    Fail,
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// Whether the session is between requests (no data block still being dropped, no
    /// retrieval line still arriving, no authentication value awaited).
    pub fn at_boundary(&self) -> bool {
        self.swallow == 0 && self.get.is_none() && self.auth_value.is_none() && self.retrieval.is_none()
    }

    /// Whether a retrieval's reply is still being made (see [`Session::resume`]): the caller
    /// resumes it once the client has read the output, even with no input left.
    pub fn retrieving(&self) -> bool {
        self.retrieval.is_some()
    }

    /// Goes on with the retrieval being made, until `out` holds `OUT_HIGH_WATER` bytes or its
    /// reply is done.
    pub fn resume(&mut self, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
        if let Some(r) = self.retrieval.as_mut() {
            if r.run(out, ctx, OUT_HIGH_WATER) {
                self.retrieval = None;
            }
        }
    }

    /// Whether the connection speaks the binary protocol (known once its first byte came).
    pub fn is_binary(&self) -> bool {
        self.mode == Mode::Binary
    }

    /// Runs every complete request at the start of `input`, appending replies to `out`, until
    /// `out` holds `OUT_HIGH_WATER` (256 KiB) bytes.
    pub fn process(&mut self, input: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Progress {
        self.process_within(input, out, ctx, Budget::UNLIMITED)
    }

    /// As [`Session::process`], but returns once `budget` is spent (after at least one request).
    pub fn process_within(&mut self, input: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>, budget: Budget) -> Progress {
        crate::observe::begin_batch(&ctx.shared.observe, ctx.worker);
        let mut pos = 0;
        let mut requests = 0;
        loop {
            if self.swallow > 0 {
                let n = self.swallow.min(input.len() - pos);
                pos += n;
                self.swallow -= n;
                if self.swallow > 0 {
                    break;
                }
                out.append(&mut self.held);
            }
            if self.retrieval.is_some() {
                // The line's reply goes on before any later request.
                if out.len() >= budget.out_high {
                    break;
                }
                self.resume(out, ctx);
                continue;
            }
            if pos == input.len()
                || out.len() >= budget.out_high
                || (requests > 0 && (requests >= budget.requests || pos >= budget.bytes))
            {
                break;
            }
            requests += 1;
            if self.mode == Mode::Undecided {
                self.mode = if input[pos] == REQUEST_MAGIC { Mode::Binary } else { Mode::Text };
            }
            let step = match self.mode {
                Mode::Binary => self.binary_step(input, &mut pos, out, ctx),
                _ => self.text_step(input, &mut pos, out, ctx),
            };
            match step {
                Step::Next => {}
                Step::Incomplete => {
                    requests -= 1;
                    break;
                }
                Step::Close => return Progress { consumed: pos, close: true, requests },
            }
        }
        Progress { consumed: pos, close: false, requests }
    }

    /// Drops `skip` bytes from `*pos` on, remembering those not received yet.
    fn skip(&mut self, input: &[u8], pos: &mut usize, skip: usize) {
        let avail = input.len() - *pos;
        if skip <= avail {
            *pos += skip;
        } else {
            *pos = input.len();
            self.swallow = skip - avail;
        }
    }

    /// Drops a refused request's `skip` bytes from `*pos` on; its reply, written to `out` from
    /// `reply_at` on, is held back until the last of them came.
    fn refuse(&mut self, input: &[u8], pos: &mut usize, skip: usize, out: &mut Vec<u8>, reply_at: usize) {
        self.skip(input, pos, skip);
        if self.swallow > 0 {
            self.held.extend_from_slice(&out[reply_at..]);
            out.truncate(reply_at);
        }
    }

    /// Whether the connection holds a command line that will never be run: `input` is all that
    /// came so far, and no more is waiting to be read. As memcached, the connection is then
    /// closed (without a reply) rather than buffering a line with no end.
    pub fn line_stalled(&self, input: &[u8]) -> bool {
        self.mode == Mode::Text
            && self.swallow == 0
            && self.get.is_none()
            && self.auth_value.is_none()
            && stalled_line(input)
    }

    /// Runs (or rejects) the text or meta request at `input[*pos..]`.
    fn text_step(&mut self, input: &[u8], pos: &mut usize, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Step {
        if !self.authed && ctx.shared.settings.text_auth() {
            return self.text_auth(input, pos, out, ctx);
        }
        if self.get.is_some() {
            return self.get_more(input, pos, out, ctx);
        }
        match parse(&input[*pos..], &ctx.shared.limits) {
            Parse::Done(req, n) => {
                let probe = Probe::text(&ctx.shared.observe, ctx.worker, &req, &input[*pos..*pos + n], out.len());
                *pos += n;
                let flow = execute_within(req, out, ctx, OUT_HIGH_WATER, &mut self.retrieval);
                probe.finish(&ctx.shared.observe, ctx.worker, ctx.conn.map(|c| c.peer), out);
                if flow == Flow::Close {
                    return Step::Close;
                }
            }
            Parse::Incomplete => {
                let buf = &input[*pos..];
                if buf.len() > MAX_GET_LINE {
                    // A retrieval line longer than the input buffer may hold: run its keys as
                    // they arrive.
                    if let Some(head) = get_head(buf) {
                        *pos += head.keys_at;
                        self.get = Some(GetStream::new(&head, ctx));
                        return self.get_more(input, pos, out, ctx);
                    }
                }
                return Step::Incomplete;
            }
            Parse::Fail(f) => {
                if f.kind == FailKind::TooLarge {
                    crate::observe::stats::bump(&ctx.stats.store_too_large, 1);
                }
                if let Some(key) = f.unlink {
                    unlink(key, f.unlink_base64, ctx);
                }
                let reply_at = out.len();
                if !f.noreply {
                    if let Some(reply) = f.kind.reply() {
                        out.extend_from_slice(reply);
                    }
                }
                self.refuse(input, pos, f.skip, out, reply_at);
                if f.kind.closes() {
                    out.append(&mut self.held);
                    log::debug!("closing connection: {:?}", f.kind);
                    return Step::Close;
                }
            }
        }
        Step::Next
    }

    /// Goes on with the long retrieval line being streamed: runs the complete keys at
    /// `input[*pos..]` and keeps a partial one for the next call; at the line's end, sends its
    /// reply and leaves the streaming state.
    fn get_more(&mut self, input: &[u8], pos: &mut usize, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Step {
        let Some(get) = self.get.as_mut() else {
            return Step::Next;
        };
        let buf = &input[*pos..];
        if let Some(nl) = memchr(b'\n', buf) {
            let line = &buf[..nl];
            get.run(line.strip_suffix(b"\r").unwrap_or(line), ctx);
            *pos += nl + 1;
            if let Some(get) = self.get.take() {
                get.finish(out);
            }
            return Step::Next;
        }
        // Everything up to the last space is complete keys; what follows may be the start of one
        // (with the line's `\r`).
        let cut = memrchr(b' ', buf).map_or(0, |i| i + 1);
        get.run(&buf[..cut], ctx);
        if get.failed() || buf.len() - cut > MAX_KEY_LEN + 1 {
            // As memcached (which reads the whole line first): a key too long fails the line.
            get.reject(FailKind::KeyTooLong);
            *pos = input.len();
        } else {
            *pos += cut;
        }
        Step::Incomplete
    }

    /// `-Y`: memcached's text authentication. The first line must be `set <key> <flags>
    /// <exptime> <bytes>` (the key, flags and exptime are ignored, and so is `noreply`); its
    /// value, `user password`, is checked against the file. Anything else is answered
    /// `CLIENT_ERROR unauthenticated`; a failed attempt may be followed by another.
    fn text_auth(&mut self, input: &[u8], pos: &mut usize, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Step {
        let need = match self.auth_value {
            Some(n) => n,
            None => {
                let buf = &input[*pos..];
                if buf.len() < 2 {
                    return Step::Incomplete;
                }
                let Some(nl) = memchr(b'\n', buf) else {
                    return if buf.len() > AUTH_LINE_MAX { Step::Close } else { Step::Incomplete };
                };
                *pos += nl + 1;
                let mut t = [&[][..]; 5];
                let mut n = 0;
                for tok in buf[..nl].split(|&b| b == b' ').filter(|t| !t.is_empty()).take(5) {
                    t[n] = tok;
                    n += 1;
                }
                let size = match (n, t[0]) {
                    (5, b"set") => auth_size(t[4]),
                    _ => None,
                };
                match size {
                    None => {
                        out.extend_from_slice(b"CLIENT_ERROR unauthenticated\r\n");
                        return Step::Next;
                    }
                    Some(size) if size > AUTH_VALUE_MAX => {
                        out.extend_from_slice(b"CLIENT_ERROR auth token too long\r\n");
                        return Step::Next;
                    }
                    Some(size) => {
                        self.auth_value = Some(size + 2);
                        size + 2
                    }
                }
            }
        };
        let buf = &input[*pos..];
        if buf.len() < need {
            return Step::Incomplete;
        }
        self.auth_value = None;
        *pos += need;
        let Some(value) = buf[..need].strip_suffix(b"\r\n") else {
            out.extend_from_slice(b"CLIENT_ERROR bad command line termination\r\n");
            return Step::Next;
        };
        // memcached reads the value as a C string: it ends at a NUL.
        let value = value.split(|&b| b == 0).next().unwrap_or_default();
        let mut toks = value.split(|&b| b == b' ').filter(|t| !t.is_empty());
        let (Some(user), Some(pass)) = (toks.next(), toks.next()) else {
            out.extend_from_slice(b"CLIENT_ERROR bad authentication token format\r\n");
            return Step::Next;
        };
        let ok = ctx.shared.settings.users.as_ref().is_some_and(|u| u.check(user, pass));
        self.auth_counted(ok, ctx);
        if ok {
            self.authed = true;
            out.extend_from_slice(crate::protocol::reply::STORED);
        } else {
            out.extend_from_slice(b"CLIENT_ERROR authentication failure\r\n");
        }
        Step::Next
    }

    fn auth_counted(&self, ok: bool, ctx: &Ctx<'_>) {
        crate::observe::stats::bump(&ctx.stats.auth_cmds, 1);
        if !ok {
            crate::observe::stats::bump(&ctx.stats.auth_errors, 1);
        }
    }

    /// `-S`: SASL_LIST_MECHS, SASL_AUTH and SASL_STEP, as memcached with Cyrus SASL offering
    /// PLAIN. Each starts the exchange over (the connection is no longer authenticated).
    fn sasl(&mut self, h: &Header, cmd: Command<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) {
        self.authed = false;
        let (step, mech, data) = match cmd {
            Command::Sasl { step, mech, data } => (step, mech, data),
            _ => {
                binary::put_response(out, h.opcode, Status::Success, h.opaque, 0, &[], &[], crate::auth::SASL_MECHS);
                return;
            }
        };
        let check = |msg: &[u8]| match ctx.shared.settings.users.as_ref().is_some_and(|u| u.check_plain(msg)) {
            true => SaslResult::Ok,
            false => SaslResult::Fail,
        };
        let result = match step {
            false if !mech.eq_ignore_ascii_case(b"PLAIN") => SaslResult::Fail,
            // PLAIN without its initial response: the client sends it in a SASL_STEP.
            false if data.is_empty() => SaslResult::Continue,
            false => check(data),
            true if self.sasl_step => check(data),
            true => SaslResult::Fail,
        };
        self.sasl_step = result == SaslResult::Continue;
        match result {
            SaslResult::Ok => {
                self.authed = true;
                self.auth_counted(true, ctx);
                binary::put_response(out, h.opcode, Status::Success, h.opaque, 0, &[], &[], b"Authenticated");
            }
            SaslResult::Continue => {
                binary::put_response(out, h.opcode, Status::AuthContinue, h.opaque, 0, &[], &[], &[])
            }
            SaslResult::Fail => {
                self.auth_counted(false, ctx);
                binary::put_error(out, h, Status::AuthError);
            }
        }
    }

    /// Runs (or rejects) the binary request at `input[*pos..]`.
    fn binary_step(&mut self, input: &[u8], pos: &mut usize, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Step {
        let sasl = ctx.shared.settings.binary_auth();
        if sasl && !self.authed {
            // As memcached: after the magic and length checks, before any other, only VERSION
            // and the SASL exchange are answered; anything else gets an auth error and the
            // connection is closed.
            let buf = &input[*pos..];
            if buf.len() >= HEADER_LEN && buf[0] == REQUEST_MAGIC {
                let h = Header::decode(buf);
                let (key, ext) = (u32::from(h.key_len), u32::from(h.extras_len));
                let lengths_ok = key <= h.body_len && key + ext <= h.body_len;
                let open = matches!(h.opcode, op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP | op::VERSION);
                if lengths_ok && !open {
                    binary::put_error(out, &h, Status::AuthError);
                    return Step::Close;
                }
            }
        }
        match binary::parse_with(&input[*pos..], &ctx.shared.limits, sasl) {
            binary::Parse::Done(req, n) if matches!(req.cmd, Command::SaslList | Command::Sasl { .. }) => {
                self.skip(input, pos, n);
                self.sasl(&req.header, req.cmd, out, ctx);
            }
            binary::Parse::Done(req, n) => {
                let probe = Probe::binary(&ctx.shared.observe, ctx.worker, &req, out.len());
                self.skip(input, pos, n);
                let flow = execute_binary(req, out, ctx);
                probe.finish(&ctx.shared.observe, ctx.worker, ctx.conn.map(|c| c.peer), out);
                if flow == Flow::Close {
                    return Step::Close;
                }
            }
            binary::Parse::Incomplete => return Step::Incomplete,
            binary::Parse::Fail(f) => {
                if f.status == Some(binary::Status::TooLarge) {
                    crate::observe::stats::bump(&ctx.stats.store_too_large, 1);
                }
                if let Some(key) = f.unlink {
                    let _ = ctx.shared.cache.delete(key);
                }
                let reply_at = out.len();
                if let Some(status) = f.status {
                    binary::put_error(out, &f.header, status);
                }
                self.refuse(input, pos, f.skip, out, reply_at);
                if f.close {
                    out.append(&mut self.held);
                    log::debug!("closing binary connection: {:?} (opcode {:#04x})", f.status, f.header.opcode);
                    return Step::Close;
                }
            }
        }
        Step::Next
    }
}

/// Removes the key of a store refused as too large, decoding a base64 one first (a key that
/// does not decode names no item).
fn unlink(key: &[u8], base64: bool, ctx: &Ctx<'_>) {
    let key = if base64 { MetaKey::base64(MetaCmd::Set, key) } else { MetaKey::plain(key) };
    if let Ok(key) = key.key() {
        let _ = ctx.shared.cache.delete(key);
    }
}

/// The `<bytes>` of the authenticating `set`, read as memcached's `safe_strtoul`: digits, then
/// the token's end or a space character (the line's `\r`).
fn auth_size(tok: &[u8]) -> Option<usize> {
    let digits = tok.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = &tok[digits..];
    if digits == 0 || !(rest.is_empty() || rest[0].is_ascii_whitespace() || rest[0] == 0x0b) {
        return None;
    }
    std::str::from_utf8(&tok[..digits]).ok()?.parse::<u32>().ok().map(|n| n as usize)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::auth::{UserFile, Users};
    use crate::config::{Protocol, Settings};
    use crate::state::Shared;

    fn shared(text: bool) -> Shared {
        let cache = segcache_core::Builder::new().heap_size(4 << 20).segment_size(64 << 10).build_shared().unwrap();
        let users = Some(Arc::new(UserFile::fixed(Users::parse(b"alice:secret\nbob:hunter2\n").unwrap())));
        let settings = match text {
            true => Settings {
                auth_file: Some("/f".into()),
                protocol: Protocol::Ascii,
                users,
                threads: 1,
                ..Settings::default()
            },
            false => Settings { sasl: true, protocol: Protocol::Binary, users, threads: 1, ..Settings::default() },
        };
        Shared::new(cache, settings)
    }

    /// Feeds `input` cut at `cut` (as two reads), returns the replies and whether it closed.
    fn feed(shared: &Shared, input: &[u8], cut: usize) -> (Vec<u8>, bool) {
        let ctx = Ctx::new(shared, 0);
        let mut s = Session::new();
        let mut out = Vec::new();
        let mut buf = input[..cut].to_vec();
        let mut rest = &input[cut..];
        loop {
            let p = s.process(&buf, &mut out, &ctx);
            if p.close {
                return (out, true);
            }
            buf.drain(..p.consumed);
            if rest.is_empty() {
                return (out, false);
            }
            buf.extend_from_slice(rest);
            rest = &[];
        }
    }

    #[test]
    fn text_auth_at_any_cut() {
        let sh = shared(true);
        let cases: &[(&[u8], &[u8])] = &[
            (b"get k\r\n", b"CLIENT_ERROR unauthenticated\r\n"),
            (
                b"set a 0 0 11\r\nalice wrong\r\nget k\r\n",
                b"CLIENT_ERROR authentication failure\r\nCLIENT_ERROR unauthenticated\r\n",
            ),
            (b"set a 0 0 12\r\nalice secret\r\nget k\r\n", b"STORED\r\nEND\r\n"),
            (
                b"set a 0 0 12\r\nalice secret\r\nset k 0 0 1\r\nv\r\nget k\r\n",
                b"STORED\r\nSTORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
            ),
            (b"set a 0 0 5\r\nalice\r\n", b"CLIENT_ERROR bad authentication token format\r\n"),
            (b"set a 0 0 1\r\nab\r\n", b"CLIENT_ERROR bad command line termination\r\n"),
            (b"set a 0 0 99999\r\n", b"CLIENT_ERROR auth token too long\r\n"),
            (b"set a 0 0 -1\r\n", b"CLIENT_ERROR unauthenticated\r\n"),
        ];
        for &(input, want) in cases {
            for cut in 0..=input.len() {
                let (out, closed) = feed(&sh, input, cut);
                assert_eq!(out, want, "{:?} cut at {cut}", String::from_utf8_lossy(input));
                assert!(!closed);
            }
        }
        let t = sh.totals();
        assert!(t.auth_cmds > 0 && t.auth_errors > 0 && t.auth_errors < t.auth_cmds);
        let (out, closed) = feed(&sh, &[b'x'; 3000], 3000);
        assert!(out.is_empty() && closed);
    }

    /// A server without authentication and with a 1 KiB item limit.
    fn plain() -> Shared {
        let cache = segcache_core::Builder::new().heap_size(4 << 20).segment_size(64 << 10).build_shared().unwrap();
        Shared::new(cache, Settings { threads: 1, max_item_size: 1024, ..Settings::default() })
    }

    /// Feeds `input` `piece` bytes at a time; returns the replies as they were after each piece.
    fn trickle(shared: &Shared, s: &mut Session, input: &[u8], piece: usize) -> Vec<Vec<u8>> {
        let ctx = Ctx::new(shared, 0);
        let (mut buf, mut out, mut seen) = (Vec::new(), Vec::new(), Vec::new());
        for chunk in input.chunks(piece) {
            buf.extend_from_slice(chunk);
            let p = s.process(&buf, &mut out, &ctx);
            assert!(!p.close);
            buf.drain(..p.consumed);
            seen.push(out.clone());
        }
        seen
    }

    #[test]
    fn a_refused_value_is_answered_after_its_last_byte() {
        let sh = plain();
        let value = vec![b'v'; 5000];
        let store = |head: &[u8]| [head, &value[..], b"\r\n"].concat();
        let requests = [
            (store(b"set k 0 0 5000\r\n"), &b"set n 0 0 1\r\nx\r\n"[..], &b"STORED\r\n"[..]),
            (store(b"append k 0 0 5000 noreply\r\n"), b"mn\r\n", b"MN\r\n"),
            // As memcached: a quiet `ms` is answered its refusal all the same.
            (store(b"ms k 5000 q\r\n"), b"mn\r\n", b"MN\r\n"),
            (binary::request(op::SET, b"k", &[0; 8], &value, 7, 0), &req(op::NOOP, b"", b"")[..], &[][..]),
        ];
        for (i, (request, next, next_reply)) in requests.iter().enumerate() {
            for piece in [1, 7, 1000, 4999, request.len()] {
                let mut s = Session::new();
                let seen = trickle(&sh, &mut s, request, piece);
                let (last, before) = seen.split_last().unwrap();
                assert!(
                    before.iter().all(|o| o.is_empty()),
                    "request {i}, pieces of {piece}: a reply before the value"
                );
                assert!(s.at_boundary());
                let more = trickle(&sh, &mut s, next, next.len()).pop().unwrap();
                match i {
                    0 | 2 => assert_eq!(last, crate::protocol::reply::TOO_LARGE, "request {i}"),
                    1 => assert!(last.is_empty(), "noreply"),
                    _ => {
                        assert_eq!((status(last), &last[24..]), (0x03, &b"Too large."[..]), "pieces of {piece}");
                        assert_eq!((status(&more), more.len()), (0, 24));
                        continue;
                    }
                }
                assert_eq!(more, *next_reply, "request {i}");
            }
        }
    }

    fn req(opcode: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
        binary::request(opcode, key, &[], value, 7, 0)
    }

    fn status(resp: &[u8]) -> u16 {
        u16::from_be_bytes([resp[6], resp[7]])
    }

    #[test]
    fn sasl_plain() {
        let sh = shared(false);
        // Before authentication: an auth error, then closed.
        let (out, closed) = feed(&sh, &req(op::GET, b"k", b""), 24);
        assert!(closed && status(&out) == 0x20 && out.ends_with(b"Auth failure."));
        let (out, closed) = feed(&sh, &req(op::VERSION, b"", b""), 24);
        assert!(!closed && status(&out) == 0);
        let (out, _) = feed(&sh, &req(op::SASL_LIST_MECHS, b"", b""), 24);
        assert!(status(&out) == 0 && out.ends_with(b"PLAIN"));
        let mut good = req(op::SASL_AUTH, b"PLAIN", b"\0alice\0secret");
        good.extend(req(op::GET, b"k", b""));
        for cut in 0..=good.len() {
            let (out, closed) = feed(&sh, &good, cut);
            assert!(!closed, "cut {cut}");
            assert_eq!(&out[24..37], b"Authenticated");
            assert_eq!(status(&out[37..]), 0x01, "a miss, cut {cut}");
        }
        let mut bad = req(op::SASL_AUTH, b"PLAIN", b"\0alice\0nope");
        bad.extend(req(op::NOOP, b"", b""));
        let (out, closed) = feed(&sh, &bad, bad.len());
        assert!(closed && status(&out) == 0x20 && status(&out[37..]) == 0x20);
        let mut step = req(op::SASL_AUTH, b"PLAIN", b"");
        step.extend(req(op::SASL_STEP, b"PLAIN", b"\0bob\0hunter2"));
        step.extend(req(op::NOOP, b"", b""));
        let (out, closed) = feed(&sh, &step, step.len());
        assert!(!closed && status(&out) == 0x21 && status(&out[24..]) == 0 && status(&out[24 + 37..]) == 0);
    }
}
