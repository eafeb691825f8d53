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
