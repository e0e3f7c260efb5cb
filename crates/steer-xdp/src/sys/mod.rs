//! The OS boundary, mio style: the system calls xsk-rs does not make and
//! the libxdp/libbpf FFI. The rest of the crate sees only the safe
//! functions and owners re-exported here or in `libxdp`. System calls
//! go through one `syscall!` macro that turns -1 into `io::Error`.
//!
//! - `caps`: the capabilities XDP and AF_XDP need.
//! - `clock`: the monotonic clock BPF programs read.
//! - `cpus`: the possible CPUs (per-CPU map values).
//! - `flock`: the exclusive lock of one owner per interface.
//! - `libxdp`: the libxdp/libbpf FFI (program, maps, attached programs).
//! - `net`: interfaces, rx queue counts, socket options, ring wakeups.
//! - `netdev`: the netdev netlink family (a device's XDP features).
//! - `netns`: the network namespace a program was attached from.
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
#[allow(unsafe_code)]
mod clock;
mod cpus;
#[allow(unsafe_code)]
mod flock;
#[allow(unsafe_code)]
pub(crate) mod libxdp;
#[allow(unsafe_code)]
mod net;
#[allow(unsafe_code)]
mod netdev;
#[allow(unsafe_code)]
mod netns;
#[allow(unsafe_code)]
mod signal;

pub use caps::check_privileges;
pub(crate) use clock::monotonic_ns;
pub(crate) use cpus::possible_cpus;
pub(crate) use flock::try_lock_exclusive;
pub(crate) use net::{
    attach_socket_filter, ethtool_channels, ethtool_driver, ethtool_rxfh_indir, ethtool_rxnfc,
    kick_rx, kick_tx, mtu, set_busy_poll, ETHTOOL_RXNFC_LEN,
};
pub use net::{ifindex, rx_queue_count};
pub(crate) use netdev::netdev_xdp;
pub(crate) use netns::NetNs;
pub(crate) use signal::install_handler;
#[cfg(test)]
pub(crate) use signal::raise;
