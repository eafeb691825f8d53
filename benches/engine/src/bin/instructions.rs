//! Instructions per operation of each library, counted by callgrind: get hit, get miss, set of a
//! present key. Unlike timings on a shared machine the counts repeat
//! exactly, and they say how far the processor can overlap consecutive operations: it keeps as
//! many in flight as its reorder buffer holds, so a get of fewer instructions starts the next
//! gets' memory misses sooner (see docs/benchmarks.md, "Get hits read in another order").
//!
//! `target/release/instructions` runs itself under `valgrind --tool=callgrind` once per library
//! and operation, counting only inside that operation's loop, and prints a table.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{Parser, ValueEnum};

use segcache_engine_benches::keys::{keys, touch, Key, VALUE};
use segcache_engine_benches::store::{with_cache, Lib, SharedStore, Sizing, Store, Visit};
use segcache_engine_benches::workload::shuffled;

#[derive(Parser, Debug)]
#[command(about = "Instructions per cache operation, counted by callgrind")]
struct Args {
    /// Libraries, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ours-single,ours,pelikan,quick-cache,moka,lru")]
    libs: Vec<Lib>,
    /// Items in the cache; each operation is counted over this many calls.
    #[arg(long, default_value_t = 20_000)]
    items: usize,
    /// The valgrind program.
    #[arg(long, default_value = "valgrind")]
    valgrind: PathBuf,
    /// Inner run (under callgrind): fill `--libs`' only library and run this operation.
    #[arg(long, value_enum, hide = true)]
    child: Option<Op>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Op {
    GetHit,
    GetMiss,
    Set,
}

impl Op {
    /// The name on the command line (`--child`), as clap spells it.
    fn arg(self) -> String {
        self.to_possible_value().expect("no skipped variants").get_name().to_string()
    }
}

/// The counted loops: callgrind collects only inside functions whose names match
/// `*measured_ops*`, so filling the cache is left out.
#[inline(never)]
fn measured_ops<S: Store>(s: &mut S, op: Op, ks: &[Key]) -> usize {
    let mut acc = 0usize;
    match op {
        Op::GetHit | Op::GetMiss => {
            for k in ks {
                acc += s.get(k).unwrap_or(0);
            }
        }
        Op::Set => {
            for k in ks {
                acc += usize::from(s.set(k, &VALUE));
            }
        }
    }
    acc
}

/// Fills the cache with `n` keys, then runs `op` over them in another order.
struct Child {
    op: Op,
    n: usize,
}

impl Child {
    fn run<S: Store>(self, mut s: S) {
        let all = keys(0, self.n);
        for i in shuffled(self.n, 4) {
            assert!(s.set(&all[i as usize], &VALUE), "the cache refused a key while filling");
        }
        s.settle();
        let mut ks: Vec<Key> = shuffled(self.n, 1).into_iter().map(|i| all[i as usize]).collect();
        if self.op == Op::GetMiss {
            for k in &mut ks {
                k[0] = b'm';
            }
        }
        let done = black_box(measured_ops(&mut s, self.op, &ks));
        // A hit returns a number from the value's bytes (`touch`), a miss nothing.
        match self.op {
            // Pelikan's table may refuse a few keys of a fill (see the engine bench's `fill`).
            Op::GetHit => assert!(done * 1000 >= touch(&VALUE) * ks.len() * 999, "gets missed"),
            Op::GetMiss => assert_eq!(done, 0, "a get of an absent key hit"),
            Op::Set => assert_eq!(done, ks.len(), "a store was refused"),
        }
    }
}

impl Visit for Child {
    type Out = ();
    fn shared<S: SharedStore + 'static>(self, _: Lib, cache: S) {
        self.run(&cache)
    }
    fn single(self, _: Lib, cache: segcache_core::Segcache) {
        self.run(cache)
    }
}

/// Instructions counted in the callgrind output file at `out` (its `totals:` line).
fn totals(out: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(out).map_err(|e| format!("{}: {e}", out.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("{}: no totals line", out.display()))
}

/// Instructions per operation of `op` on `lib`: this program again, under callgrind.
fn count(args: &Args, lib: Lib, op: Op) -> Result<f64, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::env::temp_dir().join(format!("instructions-{}-{}-{}.out", std::process::id(), lib.arg(), op.arg()));
    let status = Command::new(&args.valgrind)
        .args(["--tool=callgrind", "--toggle-collect=*measured_ops*"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&me)
        .args(["--libs", lib.arg(), "--child", &op.arg(), "--items", &args.items.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {}: {e}", args.valgrind.display()))?;
    let n = totals(&out);
    let _ = std::fs::remove_file(&out);
    if !status.success() {
        return Err(format!("{} {} under callgrind: {status}", lib.arg(), op.arg()));
    }
    Ok(n? as f64 / args.items as f64)
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let sizing = Sizing::holding(args.items);
    if let Some(op) = args.child {
        let [lib] = args.libs[..] else { return Err("an inner run takes one library".into()) };
        with_cache(lib, &sizing, Child { op, n: args.items });
        return Ok(());
    }
    println!("Instructions per operation, callgrind, {} items of 16-byte keys and 64-byte values\n", args.items);
    println!("| library | get hit | get miss | set (present key) |");
    println!("|---|---|---|---|");
    for &lib in &args.libs {
        let mut row = format!("| {} |", lib.name());
        for &op in Op::value_variants() {
            row.push_str(&format!(" {:.0} |", count(&args, lib, op)?));
        }
        println!("{row}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each library's counted loop does what its column says (the child run checks it: hits
    /// hit, misses miss, stores are accepted).
    #[test]
    fn every_loop_runs_its_operation() {
        for lib in Lib::ALL {
            for &op in Op::value_variants() {
                with_cache(lib, &Sizing::holding(1000), Child { op, n: 1000 });
            }
        }
    }

    #[test]
    fn reads_the_totals_line() {
        let dir = std::env::temp_dir().join(format!("instructions-test-{}", std::process::id()));
        std::fs::write(&dir, "events: Ir\nsummary: 12345\nfn=x\n1 2\ntotals: 12345\n").unwrap();
        assert_eq!(totals(&dir), Ok(12345));
        std::fs::write(&dir, "events: Ir\n").unwrap();
        assert!(totals(&dir).is_err());
        let _ = std::fs::remove_file(&dir);
    }
}
