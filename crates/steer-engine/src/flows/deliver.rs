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
//! backlog full, queue full), so readers cannot hold UMEM frames. The cache
//! holds open flows plus closed ones not yet swept, at most about twice the
//! open ones plus a constant.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use steer_core::flow::{flow_key, FlowKey};
use steer_core::packet::{ip_proto, parse};

use super::flow::FlowShared;
use super::Hub;
use crate::engine::{PacketContext, PacketHandler, Verdict};

/// Flushes between sweeps of closed flows out of the worker's cache.
const CACHE_SWEEP_EVERY: u32 = 1024;
/// Entries the cache may grow by past twice its last swept size before it
/// is swept early.
const SWEEP_SLACK: usize = 1024;

/// One worker's demultiplexer.
pub(crate) struct FlowDemux {
    hub: Arc<Hub>,
    cache: HashMap<FlowKey, Arc<FlowShared>>,
    touched: Vec<Arc<FlowShared>>,
    flushes: u32,
    /// The cache size that triggers an early sweep.
    sweep_at: usize,
    /// The flows' tasks run on this worker's thread.
    tasks_here: bool,
}

impl FlowDemux {
    pub(crate) fn new(hub: Arc<Hub>, tasks_here: bool) -> Self {
        Self {
            hub,
            cache: HashMap::new(),
            touched: Vec::new(),
            flushes: 0,
            sweep_at: SWEEP_SLACK,
            tasks_here,
        }
    }

    fn flow(
        &mut self,
        key: FlowKey,
        packet: &[u8],
        ctx: &PacketContext,
    ) -> Option<Arc<FlowShared>> {
        if let Some(f) = self.cache.get(&key) {
            if !f.closed.load(Ordering::Relaxed) {
                // The dispatcher's hash for a 5-tuple does not change (the
                // NIC's hash is a function of it, as is ours); should it
                // (a NIC reprogrammed with another key), follow it.
                if ctx.hash() != 0 && f.hash.load(Ordering::Relaxed) != ctx.hash() {
                    f.hash.store(ctx.hash(), Ordering::Relaxed);
                }
                return Some(Arc::clone(f));
            }
            self.cache.remove(&key);
        }
        let f = self.hub.flow_for(key, ctx.hash(), packet, ctx.cpu)?;
        self.cache.insert(key, Arc::clone(&f));
        Some(f)
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
        self.flushes = self.flushes.wrapping_add(1);
        // Closed flows leave the cache every so many rounds, or sooner when
        // it has doubled since the last sweep (a spray of new flows evicts
        // them faster than rounds go by).
        if self.flushes % CACHE_SWEEP_EVERY == 0 || self.cache.len() > self.sweep_at {
            self.cache.retain(|_, f| !f.closed.load(Ordering::Relaxed));
            self.sweep_at = 2 * self.cache.len() + SWEEP_SLACK;
        }
    }
}
