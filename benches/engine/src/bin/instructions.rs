//! Instructions per operation of each library, counted by callgrind: get hit, get miss, set of a
//! present key, set of a new key, delete, and insert of a new key into a full cache. Unlike timings on a shared machine the counts repeat
//! exactly, and they say how far the processor can overlap consecutive operations: it keeps as
//! many in flight as its reorder buffer holds, so a get of fewer instructions starts the next
//! gets' memory misses sooner (see docs/benchmarks.md, "Get hits read in another order").
//!
//! `target/release/instructions` runs itself under `valgrind --tool=callgrind` once per library
//! and operation, counting only inside that operation's loop, and prints a table. With
//! `--budget FILE` it also holds our counts to the budgets in FILE (`benches/engine/budget.txt`,
//! which `make test` checks): it fails when one exceeds its budget by more than 2%, and says
//! which budgets a change has beaten by as much, to be lowered. The peers' counts are printed
//! beside ours for context and never checked.
//!
//! Beside `ours` comes the floor of its layout (`Lib::Floor`, `SharedCache::floor_get`: the
//! hash, the chain's tags, the record's key and value, nothing else), for its reads only: how
//! far a get is from the least that the memory layout allows.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{Parser, ValueEnum};

use segcache_engine_benches::keys::{keys, touch, Key, VALUE};
use segcache_engine_benches::store::{pelikan_hash_power_at, with_cache, Lib, SharedStore, Sizing, Store, Visit};
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
    /// Check our counts against the budgets in this file (lines `<library> <operation>
    /// <instructions>`, `#` comments); the run fails when one is exceeded by more than 2%.
    #[arg(long)]
    budget: Option<PathBuf>,
    /// Inner run (under callgrind): fill `--libs`' only library and run this operation.
    #[arg(long, value_enum, hide = true)]
    child: Option<Op>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Op {
    GetHit,
    GetMiss,
    /// A store over a key the cache holds.
    SetPresent,
    /// A store of a key the cache does not hold, with room for it.
    SetNew,
    Delete,
    /// A store of a key never stored before, into a cache that is full: each makes room by
    /// evicting, as a cache does in its steady state.
    Insert,
}

impl Op {
    /// The cache for `n` keys and this operation: a new key needs room beside the ones the fill
    /// stored; inserts into a full cache need Pelikan's table (which does not chain) large
    /// enough for all that its heap holds, at least 80 bytes an item.
    fn sizing(self, n: usize) -> Sizing {
        let mut size = Sizing::holding(if self == Op::SetNew { 2 * n } else { n });
        if self == Op::Insert {
            size.pelikan_hash_power = Some(pelikan_hash_power_at(size.budget / 80, 0.25));
        }
        size
    }

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
        Op::SetPresent | Op::SetNew | Op::Insert => {
            for k in ks {
                acc += usize::from(s.set(k, &VALUE));
            }
        }
        Op::Delete => {
            for k in ks {
                acc += usize::from(s.delete(k));
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
        if self.op == Op::Insert {
            // Keys enough to fill any library's cache twice over: ours and Pelikan's hold
            // what fits in the heap, at least 80 bytes an item; the others `capacity` items.
            let size = self.op.sizing(self.n);
            let warm = (2 * size.budget / 80).max(2 * size.capacity);
            for k in keys(1 << 40, warm) {
                s.set(&k, &VALUE);
            }
        }
        s.settle();
        let mut ks: Vec<Key> = shuffled(self.n, 1).into_iter().map(|i| all[i as usize]).collect();
        // Keys the fill did not store (a first byte `keys` never writes).
        if matches!(self.op, Op::GetMiss | Op::SetNew | Op::Insert) {
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
            Op::SetPresent => assert_eq!(done, ks.len(), "a store was refused"),
            // (Pelikan's table, which does not chain, may refuse a few new keys.)
            Op::SetNew | Op::Insert => assert!(done * 1000 >= ks.len() * 999, "new keys refused"),
            // (Pelikan's fill may have missed a few, as for the hits.)
            Op::Delete => assert!(done * 1000 >= ks.len() * 999, "deletes missed"),
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

/// `libs`, with the floor after `ours` when `ours` is among them and the floor is not.
fn with_floor(libs: &[Lib]) -> Vec<Lib> {
    let mut out = libs.to_vec();
    if !libs.contains(&Lib::Floor) {
        if let Some(at) = libs.iter().position(|&l| l == Lib::Ours) {
            out.insert(at + 1, Lib::Floor);
        }
    }
    out
}

/// Whether `op` is counted on `lib`: the floor only reads (its stores are `ours`').
fn lib_runs(lib: Lib, op: Op) -> bool {
    lib != Lib::Floor || matches!(op, Op::GetHit | Op::GetMiss)
}

/// One budget: our count of `op` on `lib` must stay within 2% of `instructions`.
#[derive(Debug, PartialEq)]
struct Budget {
    lib: String,
    op: String,
    instructions: f64,
}

/// Reads a budget file: `<library> <operation> <instructions>` lines (names as on the command
/// line), blank lines and `#` comments ignored.
fn read_budgets(text: &str) -> Result<Vec<Budget>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = || format!("budget line {}: want `<library> <operation> <instructions>`: {line:?}", n + 1);
        let [lib, op, count] = line.split_whitespace().collect::<Vec<_>>()[..] else { return Err(bad()) };
        Lib::from_str(lib, false).map_err(|_| bad())?;
        Op::from_str(op, false).map_err(|_| bad())?;
        out.push(Budget { lib: lib.into(), op: op.into(), instructions: count.parse().map_err(|_| bad())? });
    }
    Ok(out)
}

/// Allowed above a budget: instruction counts repeat exactly on one build, but another compiler
/// or CPU may move them a little.
const SLACK: f64 = 0.02;

/// Holds `counts` (library, operation -> instructions per operation) to `budgets`: the lines
/// that fail (over budget by more than `SLACK`) and those a change beat by as much (whose budget
/// should come down with it).
fn check(budgets: &[Budget], counts: &[(String, String, f64)]) -> (Vec<String>, Vec<String>) {
    let (mut over, mut under) = (Vec::new(), Vec::new());
    for b in budgets {
        let Some(&(_, _, n)) = counts.iter().find(|(l, o, _)| *l == b.lib && *o == b.op) else { continue };
        let line = format!("{} on {}: {n:.0} instructions, budget {:.0}", b.op, b.lib, b.instructions);
        if n > b.instructions * (1.0 + SLACK) {
            over.push(format!("{line} (more than {:.0}% over)", SLACK * 100.0));
        } else if n < b.instructions * (1.0 - SLACK) {
            under.push(line);
        }
    }
    (over, under)
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    if let Some(op) = args.child {
        let [lib] = args.libs[..] else { return Err("an inner run takes one library".into()) };
        with_cache(lib, &op.sizing(args.items), Child { op, n: args.items });
        return Ok(());
    }
    let budgets = match &args.budget {
        Some(path) => read_budgets(&std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?)?,
        None => Vec::new(),
    };
    println!("Instructions per operation, callgrind, {} items of 16-byte keys and 64-byte values\n", args.items);
    println!("| library | get hit | get miss | set (present key) | set (new key) | delete | insert (full cache) |");
    println!("|---|---|---|---|---|---|---|");
    let mut counts = Vec::new();
    for lib in with_floor(&args.libs) {
        let mut row = format!("| {} |", lib.name());
        for &op in Op::value_variants() {
            if !lib_runs(lib, op) {
                row.push_str(" - |");
                continue;
            }
            let n = count(&args, lib, op)?;
            row.push_str(&format!(" {n:.0} |"));
            counts.push((lib.arg().to_string(), op.arg(), n));
        }
        println!("{row}");
    }
    let (over, under) = check(&budgets, &counts);
    for line in &under {
        println!("below its budget by more than {:.0}%: {line} (lower the budget)", SLACK * 100.0);
    }
    if !over.is_empty() {
        let file = args.budget.as_deref().unwrap_or(Path::new("")).display();
        eprintln!("over budget ({file}):\n  {}", over.join("\n  "));
        std::process::exit(1);
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
                with_cache(lib, &op.sizing(1000), Child { op, n: 1000 });
            }
        }
    }

    /// The floor follows `ours` and counts reads only; it reads back what `ours` stored.
    #[test]
    fn the_floor_runs_beside_ours_and_reads_only() {
        assert_eq!(
            with_floor(&[Lib::OursSingle, Lib::Ours, Lib::Lru]),
            [Lib::OursSingle, Lib::Ours, Lib::Floor, Lib::Lru]
        );
        assert_eq!(with_floor(&[Lib::OursSingle]), [Lib::OursSingle]);
        assert_eq!(with_floor(&[Lib::Ours, Lib::Floor]), [Lib::Ours, Lib::Floor]);
        let ops: Vec<Op> = Op::value_variants().iter().copied().filter(|&op| lib_runs(Lib::Floor, op)).collect();
        assert_eq!(ops, [Op::GetHit, Op::GetMiss]);
        for op in ops {
            with_cache(Lib::Floor, &op.sizing(1000), Child { op, n: 1000 });
        }
    }

    #[test]
    fn budgets_are_read_and_held_to_two_percent() {
        let text = "# ours\nours get-hit 500\n\nours-single delete 100 # single owner\n";
        let b = read_budgets(text).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!((b[1].lib.as_str(), b[1].op.as_str(), b[1].instructions), ("ours-single", "delete", 100.0));
        for bad in ["ours get-hit", "nobody get-hit 1", "ours fly 1", "ours get-hit many", "ours get-hit 1 2"] {
            assert!(read_budgets(bad).is_err(), "{bad}");
        }
        let run = |hit: f64, del: f64| {
            check(&b, &[("ours".into(), "get-hit".into(), hit), ("ours-single".into(), "delete".into(), del)])
        };
        assert_eq!(run(510.0, 100.0), (vec![], vec![]));
        let (over, under) = run(511.0, 97.0);
        assert_eq!(over, ["get-hit on ours: 511 instructions, budget 500 (more than 2% over)"]);
        assert_eq!(under, ["delete on ours-single: 97 instructions, budget 100"]);
        // Counts of operations without a budget (the peers') are never checked.
        assert_eq!(check(&b, &[("lru".into(), "get-hit".into(), 1e9)]), (vec![], vec![]));
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
