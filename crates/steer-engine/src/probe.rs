//! The live [`CpuProbe`] for [`Recorder`](steer_core::record::Recorder):
//! the current CPU from `sched_getcpu` (rseq/vDSO) and the allowed set from
//! `sched_getaffinity`, through the topology crate.

use steer_core::cpu::{CpuId, CpuSet};
use steer_core::record::CpuProbe;
use topology::thread;

/// Probes the calling thread on the live machine.
///
/// ```
/// use std::sync::Arc;
/// use steer_core::record::Recorder;
/// use steer_core::table::DesiredCpuTable;
/// let topo = topology::Topology::live().unwrap();
/// let table = Arc::new(DesiredCpuTable::new(4096, topo.nr_cpus()).unwrap());
/// let mut rec = Recorder::new(table.clone(), topo.layout(), steer_engine::probe::LiveProbe);
/// rec.record(0xfeed).unwrap();
/// assert!(table.lookup(0xfeed).is_some());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveProbe;

impl CpuProbe for LiveProbe {
    fn current_cpu(&self) -> CpuId {
        // sched_getcpu cannot fail on Linux >= 2.6.19; 0 is a safe hint.
        thread::current_cpu().unwrap_or(0)
    }

    fn allowed_cpus(&self) -> CpuSet {
        // On failure allow everything: the affinity rule then never forces.
        thread::allowed_cpus().unwrap_or_else(|_| CpuSet::first(steer_core::cpu::MAX_CPUS))
    }
}
