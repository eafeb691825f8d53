//! Server counters: one block per worker (written only by that worker, so the cache lines never
//! bounce between cores), summed when a client or the admin port asks. Names and meanings follow
//! memcached's `stats` output.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! worker_stats {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Per-worker request counters (monotonic; `stats reset` zeroes them).
        #[derive(Debug, Default)]
        #[repr(align(128))]
        pub struct WorkerStats {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        /// A sum of every worker's counters.
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct Totals {
            $(pub $name: u64,)*
        }

        impl WorkerStats {
            /// Adds this worker's counters to `t`.
            pub fn add_to(&self, t: &mut Totals) {
                $(t.$name += self.$name.load(Ordering::Relaxed);)*
            }
            /// Zeroes every counter (`stats reset`).
            pub fn reset(&self) {
                $(self.$name.store(0, Ordering::Relaxed);)*
            }
        }

        impl Totals {
            /// `(memcached stat name, value)` for every counter.
            pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name)),*].into_iter()
            }
        }
    };
}

worker_stats! {
    /// Keys requested by retrieval commands (get, gets, gat, gats, mg).
    cmd_get,
    /// Storage commands (set, add, replace, append, prepend, cas, ms).
    cmd_set,
    cmd_flush,
    cmd_touch,
    /// Meta commands of any kind.
    cmd_meta,
    get_hits,
    get_misses,
    delete_hits,
    delete_misses,
    incr_hits,
    incr_misses,
    decr_hits,
    decr_misses,
    cas_hits,
    cas_misses,
    cas_badval,
    touch_hits,
    touch_misses,
    /// Storage commands refused because the value was over `-I` or the engine's item limit.
    store_too_large,
    /// Storage commands refused because the heap was full and eviction is off.
    store_no_memory,
    /// Authentication attempts: `-Y`'s `set`, `-S`'s SASL_AUTH and SASL_STEP that end the
    /// exchange (a SASL_AUTH that asks for a step is not counted).
    auth_cmds,
    /// Authentication attempts that failed.
    auth_errors,
    bytes_read,
    bytes_written,
    /// Items written as new, as memcached counts them: every store, and an incr whose result
    /// outgrows the old value (one that fits is written in place).
    total_items,
}

/// Adds `n` to a counter that only the calling worker writes.
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Connection counters, shared by the acceptor and the workers.
#[derive(Debug, Default)]
pub struct ConnStats {
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    /// Turns a connection gave up with requests still waiting, so that others had theirs
    /// (memcached's `conn_yields`).
    pub conn_yields: AtomicU64,
    /// Connections closed by `-o idle_timeout` (memcached's `idle_kicks`).
    pub idle_kicks: AtomicU64,
}

/// User and system CPU seconds of this process, from `getrusage`.
pub fn rusage() -> (f64, f64) {
    // SAFETY: `getrusage` writes a plain C struct that we zero-initialise and own; RUSAGE_SELF is
    // always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return (0.0, 0.0);
        }
        ru
    };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}
