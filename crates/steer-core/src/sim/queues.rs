//! The queue model of the simulation: one ring per (rx queue, worker CPU)
//! with the two monotonic counters the rx-queue table reads, and one
//! server per CPU that handles what was queued to it in arrival order.
//!
//! A packet queued at time `t` on CPU `c` is handled from
//! `max(t, busy_until[c])` for `service_ns`, so `c`'s ring head (`dequeued`)
//! passes it at `busy_until[c]`; a packet run inline (the fast path, or no
//! ring) takes the same CPU time but touches no ring counter. Completions
//! come out in time order (ties in the order they were scheduled), which is
//! what makes the simulation deterministic.
//!
//! Invariants: for every ring `dequeued <= enqueued <= dequeued + capacity`;
//! a ring's head moves only when a completion of that ring is taken.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::cpu::{CpuId, CpuSet};

/// A packet whose handling finishes at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Done {
    /// When the handler returns (ns).
    pub(super) at: u64,
    /// Scheduling order, for ties.
    pub(super) seq: u64,
    /// The CPU that handles it.
    pub(super) cpu: CpuId,
    /// The rx queue whose ring it sat in; `None` when it ran inline.
    pub(super) ring: Option<u32>,
    /// Its flow hash.
    pub(super) hash: u32,
}

/// The rings and CPU servers.
#[derive(Debug)]
pub(super) struct Queues {
    nr_cpus: usize,
    workers: CpuSet,
    capacity: u64,
    service_ns: u64,
    /// `[rxq * nr_cpus + cpu]`.
    enqueued: Vec<u64>,
    /// `[rxq * nr_cpus + cpu]`.
    dequeued: Vec<u64>,
    busy_until: Vec<u64>,
    pending: BinaryHeap<Reverse<Done>>,
    seq: u64,
    deepest: u64,
}

impl Queues {
    pub(super) fn new(
        queues: usize,
        nr_cpus: usize,
        workers: CpuSet,
        capacity: usize,
        service_ns: u64,
    ) -> Self {
        Self {
            nr_cpus,
            workers,
            capacity: capacity as u64,
            service_ns,
            enqueued: vec![0; queues * nr_cpus],
            dequeued: vec![0; queues * nr_cpus],
            busy_until: vec![0; nr_cpus],
            pending: BinaryHeap::new(),
            seq: 0,
            deepest: 0,
        }
    }

    fn index(&self, rxq: u32, cpu: CpuId) -> Option<usize> {
        (cpu < self.nr_cpus).then(|| rxq as usize * self.nr_cpus + cpu)
    }

    /// Ring `rxq -> cpu`'s head, `None` when `cpu` has no worker.
    pub(super) fn dequeued(&self, rxq: u32, cpu: CpuId) -> Option<u64> {
        if !self.workers.contains(cpu) {
            return None;
        }
        self.index(rxq, cpu)
            .and_then(|i| self.dequeued.get(i).copied())
    }

    /// Whether `cpu` has a worker (and so rings).
    pub(super) fn has_worker(&self, cpu: CpuId) -> bool {
        self.workers.contains(cpu)
    }

    /// Queues a packet of `hash` from rx queue `rxq` on `cpu` at `now`;
    /// returns the ring's new tail (`enqueued`), or `None` when the ring is
    /// full (the packet is dropped).
    pub(super) fn enqueue(&mut self, rxq: u32, cpu: CpuId, hash: u32, now: u64) -> Option<u64> {
        let i = self.index(rxq, cpu)?;
        let (tail, head) = (*self.enqueued.get(i)?, *self.dequeued.get(i)?);
        if tail - head >= self.capacity {
            return None;
        }
        self.deepest = self.deepest.max(tail + 1 - head);
        self.enqueued[i] = tail + 1;
        self.schedule(cpu, Some(rxq), hash, now);
        Some(tail + 1)
    }

    /// Runs a packet of `hash` inline on `cpu` at `now`.
    pub(super) fn inline(&mut self, cpu: CpuId, hash: u32, now: u64) {
        self.schedule(cpu, None, hash, now);
    }

    fn schedule(&mut self, cpu: CpuId, ring: Option<u32>, hash: u32, now: u64) {
        let Some(busy) = self.busy_until.get_mut(cpu) else {
            return;
        };
        let at = (*busy).max(now) + self.service_ns;
        *busy = at;
        self.seq += 1;
        self.pending.push(Reverse(Done {
            at,
            seq: self.seq,
            cpu,
            ring,
            hash,
        }));
    }

    /// Takes the next completion due at or before `until`, moving its
    /// ring's head.
    pub(super) fn next_done(&mut self, until: u64) -> Option<Done> {
        let Reverse(next) = *self.pending.peek()?;
        if next.at > until {
            return None;
        }
        self.pending.pop();
        if let Some(i) = next.ring.and_then(|rxq| self.index(rxq, next.cpu)) {
            if let Some(head) = self.dequeued.get_mut(i) {
                *head += 1;
            }
        }
        Some(next)
    }

    /// The most packets any one ring held at once.
    pub(super) fn deepest(&self) -> u64 {
        self.deepest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_serves_in_order_and_heads_move_on_completion() {
        let mut q = Queues::new(1, 2, CpuSet::first(2), 2, 10);
        assert_eq!(q.enqueue(0, 1, 7, 0), Some(1));
        assert_eq!(q.enqueue(0, 1, 7, 0), Some(2));
        assert_eq!(q.enqueue(0, 1, 7, 0), None, "capacity 2");
        q.inline(1, 9, 0);
        assert_eq!(q.dequeued(0, 1), Some(0));
        assert!(q.next_done(9).is_none());
        let d = q.next_done(10).unwrap();
        assert_eq!((d.at, d.ring, q.dequeued(0, 1)), (10, Some(0), Some(1)));
        let d = q.next_done(100).unwrap();
        assert_eq!((d.at, q.dequeued(0, 1)), (20, Some(2)));
        // The inline packet waited for the CPU, moved no head.
        let d = q.next_done(100).unwrap();
        assert_eq!((d.at, d.ring, d.hash), (30, None, 9));
        assert_eq!(q.deepest(), 2);
        assert_eq!(q.dequeued(0, 5), None);
    }
}
