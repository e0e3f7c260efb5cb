//! What every dispatcher shares with the rest of the engine: the
//! desired-CPU table the consumers record into, the CPU layout, the per-CPU
//! counters, the pins, the run-time switches and the load balancer's
//! per-bucket counts and assignments.
//!
//! Every part sits behind an `Arc`, so a [`Shared`] is cheap to clone: each
//! dispatcher holds one clone, and so can the application (recorders, flow
//! delivery, monitoring). The parts are all safe to read and write from any
//! thread.
//!
//! A [`Shared`] exists before any dispatcher: build it with [`Shared::new`]
//! (or `RuntimeConfig::shared` in [`crate::runtime`]), hand clones to
//! whatever needs the tables, then start the dispatchers on it.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use super::Pins;
use crate::balance::BalanceShared;
use crate::cpu::CpuLayout;
use crate::policy::Policy;
use crate::stats::Stats;
use crate::table::{DesiredCpuTable, TableError};

/// Dispatcher settings that can change at run time, shared with the engine.
#[derive(Debug)]
pub struct DispatchSwitches {
    /// Run same-CPU packets inline (the fast path).
    pub fast_path: AtomicBool,
    /// Apply the per-CPU flow limit.
    #[doc(alias = "flow_limit_cpu_bitmap")]
    pub flow_limit: AtomicBool,
    /// Workers that exited after dropping their rings (bumped by the
    /// runtime); a dispatcher that sees it change takes back whatever was
    /// left in rings without a consumer.
    pub worker_exits: AtomicU64,
    /// Times CPUs went offline or came back online (bumped by whoever
    /// watches the machine, after updating the layout); a worker that sees
    /// it change prepares its thread again ([`Setup::prepare_thread`](crate::runtime::Setup::prepare_thread):
    /// pinning), since the kernel moved it off its CPU while the CPU was
    /// offline.
    pub layout_epoch: AtomicU64,
}

impl Default for DispatchSwitches {
    fn default() -> Self {
        Self {
            fast_path: AtomicBool::new(true),
            flow_limit: AtomicBool::new(false),
            worker_exits: AtomicU64::new(0),
            layout_epoch: AtomicU64::new(0),
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
    /// The load balancer's switch, per-bucket counts and assignments, and
    /// counters.
    pub balance: Arc<BalanceShared>,
}

impl Shared {
    /// Fresh shared state for the CPUs of `layout`: an empty desired-CPU
    /// table of `desired_entries` slots (a power of two) under `policy`,
    /// zeroed counters for every CPU of the layout, no pins, and the default
    /// switches (fast path on, flow limit off, balancer off).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use steer_core::cpu::{CpuLayout, CpuSet};
    /// use steer_core::dispatch::Shared;
    /// use steer_core::policy::Policy;
    ///
    /// let layout = Arc::new(CpuLayout::uniform(4, 2).unwrap());
    /// let shared = Shared::new(layout.clone(), 1024, Policy::LlcAffinity).unwrap();
    /// // Usable before any dispatcher runs: record a consumer's CPU, pin a port.
    /// shared.desired.record(0x1234, 3, &CpuSet::first(4), &layout).unwrap();
    /// shared.pins.pin_port(53, 1);
    /// assert_eq!(shared.desired.lookup(0x1234), Some(3));
    /// assert_eq!(shared.stats.nr_cpus(), 4);
    /// assert!(Shared::new(layout, 1000, Policy::Always).is_err()); // not a power of two
    /// ```
    pub fn new(
        layout: Arc<CpuLayout>,
        desired_entries: usize,
        policy: Policy,
    ) -> Result<Self, TableError> {
        let nr = layout.nr_cpus();
        Ok(Self {
            desired: Arc::new(DesiredCpuTable::with_policy(desired_entries, nr, policy)?),
            stats: Arc::new(Stats::new(nr)),
            layout,
            pins: Pins::new(),
            switches: Arc::new(DispatchSwitches::default()),
            balance: Arc::default(),
        })
    }
}
