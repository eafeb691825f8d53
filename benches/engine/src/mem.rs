//! Resident memory of this process, from `/proc/self/status`, and of any process, from
//! `/proc/<pid>/smaps_rollup` (Linux).

/// `VmRSS` in bytes, or `None` where `/proc` is not available.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vmrss(&status)
}

/// The `VmRSS:` line of a `/proc/<pid>/status` text, in bytes.
pub fn parse_vmrss(status: &str) -> Option<u64> {
    parse_kb_field(status, "VmRSS:")
}

/// The first line of a `/proc` text that starts with `field` (`"Pss:"`), in bytes: its number
/// is in kB (or unitless).
pub fn parse_kb_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    let mut parts = line[field.len()..].split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => Some(n * 1024),
        Some(_) => None,
    }
}

/// Resident and proportional set sizes of one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rollup {
    /// Bytes resident in the process (`Rss`): a page shared with other processes counts in full
    /// in each of them.
    pub rss: u64,
    /// Its proportional share (`Pss`): a page mapped by k processes counts 1/k in each, so the
    /// sum over processes counts every page once.
    pub pss: u64,
}

/// `Rss` and `Pss` of process `pid`, from `/proc/<pid>/smaps_rollup`; `None` where it cannot
/// be read (not Linux, the process is gone, no permission).
pub fn smaps_rollup(pid: u32) -> Option<Rollup> {
    parse_rollup(&std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?)
}

/// The `Rss:` and `Pss:` lines of a `smaps_rollup` text.
pub fn parse_rollup(text: &str) -> Option<Rollup> {
    Some(Rollup { rss: parse_kb_field(text, "Rss:")?, pss: parse_kb_field(text, "Pss:")? })
}

/// Mebibytes, for printing.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vmrss() {
        let s = "Name:\tx\nVmPeak:\t  100 kB\nVmRSS:\t    2048 kB\nThreads: 1\n";
        assert_eq!(parse_vmrss(s), Some(2048 * 1024));
        assert_eq!(parse_vmrss("Name: x\n"), None);
    }

    #[test]
    fn parses_smaps_rollup() {
        let s = "55d0-7ffd ---p 00000000 00:00 0  [rollup]\nRss:\t  3000 kB\nPss:\t  1500 kB\n\
                 Pss_Anon:\t 100 kB\nShared_Clean:\t 0 kB\n";
        assert_eq!(parse_rollup(s), Some(Rollup { rss: 3000 * 1024, pss: 1500 * 1024 }));
        assert_eq!(parse_rollup("Rss: 1 kB\n"), None);
        assert_eq!(parse_kb_field("Pss_Anon: 5 kB\nPss: 7 kB\n", "Pss:"), Some(7 * 1024));
    }

    #[test]
    fn own_rss_is_positive() {
        if cfg!(target_os = "linux") {
            let r = smaps_rollup(std::process::id()).unwrap();
            assert!(r.rss > 0 && r.pss > 0 && r.pss <= r.rss);
            assert!(rss_bytes().unwrap() > 0);
        }
    }
}
