//! Processes sharing one cache file (`Builder::multi_process`) against threads sharing one
//! `SharedCache`.
//!
//! Throughput: `--workers` workers (2 by default), each running `--ops` operations of a
//! pre-generated stream over the same prefilled key space, value size and heap as the `threads`
//! benchmark (1M items, 16-byte keys, 64-byte values, 256 MiB heap), in four setups:
//! - threads on an anonymous `SharedCache` (what `threads` measures);
//! - threads on a file-backed `SharedCache` in `--dir` (the same file settings, one process);
//! - processes on a `multi_process` file in `--dir`, created by `fork()` after the parent opened
//!   and filled it (pre-fork servers): each child joins at `check_fork()`;
//! - processes that each open the file by path (spawn style: this binary run again), while the
//!   parent keeps it open.
//!
//! The setups take turns within each repetition; each cell is the best of `--reps` (interference
//! only lowers a figure). A cell's Mops/s is the sum over workers of each worker's operations
//! divided by its own time from a common start, as in `threads`. Ratios processes / threads are
//! printed in the same table.
//!
//! Memory: the sum of `Pss` (`/proc/PID/smaps_rollup`, which counts a page that k processes map
//! 1/k in each) over N processes that opened the filled file by path and read every item, against
//! one such process alone and against N processes that each fill a private anonymous cache.

use std::hint::black_box;
use std::io::{Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::Instant;

use clap::Parser;
use segcache_core::SharedCache;

use segcache_engine_benches::keys::{format_key, Key, VALUE};
use segcache_engine_benches::mem::{mib, smaps_rollup, Rollup};
use segcache_engine_benches::store::{ours_builder, SharedStore, Sizing};
use segcache_engine_benches::workload::{ops, KeyDist, SET_BIT};

#[derive(Parser, Debug, Clone)]
#[command(about = "Processes sharing one cache file against threads sharing one SharedCache")]
struct Args {
    /// Workers (threads or processes) per run.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Items stored before timing (all keys exist; the key space is these items).
    #[arg(long, default_value_t = 1_000_000)]
    items: usize,
    /// Operations each worker runs per run.
    #[arg(long, default_value_t = 4_000_000)]
    ops: u64,
    /// Pre-generated operations per worker (cycled).
    #[arg(long, default_value_t = 1 << 20)]
    stream_len: usize,
    /// Runs per cell; the best is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Only the workloads whose set percentage is in this list (0, 50); all when left out.
    #[arg(long, value_delimiter = ',')]
    set_pct: Vec<u32>,
    /// Folder of the cache files (a tmpfs: a cache file shared by processes belongs in memory).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Shards other than the default (exploration).
    #[arg(long)]
    shards: Option<usize>,
    /// Leave workers unpinned. By default worker i runs on core i (modulo the cores), threads
    /// and processes alike.
    #[arg(long = "no-pin", action = clap::ArgAction::SetFalse)]
    pin: bool,
    /// Skip the spawn-style processes (each opens the file by path).
    #[arg(long = "no-spawn", action = clap::ArgAction::SetFalse)]
    spawn: bool,
    /// Skip the memory table.
    #[arg(long = "no-memory", action = clap::ArgAction::SetFalse)]
    memory: bool,
    /// Skip the throughput tables (memory only: e.g. more processes than cores).
    #[arg(long = "no-throughput", action = clap::ArgAction::SetFalse)]
    throughput: bool,
    /// Internal: this process is a worker of the given role, driven over stdin/stdout.
    #[arg(long, value_enum, hide = true)]
    child: Option<Role>,
    #[arg(long, hide = true, default_value_t = 0)]
    child_index: usize,
    #[arg(long, hide = true, default_value_t = 0)]
    child_workload: usize,
    #[arg(long, hide = true)]
    child_path: Option<PathBuf>,
}

/// What a spawned worker process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Role {
    /// Opens the shared file by path, runs its stream when told, reports.
    Run,
    /// Opens the shared file by path, fills it unless it holds every item, and reads every item,
    /// then waits to be measured.
    MemShared,
    /// Fills a private anonymous cache, then waits to be measured.
    MemPrivate,
    /// Builds no cache (the process's own footprint), then waits to be measured.
    MemNone,
}

const WORKLOADS: [(&str, KeyDist, u32); 3] = [
    ("read-only, uniform", KeyDist::Uniform, 0),
    ("read-only, Zipf 0.99", KeyDist::Zipf(0.99), 0),
    ("50:50 get:set, Zipf 0.99", KeyDist::Zipf(0.99), 50),
];

/// One operation with its key inline (as in `threads`).
#[derive(Clone, Copy)]
struct Op {
    key: Key,
    set: bool,
}

/// Worker `t`'s stream of workload `w`: the same in every setup and in a spawned child.
fn stream(a: &Args, w: usize, t: usize) -> Vec<Op> {
    let (_, dist, set_pct) = WORKLOADS[w];
    ops(a.stream_len, a.items, dist, set_pct, (w * 1000 + t) as u64 + 11)
        .into_iter()
        .map(|o| {
            let mut key = Key::default();
            format_key(u64::from(o & !SET_BIT), &mut key);
            Op { key, set: o & SET_BIT != 0 }
        })
        .collect()
}

/// One worker's outcome: operations, get hits, its time.
#[derive(Clone, Copy, Debug, Default)]
struct Res {
    ops: u64,
    hits: u64,
    nanos: u64,
}

impl Res {
    fn to_bytes(self) -> [u8; 24] {
        let mut b = [0; 24];
        b[..8].copy_from_slice(&self.ops.to_le_bytes());
        b[8..16].copy_from_slice(&self.hits.to_le_bytes());
        b[16..].copy_from_slice(&self.nanos.to_le_bytes());
        b
    }
    fn from_bytes(b: &[u8; 24]) -> Res {
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Res { ops: word(0), hits: word(8), nanos: word(16) }
    }
}

/// Runs `total` operations of `ops` (cycled).
fn worker(c: &SharedCache, ops: &[Op], total: u64) -> Res {
    let start = Instant::now();
    let (mut n, mut hits, mut acc) = (0u64, 0u64, 0usize);
    while n < total {
        let take = (total - n).min(ops.len() as u64) as usize;
        for op in &ops[..take] {
            if op.set {
                SharedStore::set(c, &op.key, &VALUE);
            } else if let Some(v) = SharedStore::get(c, &op.key) {
                hits += 1;
                acc = acc.wrapping_add(v);
            }
        }
        n += take as u64;
    }
    black_box(acc);
    Res { ops: n, hits, nanos: start.elapsed().as_nanos() as u64 }
}

/// Pins the calling thread to core `t` (modulo the cores) when `pin` is set.
fn pin_to(pin: bool, t: usize) {
    if pin {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        if !cores.is_empty() {
            core_affinity::set_for_current(cores[t % cores.len()]);
        }
    }
}

/// Result of one cell: Mops/s and the hit share of the gets.
#[derive(Clone, Copy, Default, Debug)]
struct Cell {
    mops: f64,
    hit_ratio: f64,
}

fn summarise(r: &[Res], set_pct: u32) -> Cell {
    let mops = r.iter().map(|x| x.ops as f64 / (x.nanos.max(1) as f64 / 1e9) / 1e6).sum();
    let ops: u64 = r.iter().map(|x| x.ops).sum();
    let gets = ops as f64 * f64::from(100 - set_pct) / 100.0;
    let hits: u64 = r.iter().map(|x| x.hits).sum();
    Cell { mops, hit_ratio: hits as f64 / gets.max(1.0) }
}

fn run_threads(c: &SharedCache, streams: &[Vec<Op>], a: &Args) -> Vec<Res> {
    let barrier = Barrier::new(a.workers);
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..a.workers)
            .map(|t| {
                let (b, s) = (&barrier, &streams[t]);
                sc.spawn(move || {
                    pin_to(a.pin, t);
                    b.wait();
                    worker(c, s, a.ops)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("worker thread")).collect()
    })
}

/// A worker process, driven over two pipes: it sends `R` once ready, runs when it reads a byte,
/// then sends its [`Res`] (24 bytes) and exits.
struct Peer {
    pid: u32,
    up: Box<dyn Read>,
    down: Box<dyn Write>,
    /// A spawned child (waited for through std), or None for a fork()ed one (waitpid).
    spawned: Option<std::process::Child>,
}

impl Peer {
    fn ready(&mut self) {
        let mut b = [0u8; 1];
        self.up
            .read_exact(&mut b)
            .unwrap_or_else(|e| panic!("worker process {} died before it was ready: {e}", self.pid));
        assert_eq!(&b, b"R", "worker process {}: bad handshake", self.pid);
    }
    fn go(&mut self) {
        self.down.write_all(b"G").and_then(|()| self.down.flush()).expect("start a worker process");
    }
    fn result(&mut self) -> Res {
        let mut b = [0u8; 24];
        self.up.read_exact(&mut b).unwrap_or_else(|e| panic!("worker process {} died while running: {e}", self.pid));
        Res::from_bytes(&b)
    }
    /// Waits for the process to exit; panics unless it exited with status 0.
    fn finish(self) {
        let Peer { pid, up, down, spawned } = self;
        drop((up, down));
        match spawned {
            Some(mut c) => {
                let st = c.wait().expect("wait for a worker process");
                assert!(st.success(), "worker process {pid} failed: {st}");
            }
            None => {
                let mut status = 0;
                // SAFETY: `pid` is a child of this process that nothing else waits for; `status`
                // is a valid out-pointer.
                let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
                assert_eq!(rc, pid as libc::pid_t, "waitpid {pid}");
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "worker process {pid} failed: wait status {status}"
                );
            }
        }
    }
}

/// Threads of this process, from `/proc/self/status` (1 where it cannot be read).
fn own_threads() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find_map(|l| l.strip_prefix("Threads:"));
    line.and_then(|n| n.trim().parse().ok()).unwrap_or(1)
}

/// Forks worker `t`, which joins `cache` (the parent's handle, copied by `fork()`), runs
/// `stream`, leaves the cache and exits.
fn fork_worker(cache: &mut Option<SharedCache>, t: usize, stream: &[Op], a: &Args) -> Peer {
    assert_eq!(own_threads(), 1, "fork() from a process with other threads running");
    let (up_r, mut up_w) = std::io::pipe().expect("pipe");
    let (mut down_r, down_w) = std::io::pipe().expect("pipe");
    // SAFETY: this process runs one thread (checked above: the threads of earlier runs were
    // joined), so the child may run any code; it never returns from here, it leaves by `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        drop((up_r, down_w));
        let body = AssertUnwindSafe(|| {
            let c = cache.take().expect("the parent's handle");
            c.check_fork().expect("a fork()ed child joins the shared cache");
            pin_to(a.pin, t);
            up_w.write_all(b"R").expect("report ready");
            let mut b = [0u8; 1];
            down_r.read_exact(&mut b).expect("wait for the start");
            let r = worker(&c, stream, a.ops);
            drop(c);
            up_w.write_all(&r.to_bytes()).expect("report the result");
        });
        let code = if catch_unwind(body).is_ok() { 0 } else { 101 };
        // SAFETY: ends the child at once: the parent's other state copied by fork() (its
        // buffers, its caches' handles, the guards that remove the cache files) must not be
        // flushed or dropped a second time here.
        unsafe { libc::_exit(code) }
    }
    Peer { pid: pid as u32, up: Box::new(up_r), down: Box::new(down_w), spawned: None }
}

/// This binary again, as a worker of `role` on the file at `path`, talking over stdin/stdout.
fn spawn_worker(a: &Args, role: Role, t: usize, w: usize, path: &Path) -> Peer {
    let exe = std::env::current_exe().expect("this executable");
    let mut cmd = Command::new(exe);
    cmd.arg("--child")
        .arg(clap::ValueEnum::to_possible_value(&role).expect("role name").get_name())
        .args(["--child-index", &t.to_string(), "--child-workload", &w.to_string()])
        .arg("--child-path")
        .arg(path)
        .args(["--items", &a.items.to_string(), "--ops", &a.ops.to_string()])
        .args(["--stream-len", &a.stream_len.to_string()]);
    if let Some(s) = a.shards {
        cmd.args(["--shards", &s.to_string()]);
    }
    if !a.pin {
        cmd.arg("--no-pin");
    }
    let mut c = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn a worker process");
    let up = c.stdout.take().expect("child stdout");
    let down = c.stdin.take().expect("child stdin");
    Peer { pid: c.id(), up: Box::new(up), down: Box::new(down), spawned: Some(c) }
}

/// Starts every peer at once (after all are ready) and collects their results.
fn run_peers(mut peers: Vec<Peer>) -> Vec<Res> {
    peers.iter_mut().for_each(Peer::ready);
    peers.iter_mut().for_each(Peer::go);
    let r = peers.iter_mut().map(Peer::result).collect();
    peers.into_iter().for_each(Peer::finish);
    r
}

fn open_multi(a: &Args, path: &Path) -> SharedCache {
    builder(a).path(path).multi_process(true).build_shared().expect("open the multi_process file")
}

fn builder(a: &Args) -> segcache_core::Builder {
    let mut size = Sizing::holding(a.items);
    size.shards = a.shards;
    ours_builder(&size)
}

/// Sets every item, then checks that every one reads back.
fn fill(name: &str, c: &SharedCache, items: usize) {
    let t = Instant::now();
    let mut k = Key::default();
    for i in 0..items as u64 {
        format_key(i, &mut k);
        assert!(SharedStore::set(c, &k, &VALUE), "{name}: set {i} refused");
    }
    let kept = read_all(c, items);
    eprintln!("{name}: {kept} of {items} items kept after fill ({:.1} s)", t.elapsed().as_secs_f64());
    assert_eq!(kept, items, "{name}: the cache must hold every item before it is timed");
}

/// Reads every item once; returns the hits.
fn read_all(c: &SharedCache, items: usize) -> usize {
    let mut k = Key::default();
    (0..items as u64)
        .filter(|&i| {
            format_key(i, &mut k);
            SharedStore::get(c, &k).is_some()
        })
        .count()
}

/// The spawned worker's side of the protocol.
fn child(a: &Args, role: Role) {
    let mut up = std::io::stdout().lock();
    let mut down = std::io::stdin().lock();
    let path = a.child_path.as_deref().expect("--child-path");
    let mut go = |up: &mut std::io::StdoutLock<'_>| {
        up.write_all(b"R").and_then(|()| up.flush()).expect("report ready");
        let mut b = [0u8; 1];
        down.read_exact(&mut b).expect("wait for the start");
    };
    let r = match role {
        Role::Run => {
            let s = stream(a, a.child_workload, a.child_index);
            let c = open_multi(a, path);
            pin_to(a.pin, a.child_index);
            go(&mut up);
            worker(&c, &s, a.ops)
        }
        Role::MemShared => {
            let c = open_multi(a, path);
            if read_all(&c, a.items) < a.items {
                fill("shared file", &c, a.items);
            }
            assert_eq!(read_all(&c, a.items), a.items, "every item in the shared file");
            go(&mut up);
            Res::default()
        }
        Role::MemPrivate => {
            let c = builder(a).build_shared().expect("a private cache");
            fill("private cache", &c, a.items);
            go(&mut up);
            Res::default()
        }
        Role::MemNone => {
            go(&mut up);
            Res::default()
        }
    };
    up.write_all(&r.to_bytes()).and_then(|()| up.flush()).expect("report the result");
}

/// The four setups, in the order they take turns.
const SETUPS: [&str; 4] = ["threads, anonymous heap", "threads, file heap", "processes, fork()", "processes, spawn"];

fn throughput(a: &Args, file: &Path, multi: &Path) -> Vec<(usize, [Option<Cell>; 4])> {
    let anon = builder(a).build_shared().expect("anonymous SharedCache");
    fill("threads, anonymous heap", &anon, a.items);
    let filed = builder(a).path(file).build_shared().expect("file-backed SharedCache");
    fill("threads, file heap", &filed, a.items);
    let mut shared = Some(open_multi(a, multi));
    fill("processes, multi_process file", shared.as_ref().expect("open"), a.items);

    let chosen = WORKLOADS.iter().enumerate().filter(|(_, w)| a.set_pct.is_empty() || a.set_pct.contains(&w.2));
    let mut rows = Vec::new();
    for (w, &(name, _, set_pct)) in chosen {
        let streams: Vec<Vec<Op>> = (0..a.workers).map(|t| stream(a, w, t)).collect();
        let mut best = [None::<Cell>; 4];
        for _ in 0..a.reps.max(1) {
            for (i, cell) in best.iter_mut().enumerate() {
                let r = match i {
                    0 => run_threads(&anon, &streams, a),
                    1 => run_threads(&filed, &streams, a),
                    2 => run_peers((0..a.workers).map(|t| fork_worker(&mut shared, t, &streams[t], a)).collect()),
                    _ if a.spawn => {
                        run_peers((0..a.workers).map(|t| spawn_worker(a, Role::Run, t, w, multi)).collect())
                    }
                    _ => continue,
                };
                let c = summarise(&r, set_pct);
                eprintln!(
                    "  {name:<26} {:<24} {} workers: {:7.2} Mops/s, hits {:.3}",
                    SETUPS[i], a.workers, c.mops, c.hit_ratio
                );
                if set_pct == 0 && c.hit_ratio < 0.999 {
                    eprintln!("  warning: {} missed items of a read-only workload", SETUPS[i]);
                }
                if cell.is_none_or(|b| c.mops > b.mops) {
                    *cell = Some(c);
                }
            }
        }
        rows.push((w, best));
    }
    rows
}

/// One row of the memory table: the processes' rollups and the file's pages in tmpfs.
struct MemRow {
    setup: &'static str,
    procs: Vec<Rollup>,
    file_bytes: Option<u64>,
}

/// Spawns `n` workers of `role` (all at once, or the first alone until it is ready), reads
/// their rollups once all are ready, then lets them exit.
fn measure(a: &Args, setup: &'static str, role: Role, n: usize, path: &Path, first_alone: bool) -> MemRow {
    let mut peers = Vec::new();
    if first_alone {
        peers.push(spawn_worker(a, role, 0, 0, path));
        peers[0].ready();
    }
    let more: Vec<Peer> = (peers.len()..n).map(|t| spawn_worker(a, role, t, 0, path)).collect();
    peers.extend(more);
    peers.iter_mut().skip(usize::from(first_alone)).for_each(Peer::ready);
    let procs = peers.iter().map(|p| smaps_rollup(p.pid).expect("read /proc/PID/smaps_rollup")).collect();
    let file_bytes = (role == Role::MemShared).then(|| file_pages(path));
    peers.iter_mut().for_each(Peer::go);
    peers.iter_mut().for_each(|p| {
        p.result();
    });
    peers.into_iter().for_each(Peer::finish);
    MemRow { setup, procs, file_bytes }
}

/// Bytes of the file's allocated pages (tmpfs: the memory it holds, mapped or not).
fn file_pages(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

fn memory(a: &Args, path: &Path) -> Vec<MemRow> {
    let n = a.workers;
    let _ = std::fs::remove_file(path);
    let mut rows = vec![measure(a, "no cache (the process alone)", Role::MemNone, 1, path, false)];
    rows.push(measure(a, "shared file, one process (fills it)", Role::MemShared, 1, path, false));
    std::fs::remove_file(path).expect("remove the memory run's file");
    rows.push(measure(a, "shared file (the first fills it, the others join)", Role::MemShared, n, path, true));
    rows.push(measure(a, "shared file reopened (the first verifies it)", Role::MemShared, n, path, true));
    rows.push(measure(a, "private anonymous cache, one process", Role::MemPrivate, 1, path, false));
    rows.push(measure(a, "private anonymous cache each", Role::MemPrivate, n, path, false));
    rows
}

fn ratio(x: Option<Cell>, y: Option<Cell>) -> String {
    match (x, y) {
        (Some(x), Some(y)) => format!("{:.2}x", x.mops / y.mops),
        _ => "-".into(),
    }
}

fn mops(c: Option<Cell>) -> String {
    c.map_or_else(|| "-".into(), |c| format!("{:.2}", c.mops))
}

/// Removes the file when dropped, so that an aborted run leaves no 256 MiB file in `/dev/shm`.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn main() {
    let a = Args::parse();
    if let Some(role) = a.child {
        child(&a, role);
        return;
    }
    assert!(a.workers >= 1, "--workers must be at least 1");
    let pid = std::process::id();
    let file = Removed(a.dir.join(format!("segcache-procs-{pid}.file")));
    let multi = Removed(a.dir.join(format!("segcache-procs-{pid}.shared")));
    let mem_file = Removed(a.dir.join(format!("segcache-procs-{pid}.memory")));
    let n = a.workers;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    eprintln!(
        "procs: {n} workers, {} items, {} ops each, files in {}, load average {}",
        a.items,
        a.ops,
        a.dir.display(),
        load.join(" ")
    );

    let rows = if a.throughput { throughput(&a, &file.0, &multi.0) } else { Vec::new() };
    drop((file, multi));
    let mem = if a.memory { memory(&a, &mem_file.0) } else { Vec::new() };

    if !rows.is_empty() {
        println!(
            "| workload, {n} workers: Mops/s | threads, anonymous heap | threads, file heap | processes, fork() | processes, spawn |\n\
             |---|---|---|---|---|"
        );
        for (w, c) in &rows {
            println!("| {} | {} | {} | {} | {} |", WORKLOADS[*w].0, mops(c[0]), mops(c[1]), mops(c[2]), mops(c[3]));
        }
        println!(
            "\n| workload, {n} workers: ratio | fork() / threads anonymous | fork() / threads file | spawn / threads anonymous | spawn / threads file |\n\
             |---|---|---|---|---|"
        );
        for (w, c) in &rows {
            let (f, t) = (WORKLOADS[*w].0, ratio);
            println!("| {f} | {} | {} | {} | {} |", t(c[2], c[0]), t(c[2], c[1]), t(c[3], c[0]), t(c[3], c[1]));
        }
        println!();
    }
    if !mem.is_empty() {
        let one_rss = mem[1].procs[0].rss;
        println!(
            "| memory, {} items | processes | sum of Rss MiB | sum of Pss MiB | file's pages in tmpfs MiB | Pss sum / Rss of one process on the shared file |\n|---|---|---|---|---|---|",
            a.items
        );
        for r in &mem {
            let rss: u64 = r.procs.iter().map(|p| p.rss).sum();
            let pss: u64 = r.procs.iter().map(|p| p.pss).sum();
            println!(
                "| {} | {} | {:.1} | {:.1} | {} | {:.2}x |",
                r.setup,
                r.procs.len(),
                mib(rss),
                mib(pss),
                r.file_bytes.map_or_else(|| "-".into(), |b| format!("{:.1}", mib(b))),
                pss as f64 / one_rss.max(1) as f64
            );
        }
    }
}
