//! The worker side of flow delivery: a [`PacketHandler`] per worker that
//! finds each datagram's flow (a per-worker cache in front of the engine's
//! flow map), copies the payload into the flow's queue, and wakes readers
//! once per batch. A flow takes the hash its packets were dispatched under
//! ([`PacketContext::hash`]), so reading it records the reader's CPU under
//! the very hash the dispatcher looks up, whichever hash that is. When the
//! flows' tasks run on the workers themselves, the batch's end is also
//! where they run: the readers are woken inside the worker's runtime and
//! the ready tasks run before the round ends (`crate::tasks::tick`).
//!
//! Invariant: the frame is never kept: every packet ends as `Consume`
//! (delivered) or `Drop` (not a UDP datagram, refused by the flow budget,
//! backlog full, queue full), so readers cannot hold UMEM frames. Closed
//! flows leave the cache a few at a time at each flush (a sweep in
//! insertion order that visits at least twice as many entries as were
//! inserted since the last flush, so it keeps up with any rate of new
//! flows), never in one pass over the whole cache: a spray that fills the
//! cache with tens of thousands of flows costs no worker a multi-millisecond
//! stall.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use steer_core::flow::{flow_key, FlowKey};
use steer_core::packet::{ip_proto, parse};

use super::flow::FlowShared;
use super::Hub;
use crate::engine::{PacketContext, PacketHandler, Verdict};

/// Cache entries a flush visits at least, besides two per insertion since
/// the last flush.
const SWEEP_MIN: usize = 8;

/// One worker's demultiplexer.
pub(crate) struct FlowDemux {
    hub: Arc<Hub>,
    cache: FlowCache,
    touched: Vec<Arc<FlowShared>>,
    /// The flows' tasks run on this worker's thread.
    tasks_here: bool,
}

impl FlowDemux {
    pub(crate) fn new(hub: Arc<Hub>, tasks_here: bool) -> Self {
        Self {
            hub,
            cache: FlowCache::default(),
            touched: Vec::new(),
            tasks_here,
        }
    }

    fn flow(
        &mut self,
        key: FlowKey,
        packet: &[u8],
        ctx: &PacketContext,
    ) -> Option<Arc<FlowShared>> {
        if let Some(f) = self.cache.open(&key) {
            // The dispatcher's hash for a 5-tuple does not change (the
            // NIC's hash is a function of it, as is ours); should it (a
            // NIC reprogrammed with another key), follow it.
            if ctx.hash() != 0 && f.hash.load(Ordering::Relaxed) != ctx.hash() {
                f.hash.store(ctx.hash(), Ordering::Relaxed);
            }
            return Some(f);
        }
        let f = self
            .hub
            .flow_for(key, ctx.hash(), packet, ctx.cpu, ctx.from_kernel())?;
        self.cache.insert(key, Arc::clone(&f));
        Some(f)
    }
}

/// A worker's flows by key, with closed ones swept out a few at a time
/// (see the module docs).
#[derive(Default)]
struct FlowCache {
    map: HashMap<FlowKey, Arc<FlowShared>>,
    /// The keys in insertion order, each with its entry's address (an
    /// entry replaced under the same key leaves a stale one behind, dropped
    /// when reached): the sweep's cursor.
    order: VecDeque<(FlowKey, usize)>,
    /// Insertions since the last sweep.
    inserted: usize,
}

impl FlowCache {
    /// The open flow of `key`; a closed one found there leaves the cache.
    fn open(&mut self, key: &FlowKey) -> Option<Arc<FlowShared>> {
        let f = self.map.get(key)?;
        if !f.closed.load(Ordering::Relaxed) {
            return Some(Arc::clone(f));
        }
        self.map.remove(key);
        None
    }

    fn insert(&mut self, key: FlowKey, f: Arc<FlowShared>) {
        self.order.push_back((key, Arc::as_ptr(&f) as usize));
        self.inserted += 1;
        self.map.insert(key, f);
    }

    /// Visits the oldest entries, at least twice as many as were inserted
    /// since the last sweep: closed ones leave, open ones go to the back,
    /// stale cursor entries are dropped.
    fn sweep(&mut self) {
        let visits = (2 * self.inserted + SWEEP_MIN).min(self.order.len());
        self.inserted = 0;
        for _ in 0..visits {
            let Some((key, addr)) = self.order.pop_front() else {
                break;
            };
            let Some(f) = self.map.get(&key) else {
                continue;
            };
            if Arc::as_ptr(f) as usize != addr {
                // Replaced since: the new entry has its own place.
                continue;
            }
            if f.closed.load(Ordering::Relaxed) {
                self.map.remove(&key);
            } else {
                self.order.push_back((key, addr));
            }
        }
    }
}

impl PacketHandler for FlowDemux {
    fn handle(&mut self, packet: &mut [u8], ctx: &PacketContext) -> Verdict {
        let Ok(Some(layers)) = parse(packet) else {
            return Verdict::Drop;
        };
        if layers.protocol != ip_proto::UDP || layers.fragment.is_some() {
            return Verdict::Drop;
        }
        let (Ok(Some(key)), Ok(range)) = (flow_key(packet), layers.payload_range(packet)) else {
            return Verdict::Drop;
        };
        let Some(flow) = self.flow(key, packet, ctx) else {
            return Verdict::Drop;
        };
        if !flow.deliver(packet[range].to_vec()) {
            return Verdict::Drop;
        }
        if !self.touched.last().is_some_and(|t| Arc::ptr_eq(t, &flow)) {
            self.touched.push(flow);
        }
        Verdict::Consume
    }

    fn flush(&mut self) {
        let woken = self.touched.len();
        let touched = &mut self.touched;
        let mut wake = || {
            for f in touched.drain(..) {
                f.readiness.notify();
            }
        };
        if self.tasks_here {
            // Every round with work, even one that filled no flow: the
            // tasks' sockets and timers are polled here while busy.
            crate::tasks::tick(woken, wake);
        } else {
            wake();
        }
        self.cache.sweep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::reply::ReplyTemplate;
    use steer_core::packet::build::FrameBuilder;

    fn flow(sport: u16) -> (FlowKey, Arc<FlowShared>) {
        let f = FrameBuilder::udp(
            "198.19.0.1".parse().unwrap(),
            "192.0.2.1".parse().unwrap(),
            sport,
            7000,
        )
        .payload(b"x")
        .build();
        let key = flow_key(&f).unwrap().unwrap();
        let shared = FlowShared::new(key, 1, 4, ReplyTemplate::from_request(&f).unwrap(), 0, 0);
        (key, Arc::new(shared))
    }

    /// A spray: flows inserted and closed at once, a flush every 4
    /// insertions. The cache never holds more than a few flushes' worth of
    /// closed flows, and each flush visits a bounded number of entries,
    /// whatever the number of flows seen; open flows stay.
    #[test]
    fn closed_flows_leave_a_few_at_a_time_and_open_ones_stay() {
        let mut cache = FlowCache::default();
        let kept: Vec<_> = (1..=100).map(flow).collect();
        for (k, f) in &kept {
            cache.insert(*k, Arc::clone(f));
        }
        cache.sweep();
        for sport in 1000..41_000u16 {
            let (k, f) = flow(sport);
            f.closed.store(true, Ordering::Relaxed);
            cache.insert(k, f);
            if sport % 4 == 0 {
                let before = cache.order.len();
                cache.sweep();
                assert!(before - cache.order.len() <= 2 * 4 + SWEEP_MIN);
                assert!(cache.map.len() <= 100 + 2 * 4 + 128, "{}", cache.map.len());
            }
        }
        for (k, _) in &kept {
            assert!(cache.open(k).is_some());
        }
        // Quiet again: a few sweeps empty it of closed flows.
        for _ in 0..100 {
            cache.sweep();
        }
        assert_eq!(cache.map.len(), 100);
    }

    /// A key whose flow closed and came back: the stale cursor entry is
    /// dropped, the new flow is swept by its own.
    #[test]
    fn a_replaced_entry_is_swept_by_its_own_place() {
        let mut cache = FlowCache::default();
        let (k, old) = flow(5);
        cache.insert(k, Arc::clone(&old));
        old.closed.store(true, Ordering::Relaxed);
        assert!(cache.open(&k).is_none(), "a closed flow is not handed out");
        let (_, new) = flow(5);
        cache.insert(k, Arc::clone(&new));
        cache.sweep();
        assert!(Arc::ptr_eq(&cache.open(&k).unwrap(), &new));
        assert_eq!(cache.order.len(), 1);
        new.closed.store(true, Ordering::Relaxed);
        cache.sweep();
        assert!(cache.map.is_empty() && cache.order.is_empty());
    }
}
