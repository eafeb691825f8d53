//! Process CPU time (user + system) from /proc/<pid>/stat, for server CPU per request
//! and for the harness's own CPU use.

use std::io;
use std::time::Duration;

/// Clock ticks per second for /proc's utime/stime fields.
pub fn clk_tck() -> u64 {
    // SAFETY: sysconf takes a constant and returns a number; no memory is touched.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Parses utime + stime (in ticks) from the contents of /proc/<pid>/stat.
/// The command name (field 2) may contain spaces and parentheses, so fields are
/// counted from the last ')'.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')' comes field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU time used so far by process `pid` (all its threads).
pub fn process_cpu(pid: u32) -> io::Result<Duration> {
    read_cpu(&format!("/proc/{pid}/stat"))
}

/// The resident set size (VmRSS, KiB) of process `pid`; None when it is gone.
pub fn process_rss_kb(pid: u32) -> Option<u64> {
    parse_vm_rss(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// Parses the `VmRSS:` line (in kB) of a /proc/<pid>/status.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line["VmRSS:".len()..].split_whitespace().next()?.parse().ok()
}

/// CPU time used so far by this process.
pub fn self_cpu() -> io::Result<Duration> {
    read_cpu("/proc/self/stat")
}

/// Parses the steal time (clock ticks: time the hypervisor ran something else while this
/// virtual core wanted to run) from core `core`'s line of /proc/stat's contents.
pub fn parse_core_steal(stat: &str, core: usize) -> Option<u64> {
    let name = format!("cpu{core}");
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    // cpuN user nice system idle iowait irq softirq steal ...
    line.split_whitespace().nth(8)?.parse().ok()
}

/// Core `core`'s steal time so far, ticks (None where /proc/stat cannot be read or has no such core).
pub fn core_steal(core: usize) -> Option<u64> {
    parse_core_steal(&std::fs::read_to_string("/proc/stat").ok()?, core)
}

/// Parses a /proc/.../schedstat line: time on a CPU and time waiting on a run queue, ns.
pub fn parse_schedstat(line: &str) -> Option<(u64, u64)> {
    let mut f = line.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// The summed time on a CPU and time ready to run but waiting for one (another task held
/// it), ns, of the threads process `pid` has now (a thread that ended takes its share with
/// it); None when the process is gone or the kernel keeps no schedstats.
pub fn process_schedstat(pid: u32) -> Option<(u64, u64)> {
    let mut total = None;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        // A thread may end between the listing and the read.
        let Some((run, wait)) =
            std::fs::read_to_string(t.path().join("schedstat")).ok().as_deref().and_then(parse_schedstat)
        else {
            continue;
        };
        let (r, w) = total.unwrap_or((0, 0));
        total = Some((r + run, w + wait));
    }
    total
}

fn read_cpu(path: &str) -> io::Result<Duration> {
    let s = std::fs::read_to_string(path)?;
    let ticks = parse_stat_ticks(&s)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("cannot parse {path}")))?;
    Ok(Duration::from_nanos(ticks * 1_000_000_000 / clk_tck()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let s = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1000 0 0";
        assert_eq!(parse_stat_ticks(s), Some(325));
        assert_eq!(parse_stat_ticks("garbage"), None);
        assert_eq!(parse_stat_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn steal_and_schedstat_parse() {
        let stat = "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 5 40 900 3 2 7 11 0 0\ncpu1 1 2 3 4 5 6 7 8 0 0\nintr 1 2\n";
        assert_eq!(parse_core_steal(stat, 0), Some(11));
        assert_eq!(parse_core_steal(stat, 1), Some(8));
        // "cpu1" is not "cpu10", and a line without the field is None.
        assert_eq!(parse_core_steal(stat, 10), None);
        assert_eq!(parse_core_steal("cpu0 1 2 3\n", 0), None);
        assert!(core_steal(0).is_some());
        assert_eq!(parse_schedstat("2402200000 61500000 79428\n"), Some((2_402_200_000, 61_500_000)));
        assert_eq!(parse_schedstat("12"), None);
        let (run, _) = process_schedstat(std::process::id()).expect("this process's schedstats");
        assert!(run > 0);
        assert_eq!(process_schedstat(u32::MAX), None);
    }

    #[test]
    fn self_cpu_grows_with_work() {
        let before = self_cpu().unwrap();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let used = self_cpu().unwrap() - before;
        // Busy for 300 ms wall: at least some of it on the CPU, even on a loaded box.
        assert!(used >= Duration::from_millis(50), "{used:?}");
        assert!(process_cpu(std::process::id()).unwrap() >= before);
        assert!(process_cpu(u32::MAX).is_err());
    }
}
