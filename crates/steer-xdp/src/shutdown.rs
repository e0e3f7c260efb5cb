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
/// let stop = steer_xdp::shutdown::install().unwrap();
/// while !stop.load(std::sync::atomic::Ordering::Relaxed) {
///     // ... poll the sockets ...
///     break;
/// }
/// ```
pub fn install() -> io::Result<&'static AtomicBool> {
    crate::sys::install_handler(&[libc::SIGINT, libc::SIGTERM], on_signal)?;
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
        crate::sys::raise(libc::SIGTERM).unwrap();
        assert!(stop.load(Ordering::SeqCst));
        assert!(requested());
    }
}
