//! A small stderr logger for the `log` facade: `LEVEL thread: message`, one line each.

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
                "segcache-server {} {}: {}",
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
