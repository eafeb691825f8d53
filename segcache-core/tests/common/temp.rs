//! A file path for a test, removed when dropped.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Temp(pub PathBuf);

impl Temp {
    /// A path in the temporary folder that no other test of this process (or another) names.
    pub fn new(what: &str) -> Temp {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("segcache-test-{}-{what}-{n}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        Temp(p)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
