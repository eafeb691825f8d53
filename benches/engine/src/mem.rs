//! Resident memory of this process, from `/proc/self/status` (Linux).

/// `VmRSS` in bytes, or `None` where `/proc` is not available.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vmrss(&status)
}

/// The `VmRSS:` line of a `/proc/<pid>/status` text, in bytes.
pub fn parse_vmrss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut parts = line.split_whitespace().skip(1);
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => Some(n * 1024),
        Some(_) => None,
    }
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
    fn own_rss_is_positive() {
        if cfg!(target_os = "linux") {
            assert!(rss_bytes().unwrap() > 0);
        }
    }
}
