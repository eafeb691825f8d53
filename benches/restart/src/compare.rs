//! The driver: for each heap size and repetition, alternating, segcache after a graceful stop,
//! memcached after a graceful stop, segcache after kill -9, memcached after kill -9. Every start is
//! timed from just before the spawn of the process that serves.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::clock::{mono_ns, ms};
use crate::data::key;
use crate::memcached::{signal_and_wait, Conn, Memcached};

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Heap sizes (both engines), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "256MiB,1GiB", value_parser = crate::data::size_arg)]
    pub sizes: Vec<usize>,
    /// Folder for the files (tmpfs).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Repetitions of every case.
    #[arg(long, default_value_t = 1)]
    pub reps: usize,
    /// Pause between stop and restart (memcached refuses a restart within the second of its
    /// stop); applied to both engines.
    #[arg(long, default_value_t = 1100)]
    pub pause_ms: u64,
    /// memcached binary; `none` leaves memcached out.
    #[arg(long, default_value = "memcached")]
    pub memcached: String,
    #[arg(long, default_value_t = 21987)]
    pub port: u16,
}

/// One measured restart.
#[derive(Debug, Clone)]
struct Row {
    engine: &'static str,
    size: usize,
    stop: &'static str,
    rep: usize,
    keys: u64,
    retained: u64,
    served: u64,
    wrong: u64,
    first_ms: f64,
    open_ms: Option<f64>,
    scan_gib_s: Option<f64>,
    first_hit: bool,
}

pub fn compare(a: &CompareArgs) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let with_mc = a.memcached != "none";
    let mut rows = Vec::new();
    for &size in &a.sizes {
        for rep in 1..=a.reps {
            for graceful in [true, false] {
                let r = segcache_round(a, size, graceful, rep);
                // Its file goes whether the round worked or not.
                let _ = std::fs::remove_file(seg_file(&a.dir));
                for r in r? {
                    print_row(&r);
                    rows.push(r);
                }
                if with_mc {
                    let r = memcached_round(a, size, graceful, rep)?;
                    print_row(&r);
                    rows.push(r);
                }
            }
        }
    }
    println!();
    print_table(&rows);
    if rows.iter().any(|r| r.wrong > 0) {
        bail!("a restarted cache served a wrong value");
    }
    Ok(())
}

fn kv(line: &str) -> HashMap<String, String> {
    line.split_whitespace().filter_map(|t| t.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn field<T: std::str::FromStr>(m: &HashMap<String, String>, k: &str) -> Result<T> {
    m.get(k).with_context(|| format!("no {k}= in the child's report"))?.parse().map_err(|_| anyhow::anyhow!("bad {k}="))
}

/// Spawns this binary with `args`, stdout piped.
fn spawn_self(args: &[String]) -> Result<Child> {
    let exe = std::env::current_exe()?;
    Command::new(exe).args(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().context("spawning a child")
}

/// Reads the child's stdout until a line starting with `tag`.
fn read_tagged(r: &mut impl BufRead, tag: &str) -> Result<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("child exited before reporting {tag:?}");
        }
        if line.starts_with(tag) {
            return Ok(line.trim_end().to_string());
        }
    }
}

fn segcache_round(a: &CompareArgs, size: usize, graceful: bool, rep: usize) -> Result<Vec<Row>> {
    let path = seg_file(&a.dir);
    let common = vec!["--path".to_string(), path.display().to_string(), "--heap".into(), size.to_string()];
    let mut args = vec!["fill".to_string()];
    args.extend(common.iter().cloned());
    args.push(if graceful { "--graceful" } else { "--then-wait" }.into());
    let mut child = spawn_self(&args)?;
    let mut out = BufReader::new(child.stdout.take().context("child stdout")?);
    let fill = kv(&read_tagged(&mut out, "fill ")?);
    if graceful {
        read_tagged(&mut out, "closed")?;
        let st = child.wait()?;
        if !st.success() {
            bail!("fill exited with {st}");
        }
    } else {
        child.kill()?; // SIGKILL
        child.wait()?;
    }
    let keys: u64 = field(&fill, "keys")?;
    let retained: u64 = field(&fill, "items")?;
    std::thread::sleep(Duration::from_millis(a.pause_ms));

    let mut rows =
        vec![reopen_round(&common, size, if graceful { "graceful" } else { "kill -9" }, rep, keys, retained)];
    // The reopen closed the file gracefully: reopen it once more with lazy verification.
    if graceful {
        let mut lazy = common.clone();
        lazy.push("--lazy-verify".into());
        rows.push(reopen_round(&lazy, size, "graceful, lazy verify", rep, keys, retained));
    }
    let _ = std::fs::remove_file(&path);
    rows.into_iter().collect()
}

/// Times one `reopen` child over the file that `common` names.
fn reopen_round(
    common: &[String],
    size: usize,
    stop: &'static str,
    rep: usize,
    keys: u64,
    retained: u64,
) -> Result<Row> {
    let mut args = vec!["reopen".to_string()];
    args.extend(common.iter().cloned());
    args.extend(["--keys".into(), keys.to_string()]);
    let t0 = mono_ns();
    args.extend(["--t0-ns".into(), t0.to_string()]);
    let mut child = spawn_self(&args)?;
    let mut out = BufReader::new(child.stdout.take().context("child stdout")?);
    let line = read_tagged(&mut out, "reopen ");
    let st = child.wait()?;
    let m = kv(&line?);
    if !st.success() {
        bail!("reopen exited with {st}");
    }
    Ok(Row {
        engine: "segcache",
        size,
        stop,
        rep,
        keys,
        retained,
        served: field(&m, "served")?,
        wrong: field(&m, "wrong")?,
        first_ms: field(&m, "first_hit_ms")?,
        open_ms: Some(field(&m, "open_ms")?),
        scan_gib_s: Some(field(&m, "scan_gib_s")?),
        first_hit: field::<i64>(&m, "first_hit")? >= 0,
    })
}

fn memcached_round(a: &CompareArgs, size: usize, graceful: bool, rep: usize) -> Result<Row> {
    let mc = Memcached { bin: a.memcached.clone(), port: a.port, mem_mib: size >> 20, file: mc_file(&a.dir) };
    if mc.mem_mib < 64 {
        bail!("memcached -e needs a heap of 64 MiB or more (it preallocates 39 MB); got {}", mib(size));
    }
    mc.remove_files();
    let mut child = mc.spawn()?;
    let result = (|| -> Result<Row> {
        let mut conn = Conn::new(mc.connect(&mut child, Duration::from_secs(10))?)?;
        let keys = conn.fill()?;
        let retained = conn.stat("curr_items")?;
        drop(conn);
        signal_and_wait(&mut child, if graceful { libc::SIGUSR1 } else { libc::SIGKILL })?;
        std::thread::sleep(Duration::from_millis(a.pause_ms));
        let t0 = mono_ns();
        child = mc.spawn()?;
        let mut conn = Conn::new(mc.connect(&mut child, Duration::from_secs(30))?)?;
        let hit = conn.probe(&key(keys - 1))?;
        let first_ms = ms(t0, mono_ns());
        let (served, wrong, _) = conn.count(keys)?;
        Ok(Row {
            engine: "memcached",
            size,
            stop: if graceful { "graceful" } else { "kill -9" },
            rep,
            keys,
            retained,
            served,
            wrong,
            first_ms,
            open_ms: None,
            scan_gib_s: None,
            first_hit: hit,
        })
    })();
    let _ = child.kill();
    let _ = child.wait();
    mc.remove_files();
    result
}

fn seg_file(dir: &Path) -> PathBuf {
    dir.join(format!("segcache-restart-{}.heap", std::process::id()))
}

fn mc_file(dir: &Path) -> PathBuf {
    dir.join(format!("mc-mem-{}", std::process::id()))
}

fn mib(size: usize) -> String {
    if size >= 1 << 30 && size & ((1 << 30) - 1) == 0 {
        format!("{} GiB", size >> 30)
    } else {
        format!("{} MiB", size >> 20)
    }
}

fn print_row(r: &Row) {
    println!(
        "{} {} {} rep={}: keys={} retained={} served={} wrong={} first_{}_ms={:.1}{}",
        r.engine,
        mib(r.size),
        r.stop,
        r.rep,
        r.keys,
        r.retained,
        r.served,
        r.wrong,
        if r.engine == "memcached" { "reply" } else { "hit" },
        r.first_ms,
        r.open_ms.map_or(String::new(), |o| format!(" open_ms={o:.1} scan_gib_s={:.2}", r.scan_gib_s.unwrap_or(0.0))),
    );
}

fn print_table(rows: &[Row]) {
    println!("| engine | heap | stop | rep | keys written | items at stop | first reply (ms from spawn) | open (ms) | heap scanned (GiB/s) | kept (of items at stop) | wrong |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let kept = if r.retained == 0 { 0.0 } else { 100.0 * r.served as f64 / r.retained as f64 };
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.1}{} | {} | {} | {:.1}% | {} |",
            r.engine,
            mib(r.size),
            r.stop,
            r.rep,
            r.keys,
            r.retained,
            r.first_ms,
            if r.first_hit { "" } else { " (miss)" },
            r.open_ms.map_or("-".into(), |o| format!("{o:.1}")),
            r.scan_gib_s.map_or("-".into(), |g| format!("{g:.2}")),
            kept,
            r.wrong,
        );
    }
}
