//! steer: userspace RPS/RFS on AF_XDP.
//!
//! This facade re-exports the member crates:
//! - [`core`] (`steer-core`): flow hashing, flow tables, the LLC-affinity
//!   update rule, rings and dispatch, as pure logic;
//! - [`topology`]: CPU, LLC and NUMA discovery (hwloc, sysfs, synthetic, XML);
//! - [`xdp`] (`xdp-io`, feature `xdp`): AF_XDP sockets, UMEM and the XDP program.

pub use steer_core as core;
pub use topology;
#[cfg(feature = "xdp")]
pub use xdp_io as xdp;

pub mod echo;
#[cfg(feature = "xdp")]
pub mod engine;
#[cfg(feature = "xdp")]
pub mod flows;
pub mod probe;
pub mod report;
pub mod sleep;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
