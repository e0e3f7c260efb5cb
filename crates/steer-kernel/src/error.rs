//! What can go wrong, each with what to do about it.

use std::io;

use steer_core::hook::HookError;
use steer_core::table::{RecordError, TableError};
use steer_xdp::XdpError;

/// An error of kernel-socket steering.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// Attaching the program or using its maps failed (privileges,
    /// interface, mode, map full: the message says which and what to do).
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// The socket has no peer: only connected sockets name one flow.
    #[error(
        "the socket is not connected ({0}): record a connected TCP or UDP socket (its peer \
         address names the flow; for a UDP server, connect a socket per client)"
    )]
    NotConnected(io::Error),
    /// Not an IPv4/IPv6 TCP or UDP socket.
    #[error(
        "the socket is not an IP TCP or UDP socket: kernel-socket steering keys flows by their \
         4-tuple"
    )]
    Unsupported,
    /// getsockname or SO_TYPE failed.
    #[error("reading the socket's addresses failed: {0}")]
    Socket(io::Error),
    /// The desired-CPU table could not be built.
    #[error("desired-CPU table: {0}")]
    Table(#[from] TableError),
    /// The CPU topology could not be read.
    #[error("CPU topology: {0}")]
    Topology(#[from] steer_topology::Error),
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The desired-CPU table refused the record.
    #[error("recording: {0}")]
    Record(#[from] RecordError),
    /// The steering update failed (the flow keeps its old CPU).
    #[error("steering update failed: {0}; the flow keeps its previous CPU")]
    Hook(#[from] HookError),
}
