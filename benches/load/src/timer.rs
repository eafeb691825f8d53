//! A timerfd registered in the mio poll, so a worker sleeps until the next send with
//! microsecond precision instead of epoll's millisecond timeout (which would delay sends
//! by up to 1 ms and bias every latency the harness reports).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use mio::event::Source;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

pub struct TimerFd {
    fd: OwnedFd,
}

impl TimerFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: timerfd_create takes no pointers; we check the result before using it.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        Ok(TimerFd { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Arms the timer to fire once after `after` (at least 1 ns: zero would disarm it).
    pub fn arm(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: spec is a valid itimerspec on our stack; old_value may be null.
        let rc = unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Clears the expiry count so edge-triggered polling sees the next expiry.
    pub fn drain(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: buf is 8 writable bytes, the size timerfd reads require. EAGAIN is fine.
        unsafe {
            libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len());
        }
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Source for TimerFd {
    fn register(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        SourceFd(&self.fd.as_raw_fd()).register(registry, token, interests)
    }
    fn reregister(&mut self, registry: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        SourceFd(&self.fd.as_raw_fd()).reregister(registry, token, interests)
    }
    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        SourceFd(&self.fd.as_raw_fd()).deregister(registry)
    }
}

/// Sets this thread's timer slack (default 50 us) so sleeps wake close to their deadline.
pub fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer; failure only leaves the default slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn timer_wakes_a_poll_on_time() {
        set_timer_slack(1);
        let mut poll = mio::Poll::new().unwrap();
        let mut events = mio::Events::with_capacity(4);
        let mut t = TimerFd::new().unwrap();
        poll.registry().register(&mut t, Token(1), Interest::READABLE).unwrap();
        for _ in 0..5 {
            let start = Instant::now();
            t.arm(Duration::from_micros(300)).unwrap();
            poll.poll(&mut events, Some(Duration::from_secs(2))).unwrap();
            let el = start.elapsed();
            assert!(events.iter().any(|e| e.token() == Token(1)));
            assert!(el >= Duration::from_micros(300), "woke early: {el:?}");
            // epoll's own timeout could not wake before 1 ms; allow scheduler noise.
            assert!(el < Duration::from_millis(50), "woke late: {el:?}");
            t.drain();
        }
    }
}
