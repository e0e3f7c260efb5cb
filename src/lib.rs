//! steer: userspace RPS/RFS on AF_XDP.
//!
//! This facade re-exports the member crates, so an application needs one
//! dependency and short paths:
//! - [`core`] (`steer-core`): flow hashing, flow tables, the LLC-affinity
//!   update rule, rings and dispatch, as pure logic;
//! - [`topology`]: CPU, LLC and NUMA discovery (hwloc, sysfs, synthetic, XML);
//! - [`xdp`] (`steer-xdp`, feature `xdp`): AF_XDP sockets, UMEM and the XDP program;
//! - [`engine`], [`flows`], [`echo`], [`sleep`], [`probe`] (`steer-engine`,
//!   feature `xdp`): the engine on an AF_XDP port and flow delivery for proxies;
//! - [`observe`] (`steer-engine`, feature `xdp`): a running engine seen from
//!   outside: its stats socket and Prometheus metrics.
//! - [`kernel`] (`steer-kernel`, feature `xdp`): steer's flow table steering
//!   kernel TCP and UDP sockets (XDP RFS through a cpumap).
//!
//! The `steer` command (echo server, proxy, replay, topology, stats, top) is
//! the `steer-cli` package; its dependencies (clap, tracing-subscriber,
//! ratatui) do not reach this library.

pub use steer_core as core;
pub use steer_topology as topology;
#[cfg(feature = "xdp")]
pub use steer_xdp as xdp;

#[cfg(feature = "xdp")]
pub use steer_engine::{echo, engine, flows, observe, probe, sleep};
#[cfg(feature = "xdp")]
pub use steer_kernel as kernel;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(all(doctest, feature = "xdp"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
