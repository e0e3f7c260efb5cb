//! One application thread's recording handle ([`KernelRecorder`], the
//! `rps_record_sock_flow` analog for kernel sockets): where the calling
//! thread runs goes through steer-core's `Recorder` (the desired-CPU table
//! and its update rule, `llc` or `always`), and a write places the flow in
//! the RFS program's map through the hook.
//!
//! Invariants: a record the rule suppresses, or that finds the flow on the
//! same CPU, makes no system call (the CPU comes from rseq/vDSO, the
//! allowed set is cached); only a desired-table write reaches the hook.

use std::os::fd::AsFd;
use std::sync::Arc;

use steer_core::record::{CpuProbe, Recorder};

use crate::shared::{Recorded, Shared};
use crate::socket::SocketTuple;
use crate::{KernelError, SteeredFlow};

/// One thread's handle for recording the sockets it reads.
///
/// ```
/// use std::sync::Arc;
/// use steer_core::cpu::{CpuLayout, CpuSet};
/// use steer_core::record::CpuProbe;
/// use steer_kernel::hook::tests_support::FakeBackend;
/// use steer_kernel::{KernelSteering, Policy};
///
/// struct On(usize);
/// impl CpuProbe for On {
///     fn current_cpu(&self) -> usize { self.0 }
///     fn allowed_cpus(&self) -> CpuSet { CpuSet::first(2) }
/// }
/// let backend = Arc::new(FakeBackend::default());
/// let layout = Arc::new(CpuLayout::uniform(2, 1).unwrap()); // two LLCs
/// let steering = KernelSteering::with_backend(backend.clone(), layout, CpuSet::first(2), Policy::LlcAffinity, 256).unwrap();
/// let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
/// a.connect("127.0.0.1:9").unwrap();
/// let mut rec = steering.recorder_with(On(1));
/// assert!(rec.record(&a).unwrap().updated()); // placed on CPU 1
/// assert!(!rec.record(&a).unwrap().updated()); // same CPU: nothing
/// assert_eq!(backend.writes(), 1);
/// ```
pub struct KernelRecorder<P: CpuProbe> {
    shared: Arc<Shared>,
    recorder: Recorder<P>,
}

impl<P: CpuProbe> std::fmt::Debug for KernelRecorder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelRecorder")
            .field("recorder", &self.recorder)
            .finish_non_exhaustive()
    }
}

impl<P: CpuProbe> KernelRecorder<P> {
    pub(crate) fn new(shared: Arc<Shared>, probe: P) -> Self {
        let recorder = Recorder::new(shared.table.clone(), shared.layout.clone(), probe);
        Self { shared, recorder }
    }

    /// The calling thread read `flow`: record where it runs. Cheap unless
    /// the record moves the flow (then one map update).
    #[inline]
    pub fn record_flow(&mut self, flow: &SteeredFlow) -> Result<Recorded, KernelError> {
        let (cpu, outcome) = self.recorder.record_on(flow.hash());
        let outcome = outcome?;
        if !outcome.wrote() {
            return Ok(Recorded::Unchanged(outcome));
        }
        self.shared.place(flow.tuple(), flow.hash(), cpu, None)
    }

    /// The calling thread read the connected TCP or UDP `socket` (a std,
    /// tokio or mio stream or socket, or any fd): record where it runs.
    /// Reads the socket's addresses each time (two system calls); keep a
    /// [`SteeredFlow`] to record on every read instead. A UDP socket gets
    /// the program's delivery counter when its flow is first placed.
    pub fn record(&mut self, socket: &impl AsFd) -> Result<Recorded, KernelError> {
        let tuple = SocketTuple::of(socket)?;
        let hash = self.shared.hash(&tuple);
        let (cpu, outcome) = self.recorder.record_on(hash);
        let outcome = outcome?;
        if !outcome.wrote() {
            return Ok(Recorded::Unchanged(outcome));
        }
        self.shared.place(&tuple, hash, cpu, Some(socket.as_fd()))
    }

    /// Re-reads the thread's allowed CPUs (call it after changing the
    /// thread's affinity).
    pub fn refresh_affinity(&mut self) {
        self.recorder.refresh_affinity();
    }
}
