//! The application side of RFS (`rps_record_sock_flow`): a thread that
//! consumes a flow tells the desired-CPU table which CPU it runs on, through
//! the update rule (`Always` or `LlcAffinity`).
//!
//! A [`Recorder`] is one thread's cheap handle: it asks a [`CpuProbe`] for
//! the current CPU on every record (rseq/vDSO `getcpu`, no syscall) and keeps
//! the thread's allowed CPU set cached, re-reading it (`sched_getaffinity`, a
//! syscall) every [`Recorder::REFRESH_EVERY`] records, when the thread shows
//! up on a CPU outside the cached set, or on [`Recorder::refresh_affinity`]
//! (call it after changing the thread's affinity). steer-core does no I/O, so
//! the probe comes from outside: the facade's `LiveProbe` uses the topology
//! crate.

use std::sync::Arc;

use crate::cpu::{CpuId, CpuLayout, CpuSet};
use crate::policy::RecordOutcome;
use crate::table::{DesiredCpuTable, RecordError};

/// Where the calling thread runs and may run.
pub trait CpuProbe {
    /// The CPU the calling thread runs on now.
    fn current_cpu(&self) -> CpuId;
    /// The CPUs the calling thread may run on.
    fn allowed_cpus(&self) -> CpuSet;
}

/// One application thread's handle for recording the flows it consumes.
///
/// ```
/// use std::sync::Arc;
/// use steer_core::cpu::{CpuLayout, CpuSet};
/// use steer_core::policy::{Policy, RecordOutcome};
/// use steer_core::record::{CpuProbe, Recorder};
/// use steer_core::table::DesiredCpuTable;
///
/// struct On(usize);
/// impl CpuProbe for On {
///     fn current_cpu(&self) -> usize { self.0 }
///     fn allowed_cpus(&self) -> CpuSet { CpuSet::first(4) }
/// }
/// let layout = Arc::new(CpuLayout::uniform(4, 2).unwrap());
/// let table = Arc::new(DesiredCpuTable::with_policy(1024, 4, Policy::LlcAffinity).unwrap());
/// let mut rec = Recorder::new(table.clone(), layout, On(2));
/// assert!(rec.record(0x1234).unwrap().wrote());
/// assert_eq!(table.lookup(0x1234), Some(2));
/// ```
#[doc(alias("sock_rps_record_flow", "rps_record_sock_flow"))]
pub struct Recorder<P: CpuProbe> {
    desired: Arc<DesiredCpuTable>,
    layout: Arc<CpuLayout>,
    probe: P,
    allowed: CpuSet,
    since_refresh: u32,
}

impl<P: CpuProbe> std::fmt::Debug for Recorder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("allowed", &self.allowed)
            .finish_non_exhaustive()
    }
}

impl<P: CpuProbe> Recorder<P> {
    /// Records re-use the cached allowed set at most this many times.
    pub const REFRESH_EVERY: u32 = 1024;

    /// A handle recording into `desired` for the calling thread.
    pub fn new(desired: Arc<DesiredCpuTable>, layout: Arc<CpuLayout>, probe: P) -> Self {
        let allowed = probe.allowed_cpus();
        Self {
            desired,
            layout,
            probe,
            allowed,
            since_refresh: 0,
        }
    }

    /// Re-reads the thread's allowed CPUs now.
    pub fn refresh_affinity(&mut self) {
        self.allowed = self.probe.allowed_cpus();
        self.since_refresh = 0;
    }

    /// The calling thread consumed flow `hash`: record its current CPU.
    #[inline]
    pub fn record(&mut self, hash: u32) -> Result<RecordOutcome, RecordError> {
        self.record_on(hash).1
    }

    /// [`Recorder::record`], also saying which CPU it recorded (for tools
    /// that log consumption, such as a trace recorder). The allowed set it
    /// used is [`Recorder::allowed`] right after the call.
    #[inline]
    pub fn record_on(&mut self, hash: u32) -> (CpuId, Result<RecordOutcome, RecordError>) {
        let cpu = self.probe.current_cpu();
        self.since_refresh += 1;
        if self.since_refresh >= Self::REFRESH_EVERY || !self.allowed.contains(cpu) {
            self.refresh_affinity();
        }
        (
            cpu,
            self.desired.record(hash, cpu, &self.allowed, &self.layout),
        )
    }

    /// The thread's allowed CPUs as last read (what records use).
    pub fn allowed(&self) -> &CpuSet {
        &self.allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Policy, WriteReason};
    use std::cell::Cell;
    use std::rc::Rc;

    #[derive(Clone)]
    struct Fake {
        cpu: Rc<Cell<usize>>,
        allowed: Rc<Cell<CpuSet>>,
        reads: Rc<Cell<usize>>,
    }
    impl CpuProbe for Fake {
        fn current_cpu(&self) -> usize {
            self.cpu.get()
        }
        fn allowed_cpus(&self) -> CpuSet {
            self.reads.set(self.reads.get() + 1);
            self.allowed.get()
        }
    }

    #[test]
    fn affinity_is_cached_and_refreshed_when_it_must_be() {
        let layout = Arc::new(CpuLayout::uniform(4, 2).unwrap());
        let table = Arc::new(DesiredCpuTable::with_policy(64, 4, Policy::LlcAffinity).unwrap());
        let fake = Fake {
            cpu: Rc::new(Cell::new(0)),
            allowed: Rc::new(Cell::new(CpuSet::first(4))),
            reads: Rc::new(Cell::new(0)),
        };
        let mut rec = Recorder::new(table.clone(), layout, fake.clone());
        assert!(rec.record(0x100).unwrap().wrote());
        // Same LLC hop: suppressed, and no affinity syscall per record.
        fake.cpu.set(1);
        for _ in 0..100 {
            assert_eq!(rec.record(0x100).unwrap(), RecordOutcome::Suppressed);
        }
        assert_eq!(fake.reads.get(), 1);
        // The thread is restricted to CPU 1; the app says so: forced update.
        fake.allowed.set([1].into_iter().collect());
        rec.refresh_affinity();
        assert_eq!(
            rec.record(0x100).unwrap(),
            RecordOutcome::Written(WriteReason::ForcedAffinity)
        );
        assert_eq!(table.lookup(0x100), Some(1));
        // Showing up outside the cached set re-reads it by itself.
        fake.allowed.set(CpuSet::first(4));
        fake.cpu.set(3);
        let before = fake.reads.get();
        let (cpu, outcome) = rec.record_on(0x100);
        assert_eq!((cpu, outcome.unwrap().wrote()), (3, true));
        assert_eq!(fake.reads.get(), before + 1);
        assert_eq!(*rec.allowed(), CpuSet::first(4));
    }
}
