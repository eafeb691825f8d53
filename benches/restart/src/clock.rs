//! Timestamps that mean the same thing in every process: CLOCK_MONOTONIC nanoseconds. The driver
//! takes one just before it spawns a process; the process reports its own events on the same
//! clock, so "time from process start" includes exec, dynamic loading and the cache's open.

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// When this process started, on the CLOCK_MONOTONIC scale, from `/proc/self/stat` (field 22,
/// clock ticks since boot; 10 ms resolution). Used only when the driver passed no timestamp.
pub fn process_start_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; the fields after its closing ')' do not.
    let rest = &stat[stat.rfind(')')? + 2..];
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let start_boot = ticks * 1_000_000_000 / hz as u64;
    let (boot, mono) = (clock_ns(libc::CLOCK_BOOTTIME), mono_ns());
    Some(mono.saturating_sub(boot.saturating_sub(start_boot)))
}

/// Milliseconds between two `mono_ns` readings.
pub fn ms(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_start_is_in_the_past_and_recent() {
        let now = mono_ns();
        let start = process_start_ns().expect("/proc/self/stat readable");
        assert!(start <= now);
        // The test binary started less than an hour ago.
        assert!(now - start < 3600 * 1_000_000_000);
    }
}
