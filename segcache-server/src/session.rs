//! One connection's protocol state, independent of sockets: bytes in, replies out. The workers
//! drive it from their event loops; the tests and the fuzz target drive it directly.
//!
//! As memcached, a connection's first byte picks its protocol for good: the binary protocol's
//! request magic (`0x80`) makes it a binary connection, anything else a text (and meta) one.

use memchr::{memchr, memrchr};
use segcache_core::MAX_KEY_LEN;

use crate::exec::{execute, execute_binary, Flow, GetStream};
use crate::observe::Probe;
use crate::protocol::binary::{self, REQUEST_MAGIC};
use crate::protocol::{get_head, parse, FailKind, Parse, MAX_GET_LINE};
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
    mode: Mode,
    get: Option<GetStream>,
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// Whether the session is between requests (no data block still being dropped, no
    /// retrieval line still arriving).
    pub fn at_boundary(&self) -> bool {
        self.swallow == 0 && self.get.is_none()
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

    /// Runs (or rejects) the text or meta request at `input[*pos..]`.
    fn text_step(&mut self, input: &[u8], pos: &mut usize, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Step {
        if self.get.is_some() {
            return self.get_more(input, pos, out, ctx);
        }
        match parse(&input[*pos..], &ctx.shared.limits) {
            Parse::Done(req, n) => {
                let probe = Probe::text(&ctx.shared.observe, ctx.worker, &req, &input[*pos..*pos + n], out.len());
                *pos += n;
                let flow = execute(req, out, ctx);
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
                    crate::stats::bump(&ctx.stats.store_too_large, 1);
                }
                if let Some(key) = f.unlink {
                    let _ = ctx.shared.cache.delete(key);
                }
                if !f.noreply {
                    if let Some(reply) = f.kind.reply() {
                        out.extend_from_slice(reply);
                    }
                }
                self.skip(input, pos, f.skip);
                if f.kind.closes() {
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

    /// Runs (or rejects) the binary request at `input[*pos..]`.
    fn binary_step(&mut self, input: &[u8], pos: &mut usize, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Step {
        match binary::parse(&input[*pos..], &ctx.shared.limits) {
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
                    crate::stats::bump(&ctx.stats.store_too_large, 1);
                }
                if let Some(key) = f.unlink {
                    let _ = ctx.shared.cache.delete(key);
                }
                if let Some(status) = f.status {
                    binary::put_error(out, &f.header, status);
                }
                self.skip(input, pos, f.skip);
                if f.close {
                    log::debug!("closing binary connection: {:?} (opcode {:#04x})", f.status, f.header.opcode);
                    return Step::Close;
                }
            }
        }
        Step::Next
    }
}
