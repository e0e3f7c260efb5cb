//! AF_XDP data path for steer: one socket per rx queue sharing one UMEM,
//! and the XDP program that redirects only the traffic steer owns.
//!
//! [`XdpPort::open`] attaches the steer XDP program (`bpf/steer_xdp.c`, built
//! by build.rs and loaded through libxdp), creates the UMEM and one
//! [`QueueSocket`] per rx queue. Received packets come out as [`Frame`]s the
//! application owns until it sends or recycles them; [`FrameCensus`] checks
//! that every frame is in exactly one place. Everything else (ARP, ICMP,
//! ports steer does not own) is passed to the kernel. On an interface whose
//! MTU one frame cannot hold, packets span several frames (multi-buffer
//! AF_XDP, [`MultiBuffer`]): [`frames`] gathers them for readers and
//! scatters long replies.
//!
//! [`rfs::RfsProgram`] is the other program: RFS in XDP for kernel sockets,
//! steering tracked TCP and UDP flows to the stack of a chosen CPU through a
//! cpumap, in order.
//!
//! `unsafe` is fenced: denied at this root and allowed only in [`umem`]
//! (frame memory), [`frames`] (frames lent out as descriptors and taken
//! back: its module doc holds the ownership argument), [`socket`] (the
//! rings), [`sched`] and the private `sys` modules that
//! make system calls and libxdp/libbpf calls, and in the privilege tests
//! that make the raw calls a seccomp filter must refuse. Every unsafe block
//! there says why it is sound.
#![deny(unsafe_code)]

/// Frame accounting: per-socket place counters and the census check.
pub mod accounting;
/// Port configuration: modes, sizes, owned ports.
pub mod config;
/// Typed errors.
pub mod error;
/// Frame ownership between the sockets and steer-core's runtime: the
/// `Copy` descriptor of a lent frame and the rx source, pool and transmit
/// adapters an engine plugs into the runtime.
#[allow(unsafe_code)]
pub mod frames;
/// What a device's driver offers XDP programs (features, receive metadata).
pub mod nic;
/// The ethtool ntuple steering backend.
pub mod ntuple;
/// Any caller-supplied XDP object: attach, maps by name, AF_XDP sockets in its XSKMAP.
pub mod object;
/// One owner per interface: the exclusive lock held while steer serves it.
pub mod owner_lock;
/// The owner: program + UMEM + sockets.
pub mod port;
/// Least privilege once set up: capabilities, the user, the seccomp allowlist.
pub mod privileges;
/// The steer XDP program and its maps.
pub mod program;
/// Readiness for event loops (mio, tokio) and a busy-poll loop.
pub mod readiness;
/// XDP RFS for kernel sockets: flows redirected to a CPU's stack through a cpumap.
pub mod rfs;
/// A thread's scheduling slice (EEVDF), the one place that speaks sched_attr.
#[allow(unsafe_code)]
pub mod sched;
/// SIGINT/SIGTERM as a stop flag, so the program gets detached on the way out.
pub mod shutdown;
/// One AF_XDP socket per rx queue: its rings and statistics.
#[allow(unsafe_code)]
pub mod socket;
/// The OS boundary: system calls and the libxdp/libbpf FFI behind safe functions.
mod sys;
/// The UMEM: the `Frame` token and reading/rewriting frames.
#[allow(unsafe_code)]
pub mod umem;

pub use accounting::{FrameCensus, LedgerSnapshot, RingCensus};
pub use config::{ActiveModes, BindMode, MultiBuffer, PortConfig, Proto, XdpAttach, XdpMode};
pub use error::{Result, XdpError};
pub use frames::RawFrame;
pub use port::XdpPort;
pub use program::{
    attached_programs, AdmissionGate, AttachedProgram, FlowMapKey, GateCounts, OwnedAction,
    OwnedActionSwitch, ProgramOwner, ProgramStats, Replaced, SteerProgram,
};
pub use socket::{QueueSocket, SocketStats};
pub use sys::{check_privileges, ifindex, rx_queue_count};
pub use umem::{Frame, RxMeta, UmemView};
