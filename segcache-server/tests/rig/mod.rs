//! The rig the session tests share: a `Session` over a real engine with a manual clock, fed
//! bytes as a worker feeds it, without sockets.

// Each test crate uses the part of the rig it needs.
#![allow(dead_code)]

use std::sync::Arc;

use segcache_core::{Builder, ManualClock};
use segcache_server::{Ctx, Session, Settings, Shared};

/// The manual clock's start, Unix seconds.
pub const T0: u32 = 1_700_000_000;

pub struct Rig {
    pub shared: Shared,
    pub clock: Arc<ManualClock>,
    pub session: Session,
    /// Received and not yet used, as a worker's input buffer (`feed_in_pieces`).
    pub pending: Vec<u8>,
    /// The most `pending` held after a call.
    pub peak: usize,
    /// The session asked to close the connection.
    pub closed: bool,
}

impl Rig {
    /// A session over a cache of `heap` bytes in segments of `segment` bytes, serving with
    /// `settings`.
    pub fn with(heap: usize, segment: usize, settings: Settings) -> Rig {
        let clock = ManualClock::new(T0);
        let cache = Builder::new().heap_size(heap).segment_size(segment).clock(clock.clone()).build_shared().unwrap();
        Rig {
            shared: Shared::new(cache, settings),
            clock,
            session: Session::new(),
            pending: Vec::new(),
            peak: 0,
            closed: false,
        }
    }

    /// A small cache (4 MiB of 64 KiB segments) taking items up to `max_item` bytes, one thread.
    pub fn new(max_item: usize) -> Rig {
        Rig::with(4 << 20, 64 << 10, Settings { max_item_size: max_item, threads: 1, ..Settings::default() })
    }

    /// Feeds `input` in one piece: the output, whether the connection closes, the bytes used.
    pub fn feed(&mut self, input: &[u8]) -> (Vec<u8>, bool, usize) {
        let mut out = Vec::new();
        let ctx = Ctx::new(&self.shared, 0);
        let p = self.session.process(input, &mut out, &ctx);
        // A multi-get's reply past the high-water mark goes on as the worker sends it.
        while self.session.retrieving() {
            self.session.resume(&mut out, &ctx);
        }
        (out, p.close, p.consumed)
    }

    /// Feeds a complete exchange and returns the replies as text.
    pub fn run(&mut self, input: &str) -> String {
        let (out, _, used) = self.feed(input.as_bytes());
        assert_eq!(used, input.len(), "input not fully used: {input:?}");
        String::from_utf8(out).unwrap()
    }

    /// Feeds `input` in pieces of the sizes `chunks` cycles through, as a worker does: after
    /// each piece the session runs until it can use nothing more (the output's high-water mark
    /// makes it return early), the unused bytes kept for the next piece. Returns the replies.
    pub fn feed_in_pieces(&mut self, input: &[u8], chunks: &[usize]) -> Vec<u8> {
        let ctx = Ctx::new(&self.shared, 0);
        let (mut out, mut sent) = (Vec::new(), Vec::new());
        let mut at = 0;
        let mut i = 0;
        while at < input.len() && !self.closed {
            let n = chunks[i % chunks.len()].min(input.len() - at);
            i += 1;
            self.pending.extend_from_slice(&input[at..at + n]);
            at += n;
            self.peak = self.peak.max(self.pending.len());
            loop {
                let p = self.session.process(&self.pending, &mut out, &ctx);
                while self.session.retrieving() {
                    sent.append(&mut out);
                    self.session.resume(&mut out, &ctx);
                }
                sent.append(&mut out);
                self.pending.drain(..p.consumed);
                self.closed |= p.close;
                if p.close || p.consumed == 0 {
                    break;
                }
            }
        }
        sent
    }
}
