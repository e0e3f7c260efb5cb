//! What every dispatcher shares with the rest of the engine: the
//! desired-CPU table the consumers record into, the CPU layout, the per-CPU
//! counters, the pins and the run-time switches.
//!
//! Every part sits behind an `Arc`, so a [`Shared`] is cheap to clone: each
//! dispatcher holds one clone, and so can the application (recorders, flow
//! delivery, monitoring). The parts are all safe to read and write from any
//! thread.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use super::Pins;
use crate::cpu::CpuLayout;
use crate::stats::Stats;
use crate::table::DesiredCpuTable;

/// Dispatcher settings that can change at run time, shared with the engine.
#[derive(Debug)]
pub struct DispatchSwitches {
    /// Run same-CPU packets inline (the fast path).
    pub fast_path: AtomicBool,
    /// Apply the per-CPU flow limit.
    pub flow_limit: AtomicBool,
    /// Workers that exited after dropping their rings (bumped by the
    /// runtime); a dispatcher that sees it change takes back whatever was
    /// left in rings without a consumer.
    pub worker_exits: AtomicU64,
}

impl Default for DispatchSwitches {
    fn default() -> Self {
        Self {
            fast_path: AtomicBool::new(true),
            flow_limit: AtomicBool::new(false),
            worker_exits: AtomicU64::new(0),
        }
    }
}

/// What a dispatcher shares with the rest of the engine.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The desired-CPU table the consumers record into.
    pub desired: Arc<DesiredCpuTable>,
    /// Which CPU is behind which LLC, and which are online.
    pub layout: Arc<CpuLayout>,
    /// Per-CPU counters.
    pub stats: Arc<Stats>,
    /// Explicit flow and port pins.
    pub pins: Arc<Pins>,
    /// Run-time switches.
    pub switches: Arc<DispatchSwitches>,
}
