//! The engine's own per-CPU counters (what steer-core's dispatch counters do
//! not see: transmit and the application's verdicts), one cache-padded block
//! per CPU, flushed once per batch like `steer_core::stats`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;
use serde::Serialize;
use steer_core::cpu::CpuId;

/// One worker's counts since its last flush (or, in a snapshot, in total).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkerCounts {
    /// Replies put on the tx ring.
    pub tx: u64,
    /// Replies recycled because the tx ring stayed full.
    pub tx_dropped: u64,
    /// Packets the handler consumed without a reply.
    pub consumed: u64,
    /// Packets the handler refused.
    pub app_dropped: u64,
    /// Packets whose handler panicked (the frame is returned; the worker
    /// stops and is routed around).
    pub app_panicked: u64,
}

impl WorkerCounts {
    /// Field-wise sum.
    pub fn add(&mut self, o: &WorkerCounts) {
        self.tx += o.tx;
        self.tx_dropped += o.tx_dropped;
        self.consumed += o.consumed;
        self.app_dropped += o.app_dropped;
        self.app_panicked += o.app_panicked;
    }
}

#[derive(Debug, Default)]
struct Block {
    tx: AtomicU64,
    tx_dropped: AtomicU64,
    consumed: AtomicU64,
    app_dropped: AtomicU64,
    app_panicked: AtomicU64,
}

/// All CPUs' engine counters.
#[derive(Debug)]
pub(crate) struct EngineCounters {
    blocks: Vec<CachePadded<Block>>,
}

impl EngineCounters {
    pub(crate) fn new(nr_cpus: usize) -> Self {
        Self {
            blocks: (0..nr_cpus)
                .map(|_| CachePadded::new(Block::default()))
                .collect(),
        }
    }

    /// Adds `local` into `cpu`'s block and zeroes it.
    pub(crate) fn flush(&self, cpu: CpuId, local: &mut WorkerCounts) {
        if let Some(b) = self.blocks.get(cpu) {
            for (counter, v) in [
                (&b.tx, local.tx),
                (&b.tx_dropped, local.tx_dropped),
                (&b.consumed, local.consumed),
                (&b.app_dropped, local.app_dropped),
                (&b.app_panicked, local.app_panicked),
            ] {
                if v != 0 {
                    counter.fetch_add(v, Relaxed);
                }
            }
        }
        *local = WorkerCounts::default();
    }

    pub(crate) fn load(&self, cpu: CpuId) -> WorkerCounts {
        self.blocks
            .get(cpu)
            .map(|b| WorkerCounts {
                tx: b.tx.load(Relaxed),
                tx_dropped: b.tx_dropped.load(Relaxed),
                consumed: b.consumed.load(Relaxed),
                app_dropped: b.app_dropped.load(Relaxed),
                app_panicked: b.app_panicked.load(Relaxed),
            })
            .unwrap_or_default()
    }
}
