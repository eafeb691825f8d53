//! Fuzzes the memcache request parsers (text and binary) and the whole protocol state machine:
//! any bytes, fed in two pieces at any split, must never panic, never consume more than was
//! given, and never produce a reply that is not a whole line (text) or whole responses (binary).
#![no_main]

use std::sync::OnceLock;

use segcache_server::protocol::{binary, parse, Limits, Parse};
use segcache_server::{Ctx, Session, Settings, Shared};

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let cache =
            segcache_core::Builder::new().heap_size(8 << 20).segment_size(1 << 20).build_shared().expect("small cache");
        let settings = Settings { max_item_size: 4096, threads: 1, ..Settings::default() };
        Shared::new(cache, settings)
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_item_size: 4096, max_response: 1 << 20 };
    match parse(data, &limits) {
        Parse::Done(_, used) => assert!(used <= data.len()),
        Parse::Incomplete | Parse::Fail(_) => {}
    }
    match binary::parse(data, &limits) {
        // A request's length may exceed what was given only by bytes it does not use.
        binary::Parse::Done(req, used) => assert!(used == req.header.total_len()),
        binary::Parse::Fail(f) => assert!(f.status.is_some() || f.close),
        binary::Parse::Incomplete => {}
    }
    let Some((&cut, data)) = data.split_first() else { return };
    let cut = usize::from(cut) % (data.len() + 1);
    let shared = shared();
    let ctx = Ctx::new(shared, 0);
    let mut session = Session::new();
    let mut out = Vec::new();
    let mut pending = data[..cut].to_vec();
    let p = session.process(&pending, &mut out, &ctx);
    assert!(p.consumed <= pending.len());
    if p.close {
        return;
    }
    pending.drain(..p.consumed);
    pending.extend_from_slice(&data[cut..]);
    let p = session.process(&pending, &mut out, &ctx);
    assert!(p.consumed <= pending.len());
    if session.is_binary() {
        assert!(whole_responses(&out));
    } else {
        assert!(out.is_empty() || out.ends_with(b"\r\n") || p.close);
    }
});

/// Whether `out` is a run of whole binary responses.
fn whole_responses(mut out: &[u8]) -> bool {
    while !out.is_empty() {
        if out.len() < binary::HEADER_LEN || out[0] != binary::RESPONSE_MAGIC {
            return false;
        }
        let body = u32::from_be_bytes([out[8], out[9], out[10], out[11]]) as usize;
        let Some(rest) = out.get(binary::HEADER_LEN + body..) else { return false };
        out = rest;
    }
    true
}
