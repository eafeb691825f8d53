//! The prefill phase: every key set once, closed loop, as fast as the server takes them,
//! so a measured step starts against a warm cache.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::protocol::{parse_reply, ReqKind};
use crate::workload::{Generator, Workload};

/// Sets sent before their replies are read, per connection.
const BATCH: usize = 128;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PrefillResult {
    pub keys: u64,
    pub stored: u64,
    /// NOT_STORED or error replies.
    pub rejected: u64,
    pub seconds: f64,
}

/// Sets keys `0..wl.keys` once over `conns` connections (one thread each).
pub fn prefill(addr: SocketAddr, wl: &Workload, conns: usize, seed: u64) -> Result<PrefillResult> {
    wl.validate()?;
    let conns = conns.clamp(1, 64) as u64;
    let start = Instant::now();
    let handles: Vec<_> = (0..conns)
        .map(|t| {
            let wl = wl.clone();
            std::thread::spawn(move || fill_part(addr, &wl, t, conns, seed.wrapping_add(t)))
        })
        .collect();
    let mut total = PrefillResult { keys: wl.keys, ..Default::default() };
    for h in handles {
        let (stored, rejected) = h.join().map_err(|_| anyhow::anyhow!("prefill thread panicked"))??;
        total.stored += stored;
        total.rejected += rejected;
    }
    total.seconds = start.elapsed().as_secs_f64();
    Ok(total)
}

/// Sets this thread's share of the keys (every n-th, from the top) in pipelined batches;
/// returns (stored, rejected). Keys go from the highest index down, so when the key space is
/// larger than the server (the Zipf workload) the hottest keys (lowest indices, Zipf rank 1)
/// are written last, as a steady-state cache would hold them.
fn fill_part(addr: SocketAddr, wl: &Workload, t: u64, n: u64, seed: u64) -> Result<(u64, u64)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("prefill: cannot connect to {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut gen = Generator::new(wl, seed)?;
    let mut out = Vec::with_capacity(BATCH * (wl.value_max + 64));
    let mut rbuf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut scratch = vec![0u8; 64 * 1024];
    let (mut stored, mut rejected) = (0u64, 0u64);
    // This thread's keys are t, t+n, t+2n, ... taken in reverse.
    let mine = if t < wl.keys { (wl.keys - 1 - t) / n + 1 } else { 0 };
    let mut left = mine;
    while left > 0 {
        out.clear();
        let mut batch = 0;
        while batch < BATCH && left > 0 {
            left -= 1;
            let idx = t + left * n;
            let len = gen.draw_value_len();
            gen.encode_set(&mut out, idx, len);
            batch += 1;
        }
        s.write_all(&out).context("prefill: write failed")?;
        let mut got = 0;
        while got < batch {
            match parse_reply(&rbuf, ReqKind::Set) {
                Ok(Some(r)) => {
                    rbuf.drain(..r.consumed);
                    got += 1;
                    if r.error || r.misses > 0 {
                        rejected += 1;
                    } else {
                        stored += 1;
                    }
                }
                Ok(None) => {
                    let k = s.read(&mut scratch).context("prefill: read failed")?;
                    if k == 0 {
                        bail!("prefill: server closed the connection");
                    }
                    rbuf.extend_from_slice(&scratch[..k]);
                }
                Err(e) => bail!("prefill: {e}"),
            }
        }
    }
    Ok((stored, rejected))
}
