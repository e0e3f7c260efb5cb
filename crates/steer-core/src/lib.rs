//! steer-core: the decision and moving halves of userspace RPS/RFS, as pure
//! logic with no I/O.
//!
//! - [`cpu`]: CPU sets and the cache layout (which LLC each CPU is behind).
//! - [`packet`]: zero-copy, length-checked views over Ethernet/VLAN/IPv4/IPv6/TCP/UDP,
//!   the internet checksum, and the in-place UDP echo.
//! - [`flow`]: flow keys and flow hashes (keyed, Toeplitz, symmetric).
//! - [`table`]: the desired-CPU table and the per-rx-queue flow table.
//! - [`policy`]: the update rule (`Always`, `LlcAffinity`).
//! - [`hook`]: the steering hook called when a flow moves (the `ndo_rx_flow_steer` analog).
//! - [`ring`]: bounded single-producer single-consumer rings of frame descriptors.
//! - [`stats`]: per-CPU packet counters (the `softnet_stat` analog).
//! - [`dispatch`]: the dispatcher: classify, steer, fast path or ring.
//! - [`wake`]: how idle workers sleep and are woken.
//! - [`runtime`]: pinned workers, the ring matrix, panic recovery, shutdown.
//! - [`record`]: the application thread's handle that records where it consumes a flow.
//!
//! Nothing here needs root, libbpf or hwloc: topology comes in as a
//! [`cpu::CpuLayout`] built by the caller.
#![cfg_attr(not(any(test, loom)), deny(clippy::unwrap_used))]

pub mod cpu;
pub mod dispatch;
pub mod flow;
pub mod hook;
pub mod packet;
pub mod policy;
pub mod record;
pub mod ring;
pub mod runtime;
pub mod stats;
pub mod table;
pub mod wake;
