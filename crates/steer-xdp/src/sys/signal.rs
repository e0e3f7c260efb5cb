//! Signal dispositions: installing a handler with `sigaction(2)`.

use std::io;

/// A signal handler: it may only do async-signal-safe work (e.g. store to an
/// atomic).
pub(crate) type Handler = extern "C" fn(libc::c_int);

/// Installs `handler` for each of `signals` (no flags, empty mask).
pub(crate) fn install_handler(signals: &[libc::c_int], handler: Handler) -> io::Result<()> {
    for &signal in signals {
        // SAFETY: sigaction is plain data; all-zero is a valid empty value.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler as libc::sighandler_t;
        // SAFETY: `action` is initialised and outlives both calls; the
        // handler is a plain `extern "C"` function that lives forever.
        let rc = unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sends `signal` to the calling thread (`raise(3)`), for tests of handlers.
#[cfg(test)]
pub(crate) fn raise(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: raise takes a plain signal number; what runs is the installed
    // disposition.
    if unsafe { libc::raise(signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
