//! steer-core: the decision and moving halves of userspace RPS/RFS, as pure
//! logic with no I/O.
//!
//! Modules, lowest first: each uses only modules listed above it.
//!
//! - [`cpu`]: CPU sets and the cache layout (which LLC each CPU is behind).
//! - [`packet`]: zero-copy, length-checked views over Ethernet/VLAN/IPv4/IPv6/TCP/UDP,
//!   the internet checksum, and the in-place UDP echo.
//! - [`flow`]: flow keys, flow hashes (keyed, Toeplitz, symmetric) and the
//!   dispatcher's classifier interface (`Classifier`, `FlowInfo`).
//! - [`policy`]: the update rule (`Always`, `LlcAffinity`).
//! - [`balance`]: the load balancer's decision (which unclaimed flow buckets
//!   move off overloaded workers) and the counters it shares with the
//!   dispatchers.
//! - [`hook`]: the steering hook called when a flow moves (the `ndo_rx_flow_steer` analog).
//! - [`table`]: the desired-CPU table and the per-rx-queue flow table.
//! - [`record`]: the application thread's handle that records where it consumes a flow.
//! - [`ring`]: bounded single-producer single-consumer rings of frame descriptors.
//! - [`stats`]: per-CPU packet counters (the `softnet_stat` analog).
//! - [`wake`]: how idle workers sleep and are woken.
//! - [`dispatch`]: the dispatcher (classify, steer, fast path or ring) and the
//!   state it shares with the application (`Shared`).
//! - [`runtime`]: pinned workers, the ring matrix, panic recovery, shutdown,
//!   started on a `Shared` built beforehand.
//! - [`sim`]: a deterministic replay of the whole steering decision (tables,
//!   policy, hook, fast path) over a model of the rings draining, for
//!   what-if questions on recorded traffic.
//!
//! Types and functions that mirror the kernel's carry its names as doc
//! aliases, so the documentation's search finds `rps_sock_flow_table`,
//! `rps_dev_flow_table`, `get_rps_cpu`, `ndo_rx_flow_steer`,
//! `rps_may_expire_flow`, `softnet_data` and the like.
//!
//! Nothing here needs root, libbpf or hwloc: topology comes in as a
//! [`cpu::CpuLayout`] built by the caller.
//!
//! `unsafe` is denied crate-wide. The one place allowed it is the ring's
//! slot handling (the slot buffer, the producer, the consumer and the
//! shared state in [`ring`]), each `unsafe` block with its `// SAFETY:`
//! argument.
#![deny(unsafe_code)]
#![cfg_attr(not(any(test, loom)), deny(clippy::unwrap_used))]

pub mod balance;
pub mod cpu;
pub mod dispatch;
pub mod flow;
pub mod hook;
pub mod packet;
pub mod policy;
pub mod record;
pub mod ring;
pub mod runtime;
pub mod sim;
pub mod stats;
pub mod table;
pub mod wake;
