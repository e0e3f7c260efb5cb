//! The L4 UDP echo (turning a datagram into its reply in place, and
//! sockperf's reply rule) now lives in steer-core, beside the packet views
//! it is built on: [`steer_core::packet::echo`]. Re-exported here so
//! `steer::echo::...` keeps working.

pub use steer_core::packet::echo::*;
