//! What one kernel-socket steering shares with its recorders, its flows'
//! handles and its sweeper ([`Shared`]): the desired-CPU table, the topology,
//! the flow hasher, the CPUs flows may go to, the hook writing the RFS
//! program's map, and the counters; and what a record did ([`Recorded`]).
//! `place` is the one way a flow reaches the map.
//!
//! Invariants: the hook is behind one mutex, taken only on desired-table
//! writes, forgets and sweeps; a flow is placed only on a CPU of `cpus`
//! (others are counted as not steerable); a write naming the CPU the map
//! holds already makes no system call.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::flow::{FlowHasher, KeyedHasher};
use steer_core::hook::{FlowMove, SteerHook};
use steer_core::policy::RecordOutcome;
use steer_core::table::DesiredCpuTable;
use steer_xdp::Proto;

use crate::checksum::ChecksumWatch;
use crate::hook::MapHook;
use crate::socket::SocketTuple;
use crate::KernelError;

/// What a record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The desired table kept the flow's CPU (the rule suppressed the
    /// change, or nothing changed): no update.
    Unchanged(RecordOutcome),
    /// The table was written but the program's map already held that CPU.
    Kept,
    /// The flow was placed on `to` (from `from`): one map update.
    Steered {
        /// The CPU the map held before, if any.
        from: Option<CpuId>,
        /// The CPU it holds now.
        to: CpuId,
    },
    /// The thread ran on a CPU flows are not steered to.
    NotSteerable(CpuId),
}

impl Recorded {
    /// Whether the record cost a map update.
    pub fn updated(&self) -> bool {
        matches!(self, Self::Steered { .. })
    }
}

/// What the recorders, flows and the sweeper share.
pub(crate) struct Shared {
    pub(crate) table: Arc<DesiredCpuTable>,
    pub(crate) layout: Arc<CpuLayout>,
    pub(crate) hasher: KeyedHasher,
    pub(crate) cpus: CpuSet,
    pub(crate) hook: Mutex<MapHook>,
    /// Flows of the in-kernel recorder forgotten once idle.
    pub(crate) in_kernel_forgotten: AtomicU64,
    pub(crate) not_steerable: AtomicU64,
    pub(crate) checksums: ChecksumWatch,
}

impl Shared {
    /// The hook, behind its mutex (a poisoned lock is taken anyway: the
    /// hook's state stays consistent across a panicking caller).
    pub(crate) fn hook(&self) -> MutexGuard<'_, MapHook> {
        self.hook.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The flow hash the desired table uses for `tuple`.
    pub(crate) fn hash(&self, tuple: &SocketTuple) -> u32 {
        self.hasher.hash(&tuple.flow_key())
    }

    /// A desired-table write put `tuple`'s flow on `cpu`: place it in the
    /// program's map (a no-op when it is there already). A new UDP flow
    /// gets the delivery counter on `socket` first.
    pub(crate) fn place(
        &self,
        tuple: &SocketTuple,
        hash: u32,
        cpu: CpuId,
        socket: Option<BorrowedFd<'_>>,
    ) -> Result<Recorded, KernelError> {
        if !self.cpus.contains(cpu) {
            self.not_steerable.fetch_add(1, Ordering::Relaxed);
            return Ok(Recorded::NotSteerable(cpu));
        }
        let key = tuple.map_key();
        let mut hook = self.hook();
        let from = hook.cpu_of(&key);
        if from == Some(cpu) {
            return Ok(Recorded::Kept);
        }
        if from.is_none() && tuple.proto == Proto::Udp {
            if let Some(fd) = socket {
                hook.backend().attach_socket(fd)?;
            }
        }
        let mv = FlowMove {
            rxq: 0,
            bucket: (hash as usize) & (self.table.len() - 1),
            hash,
            key: Some(tuple.flow_key()),
            from,
            to: cpu,
            filter: None,
        };
        hook.steer(&mv)?;
        Ok(Recorded::Steered { from, to: cpu })
    }

    pub(crate) fn attach_socket(&self, socket: BorrowedFd<'_>) -> Result<(), KernelError> {
        Ok(self.hook().backend().attach_socket(socket)?)
    }

    pub(crate) fn forget(&self, tuple: &SocketTuple) {
        self.hook().forget(&tuple.map_key());
    }
}
