//! steer's flow table steering **kernel sockets**: RFS done in XDP.
//!
//! The application records where it reads each connected TCP or UDP socket
//! ([`KernelRecorder::record`], the `rps_record_sock_flow` analog); the
//! record goes through steer's desired-CPU table and its update rule (`llc`
//! or `always`, switchable at run time), exactly as for AF_XDP flows. A
//! write that moves a flow calls the steering hook ([`MapHook`]), which
//! writes the flow's CPU into the XDP RFS program's map (one `bpf(2)` call:
//! the costly update, counted and timed). The program
//! ([`steer_xdp::rfs::RfsProgram`]) redirects the flow's frames into that CPU's
//! cpumap entry, where the kernel stack handles them; it moves a flow only
//! when nothing of it can be overtaken (TCP: the socket's `rcv_nxt` has
//! reached the segment; UDP: the socket has seen every frame). Everything
//! else takes the kernel's own path.
//!
//! Layering, each module importing only those before it: `socket` (a
//! socket's 4-tuple), `cgroup` (the cgroup v2 root), `hook` (the map backend and its shadow of placed
//! flows) and `checksum` (the namespace's checksum failures); `shared`
//! (what the owner shares: table, hook, counters; `place`); `in_kernel`
//! (forgetting the in-kernel recorder's idle flows); `flow` (one
//! connection's handle) and `recorder` (one application thread's handle);
//! `steering` (the owner: program, shared state, sweeper). `unsafe` is denied: system calls go
//! through socket2 and steer-xdp.
//!
//! ```no_run
//! use steer_kernel::{KernelSteering, Proto};
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let steering = KernelSteering::builder("eth1").own(Proto::Tcp, 7000).start()?;
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:7000").await?;
//! loop {
//!     let (stream, _) = listener.accept().await?;
//!     let flow = steering.flow(&stream)?; // forgets the flow when dropped
//!     let mut recorder = steering.recorder();
//!     tokio::spawn(async move {
//!         let mut buf = [0u8; 4096];
//!         loop {
//!             stream.readable().await.unwrap();
//!             match stream.try_read(&mut buf) {
//!                 Ok(0) => break,
//!                 Ok(_n) => { let _ = recorder.record_flow(&flow); /* ... */ }
//!                 Err(_) => continue,
//!             }
//!         }
//!     });
//! }
//! # }
//! ```
#![deny(unsafe_code)]

/// The default cgroup of the UDP in-kernel recorder (the cgroup v2 root).
mod cgroup;
/// The namespace's checksum-failure counters, and the warning on growth.
mod checksum;
mod error;
/// One connection's handle: its tuple and hash, forgotten when dropped.
mod flow;
/// The steering hook writing the RFS program's map, and its backend seam.
pub mod hook;
/// Forgetting the in-kernel recorder's flows once idle.
mod in_kernel;
/// One application thread's recording handle.
mod recorder;
/// What the steering shares with recorders, flows and the sweeper.
mod shared;
/// A socket's 4-tuple, as the XDP program sees its frames.
pub mod socket;
/// The owner: program, desired table, hook and sweeper.
mod steering;

pub use checksum::ChecksumErrors;
pub use error::KernelError;
pub use flow::SteeredFlow;
pub use hook::{MapHook, RfsBackend, UpdateTimes};
pub use recorder::KernelRecorder;
pub use shared::Recorded;
pub use socket::SocketTuple;
pub use steer_core::policy::Policy;
pub use steer_xdp::rfs::{RfsOrder, RfsStats};
pub use steer_xdp::{Proto, XdpMode};
pub use steering::{KernelStats, KernelSteering, KernelSteeringBuilder};
