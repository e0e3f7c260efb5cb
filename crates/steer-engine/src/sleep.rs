//! A worker [`Sleeper`] built on a mio `Poll`: the dispatcher's doorbell wakes
//! it through a mio `Waker` (an eventfd), and any file descriptor registered
//! with it (an AF_XDP socket's rx readiness, a timer) wakes it too. This is
//! what an AF_XDP worker sleeps on: new frames on its own rx queue, or frames
//! queued to it by another CPU's dispatcher, whichever comes first.

use std::io;
use std::os::fd::RawFd;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use steer_core::wake::Sleeper;

const WAKER: Token = Token(usize::MAX);

/// Sleeps in `epoll_wait` until woken or a registered fd is readable.
///
/// ```
/// use std::time::{Duration, Instant};
/// use steer_core::wake::Sleeper;
/// let s = steer_engine::sleep::MioSleeper::new().unwrap();
/// s.wake(); // a wake before the sleep is not lost
/// let t = Instant::now();
/// s.sleep(Duration::from_secs(5));
/// assert!(t.elapsed() < Duration::from_secs(1));
/// ```
#[derive(Debug)]
pub struct MioSleeper {
    poll: Mutex<(Poll, Events)>,
    waker: Waker,
}

impl MioSleeper {
    /// A sleeper with only its waker registered.
    pub fn new() -> io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        Ok(Self {
            poll: Mutex::new((poll, Events::with_capacity(16))),
            waker,
        })
    }

    /// Also wake when `fd` becomes readable (e.g. an AF_XDP socket). `token`
    /// must not be `usize::MAX`.
    pub fn watch_readable(&self, fd: RawFd, token: usize) -> io::Result<()> {
        let guard = self.poll.lock().unwrap_or_else(PoisonError::into_inner);
        guard
            .0
            .registry()
            .register(&mut SourceFd(&fd), Token(token), Interest::READABLE)
    }
}

impl Sleeper for MioSleeper {
    fn sleep(&self, timeout: Duration) {
        let mut guard = self.poll.lock().unwrap_or_else(PoisonError::into_inner);
        let (poll, events) = &mut *guard;
        // EINTR or another error: return early, the worker loop re-checks.
        let _ = poll.poll(events, Some(timeout));
    }

    fn wake(&self) {
        // An eventfd write; it fails only if the counter would overflow,
        // which means a wake is already pending.
        let _ = self.waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn woken_from_another_thread() {
        let s = Arc::new(MioSleeper::new().unwrap());
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            s2.sleep(Duration::from_secs(30));
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        s.wake();
        assert!(t.join().unwrap() < Duration::from_secs(10));
    }

    #[test]
    fn woken_by_a_readable_fd() {
        let s = MioSleeper::new().unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        s.watch_readable(b.as_raw_fd(), 1).unwrap();
        a.write_all(b"x").unwrap();
        let start = Instant::now();
        s.sleep(Duration::from_secs(30));
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn times_out_when_nothing_happens() {
        let s = MioSleeper::new().unwrap();
        let start = Instant::now();
        s.sleep(Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(15));
    }
}
