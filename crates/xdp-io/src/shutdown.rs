//! SIGINT/SIGTERM as a stop flag, so binaries and examples leave their loops
//! and drop their [`XdpPort`](crate::XdpPort) (which detaches the program)
//! instead of dying with the program still attached. The handler only
//! stores to an atomic, which is async-signal-safe.

use std::{
    io,
    sync::atomic::{AtomicBool, Ordering},
};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT and SIGTERM and returns the flag it sets.
///
/// ```
/// let stop = xdp_io::shutdown::install().unwrap();
/// while !stop.load(std::sync::atomic::Ordering::Relaxed) {
///     // ... poll the sockets ...
///     break;
/// }
/// ```
pub fn install() -> io::Result<&'static AtomicBool> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sigaction is plain data; all-zero is a valid empty value.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: `action` is initialised; the handler only touches an atomic.
        let rc = unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(&STOP)
}

/// Whether SIGINT or SIGTERM arrived since [`install`].
pub fn requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigterm_sets_the_flag_instead_of_killing() {
        let stop = install().unwrap();
        assert!(!stop.load(Ordering::SeqCst));
        // SAFETY: raising a signal whose handler was just installed.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        assert!(stop.load(Ordering::SeqCst));
        assert!(requested());
    }
}
