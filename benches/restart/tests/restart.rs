//! End-to-end: the benchmark binary fills a file-backed heap, stops it (gracefully, or SIGKILL),
//! and reopens it in a fresh process; every item present at the stop must come back with its
//! value, and nothing wrong may be served. Also the `compare` driver beside memcached when the
//! memcached binary is installed.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_restart-bench");

/// A folder of its own for each test (they run in parallel), removed when the test ends, passed
/// or failed.
struct TmpDir(PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for TmpDir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

fn tmp_dir(test: &str) -> TmpDir {
    let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    let d = PathBuf::from(base).join(format!("restart-bench-test-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    TmpDir(d)
}

fn kv(line: &str, k: &str) -> u64 {
    let pat = format!("{k}=");
    let v = line
        .split_whitespace()
        .find_map(|t| t.strip_prefix(pat.as_str()))
        .unwrap_or_else(|| panic!("no {k} in {line}"));
    v.parse().unwrap_or_else(|_| panic!("bad {k} in {line}"))
}

fn run(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn reopen_and_check(path: &str, keys: u64, items: u64, extra: &[&str]) {
    let keys_arg = keys.to_string();
    let mut args = vec!["reopen", "--path", path, "--heap", "16MiB", "--keys", &keys_arg];
    args.extend_from_slice(extra);
    let out = run(&args);
    let line = out.lines().find(|l| l.starts_with("reopen ")).expect("reopen line");
    assert_eq!(kv(line, "wrong"), 0, "{line}");
    assert_eq!(kv(line, "served"), items, "every item present at the stop must come back: {line}");
    assert_eq!(kv(line, "served") + kv(line, "missed"), keys, "{line}");
    assert_eq!(kv(line, "items"), items, "{line}");
}

#[test]
fn graceful_stop_keeps_every_item() {
    let dir = tmp_dir("graceful");
    let path = dir.join("graceful.heap");
    let p = path.to_str().unwrap();
    let out = run(&["fill", "--path", p, "--heap", "16MiB", "--graceful"]);
    let fill = out.lines().find(|l| l.starts_with("fill ")).expect("fill line");
    assert!(out.contains("closed close_ms="), "{out}");
    let (keys, items) = (kv(fill, "keys"), kv(fill, "items"));
    // 16 MiB of ~100-byte records: well over 100k items, and the heap really was filled.
    assert!(items > 100_000 && items <= keys, "{fill}");
    reopen_and_check(p, keys, items, &[]);
    // Reopened and closed again: still all there, also when segments are checked lazily.
    reopen_and_check(p, keys, items, &["--lazy-verify"]);
    reopen_and_check(p, keys, items, &[]);
}

#[test]
fn kill_9_keeps_every_acknowledged_item() {
    let dir = tmp_dir("crash");
    let path = dir.join("crash.heap");
    let p = path.to_str().unwrap();
    let mut child = Command::new(BIN)
        .args(["fill", "--path", p, "--heap", "16MiB", "--then-wait"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    child.kill().unwrap(); // SIGKILL: the file is left not clean
    child.wait().unwrap();
    let (keys, items) = (kv(&line, "keys"), kv(&line, "items"));
    assert!(items > 100_000, "{line}");
    reopen_and_check(p, keys, items, &[]);
}

#[test]
fn kill_9_during_writes_keeps_every_acknowledged_item() {
    let dir = tmp_dir("underload");
    let path = dir.join("underload.heap");
    let p = path.to_str().unwrap();
    // Several rounds, each killed at a different point of the fill.
    for (round, stop_after) in [3u64, 17, 40].into_iter().enumerate() {
        let mut child = Command::new(BIN)
            .args(["fill", "--path", p, "--heap", "64MiB", "--then-wait", "--progress-every", "4096"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut acked = 0;
        let mut line = String::new();
        for _ in 0..stop_after {
            line.clear();
            out.read_line(&mut line).unwrap();
            acked = kv(&line, "keys");
        }
        child.kill().unwrap(); // SIGKILL while it is still writing
        child.wait().unwrap();
        // Keys past the last acknowledged count may or may not be there, but never wrong. The
        // child may be far past the last line read: probe more keys than 64 MiB can hold.
        let probe = 1_000_000;
        let out = run(&["reopen", "--path", p, "--heap", "64MiB", "--keys", &probe.to_string()]);
        let r = out.lines().find(|l| l.starts_with("reopen ")).expect("reopen line");
        assert_eq!(kv(r, "wrong"), 0, "round {round}: {r}");
        assert!(kv(r, "served") >= acked, "round {round}: {acked} acknowledged, {r}");
        assert_eq!(kv(r, "served"), kv(r, "items"), "round {round}: nothing but these keys: {r}");
        let check = run(&["reopen", "--path", p, "--heap", "64MiB", "--keys", &acked.to_string()]);
        let c = check.lines().find(|l| l.starts_with("reopen ")).unwrap();
        assert_eq!(kv(c, "served"), acked, "round {round}: every acknowledged key: {c}");
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let out = Command::new(BIN).args(["reopen", "--path", "/nonexistent/x.heap", "--keys", "10"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let out = Command::new(BIN).args(["fill", "--path", "/dev/null/x", "--heap", "lots"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"lots\" is not a size"));
    // A file of another size is refused by name, not misread.
    let dir = tmp_dir("bad");
    let p = dir.join("other.heap");
    let ps = p.to_str().unwrap();
    run(&["fill", "--path", ps, "--heap", "16MiB", "--graceful"]);
    let out = Command::new(BIN).args(["reopen", "--path", ps, "--heap", "32MiB", "--keys", "10"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another configuration"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn compare_runs_both_engines_and_segcache_keeps_everything() {
    let dir = tmp_dir("compare");
    let have_mc = Command::new("memcached").arg("-V").output().is_ok_and(|o| o.status.success());
    let port = (20000 + std::process::id() % 10000).to_string();
    let mc = if have_mc { "memcached" } else { "none" };
    let out = run(&["compare", "--sizes", "64MiB", "--dir", dir.to_str().unwrap(), "--port", &port, "--memcached", mc]);
    let rows: Vec<&str> = out.lines().filter(|l| l.contains(" rep=")).collect();
    // segcache: graceful (strict and lazy verification) and kill -9; memcached: both stops.
    assert_eq!(rows.len(), if have_mc { 5 } else { 3 }, "{out}");
    for r in rows.iter().filter(|r| r.starts_with("segcache")) {
        assert_eq!(kv(r, "served"), kv(r, "retained"), "{r}");
        assert_eq!(kv(r, "wrong"), 0, "{r}");
    }
    if have_mc {
        let g = rows.iter().find(|r| r.starts_with("memcached 64 MiB graceful")).expect("memcached graceful row");
        assert!(kv(g, "keys") > 50_000, "{g}");
        assert_eq!(kv(g, "wrong"), 0, "{g}");
    }
    assert!(out.contains("| segcache | 64 MiB | kill -9 |"), "{out}");
    assert!(out.contains("| segcache | 64 MiB | graceful, lazy verify |"), "{out}");
    // Its files are gone.
    assert_eq!(std::fs::read_dir(&*dir).unwrap().count(), 0);
}
