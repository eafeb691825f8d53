//! Running requests: which handler runs each parsed request, for the text protocol (with its
//! meta commands) and the binary protocol.
//!
//! Below the dispatchers, one way: the handlers of each protocol (`text`, `meta`, `binary`) and
//! of the operator commands (`admin`), which share `engine` (the engine calls with memcached's
//! rules and counters), `watched` (what `watch` streams and `stats detail` see) and `expiry`
//! (memcached's exptime rules). No handler module imports another. `stats` replies are written
//! by `observe::report`.

mod admin;
mod binary;
mod engine;
mod expiry;
mod meta;
mod text;
mod watched;

pub use admin::dump_more;
pub use text::{GetStream, Retrieval};

use crate::observe::report::write_stats;
use crate::observe::stats::bump;
use crate::protocol::binary::{self as bin, put_error, put_response, Command, Status};
use crate::protocol::{reply, Request};
use crate::state::Ctx;
use admin::After;
use binary::put_ok;
use engine::flush_all;

/// What the connection does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// `quit`: close once the replies before it are sent.
    Close,
}

/// Runs one text or meta request, appending its reply (unless `noreply`) to `out`; a retrieval
/// whose reply reaches `out_high` bytes stops there and leaves the rest of its keys in `more`
/// (see [`Retrieval`]), for the caller to run once the client has read the reply so far.
pub fn execute_within(
    req: Request<'_>,
    out: &mut Vec<u8>,
    ctx: &Ctx<'_>,
    out_high: usize,
    more: &mut Option<Retrieval>,
) -> Flow {
    let mark = out.len();
    let noreply = match req {
        Request::Get { keys, cas } => {
            *more = text::retrieve(keys, cas, None, out, ctx, out_high);
            false
        }
        Request::Gat { exptime, keys, cas } => {
            let touch = expiry::Expiry::from_exptime(exptime, ctx.shared.cache.now());
            *more = text::retrieve(keys, cas, Some(touch), out, ctx, out_high);
            false
        }
        Request::Store { kind, key, flags, exptime, data, cas, noreply } => {
            text::store(kind, key, flags, exptime, data, cas, out, ctx);
            noreply
        }
        Request::Arith { incr, key, delta, noreply } => {
            text::arith(incr, key, delta, out, ctx);
            noreply
        }
        Request::Delete { key, noreply } => {
            text::delete(key, out, ctx);
            noreply
        }
        Request::Touch { key, exptime, noreply } => {
            text::touch_key(key, exptime, out, ctx);
            noreply
        }
        Request::FlushAll { noreply, .. } if !ctx.shared.settings.flush_enabled => {
            // -F: counted, as memcached does, and refused.
            bump(&ctx.stats.cmd_flush, 1);
            out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
            noreply
        }
        Request::FlushAll { delay, noreply } => {
            flush_all(delay, ctx);
            out.extend_from_slice(reply::OK);
            noreply
        }
        Request::Verbosity { level, noreply } => {
            text::verbosity(level, out, ctx);
            noreply
        }
        Request::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(reply::VERSION.as_bytes());
            out.extend_from_slice(reply::CRLF);
            false
        }
        Request::Admin(cmd) => {
            if admin::execute(cmd, out, ctx) == After::Close {
                return Flow::Close;
            }
            false
        }
        Request::Quit => return Flow::Close,
        Request::Stats { arg } => {
            if !write_stats(out, ctx, arg) {
                out.extend_from_slice(reply::ERROR);
            }
            false
        }
        Request::Meta { cmd, key, data, flags } => {
            bump(&ctx.stats.cmd_meta, 1);
            meta::execute(cmd, &key, data, &flags, out, ctx);
            false
        }
    };
    if noreply {
        out.truncate(mark);
    }
    Flow::Continue
}

/// Runs one binary request, appending its response (unless quiet) to `out`.
pub fn execute_binary(req: bin::Request<'_>, out: &mut Vec<u8>, ctx: &Ctx<'_>) -> Flow {
    let h = &req.header;
    let quiet = req.quiet;
    match req.cmd {
        Command::Get { key, exptime, with_key, with_value } => {
            binary::get(h, quiet, key, exptime, with_key, with_value, out, ctx)
        }
        Command::Store { kind, key, flags, exptime, value } => {
            binary::store(h, quiet, kind, key, flags, exptime, value, out, ctx)
        }
        Command::Delete { key } => binary::delete(h, quiet, key, out, ctx),
        Command::Arith { incr, key, delta, initial, exptime } => {
            binary::arith(h, quiet, incr, key, delta, initial, exptime, out, ctx)
        }
        Command::Flush { .. } if !ctx.shared.settings.flush_enabled => {
            // -F: memcached answers an auth error (quiet or not) and counts nothing.
            put_error(out, h, Status::AuthError);
        }
        Command::Flush { exptime } => {
            flush_all(i64::from(exptime), ctx);
            if !quiet {
                put_ok(out, h, 0);
            }
        }
        Command::Noop => put_ok(out, h, 0),
        Command::Version => {
            put_response(out, h.opcode, Status::Success, h.opaque, 0, &[], &[], reply::VERSION.as_bytes())
        }
        Command::Quit => {
            if !quiet {
                put_ok(out, h, 0);
            }
            return Flow::Close;
        }
        Command::Stat { group } => binary::stat(h, group, out, ctx),
        // The session runs the SASL exchange (its state is the connection's).
        Command::SaslList | Command::Sasl { .. } => put_error(out, h, Status::UnknownCommand),
    }
    Flow::Continue
}
