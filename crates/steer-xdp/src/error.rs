//! Typed errors of the AF_XDP data path. Every message says what to do about
//! it: which capability to grant, which command shows the interfaces or the
//! attached program, which option to change.

use std::io;

use crate::config::{BindMode, XdpMode};

/// Why opening, configuring or using the data path failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XdpError {
    /// The process lacks a capability AF_XDP and XDP need.
    #[error(
        "missing privileges: {missing}; run as root, or grant CAP_NET_ADMIN, CAP_NET_RAW and \
         CAP_BPF (e.g. `sudo setcap cap_net_admin,cap_net_raw,cap_bpf+ep <binary>`)"
    )]
    Privileges {
        /// The capabilities that are missing, comma separated.
        missing: String,
    },
    /// No interface of that name in this network namespace.
    #[error(
        "unknown network interface {name:?}: check the name with `ip link show` (in the network \
         namespace this process runs in)"
    )]
    UnknownInterface {
        /// The name asked for.
        name: String,
    },
    /// The rx queue index is not below the interface's rx queue count.
    #[error(
        "rx queue {queue} is out of range: {interface} has {count} rx queue(s); see `ethtool -l \
         {interface}` (veth: create it with `numrxqueues N numtxqueues N`)"
    )]
    QueueOutOfRange {
        /// The interface.
        interface: String,
        /// The queue asked for.
        queue: u32,
        /// How many rx queues the interface has.
        count: u32,
    },
    /// The driver does not offer the requested XDP attach mode.
    #[error(
        "{interface}: the driver does not support {mode:?} XDP ({source}); use XdpMode::Generic, \
         or XdpMode::Auto to fall back to it"
    )]
    ModeUnsupported {
        /// The interface.
        interface: String,
        /// The mode asked for.
        mode: XdpMode,
        /// What the kernel said.
        source: io::Error,
    },
    /// The interface's MTU does not fit one frame and multi-buffer packets
    /// were turned off.
    #[error(
        "{interface}: MTU {mtu} does not fit one {frame_size}-byte frame (at most MTU {max}) \
         and multi-buffer is off; lower the MTU, use 4096-byte frames, or allow multi-buffer"
    )]
    MtuTooLarge {
        /// The interface.
        interface: String,
        /// Its MTU.
        mtu: u32,
        /// The frame size.
        frame_size: u32,
        /// The largest MTU one frame holds.
        max: u32,
    },
    /// The driver refuses multi-buffer AF_XDP sockets (`XDP_USE_SG`) in
    /// the bind mode in use.
    #[error(
        "{interface} queue {queue}: the driver does not support multi-buffer AF_XDP \
         (XDP_USE_SG) in {mode:?} mode ({source}); lower the MTU to at most {max} for \
         {frame_size}-byte frames"
    )]
    MultiBufferUnsupported {
        /// The interface.
        interface: String,
        /// The queue.
        queue: u32,
        /// The bind mode tried.
        mode: BindMode,
        /// The frame size.
        frame_size: u32,
        /// The largest MTU one frame holds.
        max: u32,
        /// What the kernel said.
        source: io::Error,
    },
    /// The driver does not offer the requested AF_XDP bind mode.
    #[error(
        "{interface} queue {queue}: the driver does not support {mode:?} AF_XDP sockets \
         ({source}); use BindMode::Copy, or BindMode::Auto to fall back to it"
    )]
    BindUnsupported {
        /// The interface.
        interface: String,
        /// The queue.
        queue: u32,
        /// The bind mode asked for.
        mode: BindMode,
        /// What the kernel said.
        source: io::Error,
    },
    /// A steer program without an owner record is still attached, most
    /// likely left by a crashed run of an older steer.
    #[error(
        "{interface} already has a steer XDP program attached (program id {id}) that does not \
         say who owns it, probably left by a crashed run; remove it with `ip link set dev \
         {interface} xdp off` (or open with `replace_stale(true)` to replace it)"
    )]
    StaleProgram {
        /// The interface.
        interface: String,
        /// The kernel's id of the attached program.
        id: u32,
    },
    /// Another steer process holds the interface's owner lock: it serves
    /// the interface now.
    #[error(
        "{interface} is served by {}: stop it first{}, or use another interface",
        pid.map_or("another steer process".to_string(), |p| format!("steer pid {p}")),
        pid.map_or(String::new(), |p| format!(" (`kill {p}`)"))
    )]
    Locked {
        /// The interface.
        interface: String,
        /// The holder's pid, when its lock file says.
        pid: Option<u32>,
    },
    /// The interface's owner lock file could not be made or locked.
    #[error(
        "{context} {}: {source} (steer keeps one lock file per interface there; run as root)",
        path.display()
    )]
    OwnerLock {
        /// What was being done.
        context: &'static str,
        /// The lock file.
        path: std::path::PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A steer program whose owner is alive: another engine serves the interface.
    #[error(
        "another steer engine (pid {pid}) serves {interface}: its XDP program (id {id}) is \
         attached; stop it first (`kill {pid}`), or give this engine another interface"
    )]
    Served {
        /// The interface.
        interface: String,
        /// The running engine's pid.
        pid: u32,
        /// The kernel's id of its program.
        id: u32,
    },
    /// Another (non-steer) XDP program occupies the interface.
    #[error(
        "{interface} already has another XDP program attached ({name}, id {id}); detach it \
         (`xdp-loader unload {interface} --all`), or mount bpffs (`mount -t bpf bpf \
         /sys/fs/bpf`) so libxdp can run both through its dispatcher"
    )]
    OtherProgram {
        /// The interface.
        interface: String,
        /// The attached program's name.
        name: String,
        /// The kernel's id of the attached program.
        id: u32,
    },
    /// libbpf/libxdp could not open, load or attach the steer program.
    #[error(
        "the steer XDP program: {context} failed ({source}); run with RUST_LOG/libbpf output \
         visible and check `dmesg` and `bpftool prog` for the verifier's reason"
    )]
    Program {
        /// The step that failed.
        context: &'static str,
        /// What libbpf/libxdp or the kernel said.
        source: io::Error,
    },
    /// A map update of the steer program failed.
    #[error("updating the steer program's map {map} failed ({source}); {hint}")]
    Map {
        /// The map.
        map: &'static str,
        /// What the kernel said.
        source: io::Error,
        /// What to do.
        hint: &'static str,
    },
    /// The UMEM could not be created.
    #[error(
        "creating the UMEM ({frames} frames of {frame_size} bytes) failed: {reason}; lower \
         frame_count, or raise `ulimit -l` (locked memory) for non-root users"
    )]
    Umem {
        /// Frames asked for.
        frames: u32,
        /// Frame size asked for.
        frame_size: u32,
        /// What xsk-rs / the kernel said.
        reason: String,
    },
    /// An AF_XDP socket could not be created or bound.
    #[error(
        "creating the AF_XDP socket on {interface} queue {queue} failed: {reason}; EBUSY means \
         another socket still holds the queue (close it or wait a moment)"
    )]
    Socket {
        /// The interface.
        interface: String,
        /// The queue.
        queue: u32,
        /// What xsk-rs / the kernel said.
        reason: String,
    },
    /// The configuration itself is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A facility the device or kernel does not offer (e.g. ntuple filters on veth).
    #[error("{what} is not supported on {interface} ({source}); {hint}")]
    NotSupported {
        /// The facility.
        what: &'static str,
        /// The interface.
        interface: String,
        /// What the kernel said.
        source: io::Error,
        /// What to do instead.
        hint: &'static str,
    },
    /// Any other I/O error from a system call.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
}

impl XdpError {
    /// An [`XdpError::Io`] with context.
    pub(crate) fn io(context: &'static str, source: io::Error) -> Self {
        XdpError::Io { context, source }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = XdpError> = std::result::Result<T, E>;

impl XdpError {
    /// The error of the last attach attempt, made in `mode`, as what to
    /// do about it: a native mode the driver refuses (EOPNOTSUPP, EINVAL)
    /// is [`XdpError::ModeUnsupported`]; anything else is kept.
    pub(crate) fn of_last_attach(interface: &str, mode: XdpMode, e: XdpError) -> XdpError {
        match e {
            XdpError::Program {
                context: "attaching",
                source,
            } if matches!(source.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
                && mode != XdpMode::Generic =>
            {
                XdpError::ModeUnsupported {
                    interface: interface.into(),
                    mode,
                    source,
                }
            }
            e => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::max_single_frame_mtu;

    #[test]
    fn jumbo_refusals_are_one_line_that_say_what_to_do() {
        let too_large = XdpError::MtuTooLarge {
            interface: "eth1".into(),
            mtu: 9000,
            frame_size: 2048,
            max: max_single_frame_mtu(2048),
        }
        .to_string();
        assert!(!too_large.contains('\n'), "{too_large}");
        assert!(too_large.contains("MTU 9000") && too_large.contains("at most MTU 1774"));
        let unsupported = XdpError::MultiBufferUnsupported {
            interface: "eth1".into(),
            queue: 0,
            mode: BindMode::ZeroCopy,
            frame_size: 4096,
            max: max_single_frame_mtu(4096),
            source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        }
        .to_string();
        assert!(!unsupported.contains('\n'), "{unsupported}");
        assert!(unsupported.contains("XDP_USE_SG") && unsupported.contains("3822"));
    }
}
