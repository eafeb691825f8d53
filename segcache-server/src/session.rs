//! One connection's protocol state, independent of sockets: bytes in, replies out. The workers
//! drive it from their event loops; the tests and the fuzz target drive it directly.

use crate::exec::{execute, Flow};
use crate::protocol::{parse, FailKind, Parse};
use crate::state::Ctx;

/// Stop taking requests from a pipeline once this much output waits to be sent, so that a
/// client that writes without reading cannot grow the buffer without bound: the output buffer
/// then holds less than this plus one request's reply.
pub const OUT_HIGH_WATER: usize = 256 << 10;

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

/// The per-connection state that outlives one read: bytes still to drop from a rejected data
/// block.
#[derive(Debug, Default)]
pub struct Session {
    swallow: usize,
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// Whether the session is between requests (no data block still being dropped).
    pub fn at_boundary(&self) -> bool {
        self.swallow == 0
    }

    /// Runs every complete request at the start of `input`, appending replies to `out`, until
    /// `out` holds `OUT_HIGH_WATER` (256 KiB) bytes.
    pub fn process(&mut self, input: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Progress {
        self.process_within(input, out, ctx, Budget::UNLIMITED)
    }

    /// As [`Session::process`], but returns once `budget` is spent (after at least one request).
    pub fn process_within(&mut self, input: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>, budget: Budget) -> Progress {
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
            match parse(&input[pos..], &ctx.shared.limits) {
                Parse::Done(req, n) => {
                    pos += n;
                    if execute(req, out, ctx) == Flow::Close {
                        return Progress { consumed: pos, close: true, requests };
                    }
                }
                Parse::Incomplete => {
                    requests -= 1;
                    break;
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
                    let avail = input.len() - pos;
                    if f.skip <= avail {
                        pos += f.skip;
                    } else {
                        pos = input.len();
                        self.swallow = f.skip - avail;
                    }
                    if f.kind.closes() {
                        log::debug!("closing connection: {:?}", f.kind);
                        return Progress { consumed: pos, close: true, requests };
                    }
                }
            }
        }
        Progress { consumed: pos, close: false, requests }
    }
}
