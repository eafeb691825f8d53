//! One connection's protocol state, independent of sockets: bytes in, replies out. The workers
//! drive it from their event loops; the tests and the fuzz target drive it directly.

use crate::exec::{execute, Flow};
use crate::parse::{parse, FailKind, Parse};
use crate::state::Ctx;

/// Stop taking requests from a pipeline once this much output waits to be sent, so that a
/// client that writes without reading cannot grow the buffer without bound.
pub const OUT_HIGH_WATER: usize = 4 << 20;

/// What [`Session::process`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes used; the caller drops them and keeps the rest for the next call.
    pub consumed: usize,
    /// Close the connection once the output is sent.
    pub close: bool,
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

    /// Runs every complete request at the start of `input`, appending replies to `out`.
    pub fn process(&mut self, input: &[u8], out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Progress {
        let mut pos = 0;
        loop {
            if self.swallow > 0 {
                let n = self.swallow.min(input.len() - pos);
                pos += n;
                self.swallow -= n;
                if self.swallow > 0 {
                    break;
                }
            }
            if pos == input.len() || out.len() >= OUT_HIGH_WATER {
                break;
            }
            match parse(&input[pos..], &ctx.shared.limits) {
                Parse::Done(req, n) => {
                    pos += n;
                    if execute(req, out, ctx) == Flow::Close {
                        return Progress { consumed: pos, close: true };
                    }
                }
                Parse::Incomplete => break,
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
                        return Progress { consumed: pos, close: true };
                    }
                }
            }
        }
        Progress { consumed: pos, close: false }
    }
}
