//! A clear last line when the persistence file can no longer back the heap.
//!
//! The heap is a shared mapping of the file, whose blocks are reserved when it opens. If the file
//! is then truncated by someone else, or its filesystem fails, the next touch of a page it lost
//! raises `SIGBUS`, which would end the process with no word of why. The handler says which file
//! it was, then lets the signal end the process as before (so supervisors see the same status).

use std::path::Path;
use std::sync::OnceLock;

/// The line written on `SIGBUS`, made before the handler is installed (a handler may not allocate).
static MESSAGE: OnceLock<Vec<u8>> = OnceLock::new();

/// Installs the handler for a heap that lives in `path`.
pub fn report_lost_file(path: &Path) {
    let line = format!(
        "segcache-server: SIGBUS: the persistence file {} no longer backs the heap (truncated by another \
         process, or its filesystem failed); exiting\n",
        path.display()
    );
    if MESSAGE.set(line.into_bytes()).is_err() {
        return;
    }
    // SAFETY: a zeroed `sigaction` is a valid starting value; the handler only calls
    // async-signal-safe functions (write, signal, raise) on data made before it was installed.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_bus_error as *const () as usize;
        act.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
    }
}

extern "C" fn on_bus_error(sig: libc::c_int) {
    if let Some(m) = MESSAGE.get() {
        // SAFETY: `m` is a live, immutable buffer; write(2) is async-signal-safe.
        unsafe { libc::write(2, m.as_ptr().cast(), m.len()) };
    }
    // SA_RESETHAND restored the default action and SA_NODEFER left the signal unblocked: raising
    // it ends the process by SIGBUS now, as it would have ended without this handler.
    // SAFETY: raise is async-signal-safe.
    unsafe { libc::raise(sig) };
}
