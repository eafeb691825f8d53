//! `restart-bench`: warm-restart benchmarks of segcache's persistent heap, beside
//! memcached 1.6's restartable mode. Every subcommand runs in its own process so that "time from
//! process start" is honest; `compare` drives the others. See docs/restart.md.

mod clock;
mod compare;
mod data;
mod memcached;
mod seg;
mod steady;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "restart-bench",
    about = "segcache warm-restart benchmarks (graceful stop, kill -9) beside memcached -e"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Fill a file-backed cache until the heap is full, then close gracefully or wait to be killed.
    Fill(seg::FillArgs),
    /// Reopen the file: time to the first served hit, share of keys served, heap scan rate.
    Reopen(seg::ReopenArgs),
    /// Graceful and kill -9 restarts of segcache and memcached at each size, alternating.
    Compare(compare::CompareArgs),
    /// Steady-state get/set ns/op on a file-backed heap or anonymous memory.
    Steady(steady::SteadyArgs),
}

fn main() {
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Fill(a) => seg::fill(a),
        Cmd::Reopen(a) => seg::reopen(a),
        Cmd::Compare(a) => compare::compare(a),
        Cmd::Steady(a) => steady::steady(a),
    };
    if let Err(e) = r {
        eprintln!("restart-bench: error: {e:#}");
        std::process::exit(1);
    }
}
