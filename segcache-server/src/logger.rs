//! A small stderr logger for the `log` facade: `TIME segcache-server LEVEL thread: message`, one
//! line each, the time in RFC 3339 UTC with milliseconds.

use std::io::Write;

struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let t = std::thread::current();
            let _ = writeln!(
                std::io::stderr().lock(),
                "{} segcache-server {} {}: {}",
                rfc3339(std::time::SystemTime::now()),
                r.level(),
                t.name().unwrap_or("main"),
                r.args()
            );
        }
    }
    fn flush(&self) {}
}

static LOGGER: Stderr = Stderr;

/// Installs the logger at `level` (once; later calls only change the level).
pub fn init(level: log::LevelFilter) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}

/// Writes a line the operator always wants (how the cache started), whatever the level, unless
/// logging is off.
pub fn notice(msg: &str) {
    if log::max_level() != log::LevelFilter::Off {
        let _ = writeln!(
            std::io::stderr().lock(),
            "{} segcache-server NOTICE main: {msg}",
            rfc3339(std::time::SystemTime::now())
        );
    }
}

/// `2026-11-24T05:24:13.123Z`: a time as RFC 3339 UTC with milliseconds.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, rem / 60 % 60, rem % 60, d.subsec_millis())
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(super::rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year) 12:34:56.789
        let t = UNIX_EPOCH + Duration::from_millis(951_827_696_789);
        assert_eq!(super::rfc3339(t), "2000-02-29T12:34:56.789Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_219_200); // 2026-11-21
        assert_eq!(super::rfc3339(t), "2026-11-21T00:00:00.000Z");
    }
}
