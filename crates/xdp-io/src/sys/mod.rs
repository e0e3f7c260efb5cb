//! The OS boundary that xsk-rs and libxdp do not cover, mio style: the rest
//! of the crate sees only the safe functions re-exported here. System calls
//! go through one `syscall!` macro that turns -1 into `io::Error`.
//!
//! - `caps`: the capabilities XDP and AF_XDP need.
//! - `cpus`: the possible CPUs (per-CPU map values).
//! - `net`: interfaces, rx queue counts, socket options, ring wakeups.
//! - `signal`: signal handlers (`sigaction`).

/// Calls a libc function, mapping a -1 return to `io::Error::last_os_error`.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: the caller passes arguments valid for this libc call; see the
        // SAFETY comment at each use.
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

mod caps;
mod cpus;
mod net;
mod signal;

pub use caps::check_privileges;
pub(crate) use cpus::possible_cpus;
pub(crate) use net::{ethtool, kick_rx, kick_tx, set_busy_poll};
pub use net::{ifindex, rx_queue_count};
pub(crate) use signal::install_handler;
#[cfg(test)]
pub(crate) use signal::raise;
