//! The L4 UDP echo (a reply rewritten in place) and sockperf's reply rule.
//! It is pure packet logic and lives in steer-core
//! ([`steer_core::packet::echo`]); this re-export keeps the engine's and the
//! facade's `echo` paths.

pub use steer_core::packet::echo::*;
