//! [`Dispatcher`]: one rx queue's dispatcher and the per-packet decision
//! (see the [`dispatch`](super) module docs for the steps and the ordering
//! invariant it keeps).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{
    Classifier, FlowLimit, FramePool, Handler, Malformed, PinReader, Shared, PREFETCH_AHEAD,
};
use crate::balance::BucketLoads;
use crate::cpu::{CpuId, CpuSet};
use crate::flow::flow_key;
use crate::hook::{NoopHook, SteerHook};
use crate::ring::{Producer, PushError};
use crate::stats::LocalStats;
use crate::table::{QueueHeads, RxFlowTable, SteerAction, Tick};
use crate::wake::Doorbell;

/// Each CPU's queue head as the rx-queue table sees it: the consumer's
/// dequeue count of this dispatcher's ring to that CPU, `None` when there is
/// no ring or its worker is gone.
struct RingHeads<'a, D>(&'a [Option<Producer<D>>]);

impl<D> QueueHeads for RingHeads<'_, D> {
    #[inline]
    fn dequeued(&self, cpu: CpuId) -> Option<u64> {
        let p = self.0.get(cpu)?.as_ref()?;
        (!p.is_abandoned()).then(|| p.dequeued())
    }
}

/// One rx queue's dispatcher, running on CPU `own_cpu`.
///
/// ```
/// use std::sync::Arc;
/// use steer_core::cpu::{CpuLayout, CpuSet};
/// use steer_core::dispatch::{Dispatcher, FramePool, Pins, Shared};
/// use steer_core::flow::{Classifier, FlowInfo, Malformed};
/// use steer_core::ring;
/// use steer_core::stats::Stats;
/// use steer_core::table::{DesiredCpuTable, RxFlowTable};
///
/// // Frames are indices into a Vec; their first byte is the flow hash.
/// struct Pool(Vec<Vec<u8>>, Vec<usize>);
/// impl FramePool<usize> for Pool {
///     fn frame(&self, d: &usize) -> &[u8] { &self.0[*d] }
///     fn release(&mut self, d: usize) { self.1.push(d) }
/// }
/// struct FirstByte;
/// impl Classifier for FirstByte {
///     fn classify(&mut self, f: &[u8], _: Option<u32>) -> Result<Option<FlowInfo>, Malformed> {
///         Ok(Some(FlowInfo { hash: u32::from(*f.first().ok_or(Malformed)?) + 1, dst_port: 0 }))
///     }
/// }
///
/// let shared = Shared {
///     desired: Arc::new(DesiredCpuTable::new(1024, 2).unwrap()),
///     layout: Arc::new(CpuLayout::uniform(2, 2).unwrap()),
///     stats: Arc::new(Stats::new(2)),
///     pins: Pins::new(),
///     switches: Default::default(),
///     balance: Default::default(),
/// };
/// let (p0, _c0) = ring::channel(64).unwrap();
/// let (p1, mut c1) = ring::channel(64).unwrap();
/// let mut d = Dispatcher::new(0, 0, FirstByte, RxFlowTable::new(0, 256).unwrap(),
///     vec![Some(p0), Some(p1)], CpuSet::first(2), shared.clone());
/// // Flow 7's consumer runs on CPU 1.
/// shared.desired.record(8, 1, &CpuSet::first(2), &shared.layout).unwrap();
/// let mut pool = Pool(vec![vec![7], vec![7]], vec![]);
/// let mut inline = Vec::new();
/// d.dispatch(&[0, 1], &mut pool, &mut |desc, _: &mut Pool| inline.push(desc));
/// assert!(inline.is_empty());
/// assert_eq!(c1.pop_batch(&mut [0; 4]), 2); // both went to CPU 1's ring
/// ```
pub struct Dispatcher<D, C, H: SteerHook = NoopHook> {
    own_cpu: CpuId,
    classifier: C,
    rx_table: RxFlowTable<H>,
    producers: Vec<Option<Producer<D>>>,
    doorbells: Vec<Option<Arc<Doorbell>>>,
    rps_cpus: Vec<CpuId>,
    pins: PinReader,
    /// This rx queue's per-bucket counts and balancer assignments.
    loads: Arc<BucketLoads>,
    flow_limits: Vec<FlowLimit>,
    shared: Shared,
    local: LocalStats,
    rung: CpuSet,
    /// `DispatchSwitches::worker_exits` as last seen.
    seen_worker_exits: u64,
    now: Tick,
    /// Descriptors of the current batch already dispatched (for recovery
    /// when a handler panics mid-batch).
    done_in_batch: usize,
    /// The handler ran packets inline in this batch and has not been
    /// flushed since: their replies may still be staged.
    inline_unflushed: bool,
}

impl<D, C, H> std::fmt::Debug for Dispatcher<D, C, H>
where
    H: SteerHook,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("own_cpu", &self.own_cpu)
            .field("rxq", &self.rx_table.rxq())
            .field("rps_cpus", &self.rps_cpus)
            .finish_non_exhaustive()
    }
}

impl<D: Copy, C: Classifier, H: SteerHook> Dispatcher<D, C, H> {
    /// A dispatcher on CPU `own_cpu` for rx queue `rxq`'s table `rx_table`,
    /// with `producers[cpu]` the ring to each worker CPU (`None`: no worker
    /// there) and `rps_cpus` the CPUs flows without a desire are spread over.
    /// Registers the queue's [`BucketLoads`] with the load balancer
    /// (`shared.balance`).
    pub fn new(
        own_cpu: CpuId,
        _rxq: u32,
        classifier: C,
        rx_table: RxFlowTable<H>,
        producers: Vec<Option<Producer<D>>>,
        rps_cpus: CpuSet,
        shared: Shared,
    ) -> Self {
        let nr = producers.len();
        let rps_cpus: Vec<CpuId> = rps_cpus
            .iter()
            .filter(|&c| c < nr && producers[c].is_some())
            .collect();
        let loads = shared.balance.register(rx_table.rxq(), rx_table.len());
        Self {
            own_cpu,
            classifier,
            loads,
            rx_table,
            doorbells: vec![None; nr],
            flow_limits: vec![FlowLimit::default(); nr],
            producers,
            rps_cpus,
            pins: shared.pins.reader(),
            shared,
            local: LocalStats::default(),
            rung: CpuSet::new(),
            seen_worker_exits: 0,
            now: 0,
            done_in_batch: 0,
            inline_unflushed: false,
        }
    }

    /// Uses `limit` (cloned per target CPU, history cleared) as the flow
    /// limit's table when it is on (default: [`FlowLimit::default`]).
    pub fn set_flow_limit(&mut self, limit: &FlowLimit) {
        let nr = self.flow_limits.len();
        self.flow_limits = vec![limit.clone(); nr];
    }

    /// Sets the bell to ring after queuing packets for `cpu`.
    pub fn set_doorbell(&mut self, cpu: CpuId, bell: Arc<Doorbell>) {
        if let Some(slot) = self.doorbells.get_mut(cpu) {
            *slot = Some(bell);
        }
    }

    /// The CPU this dispatcher runs on.
    pub fn own_cpu(&self) -> CpuId {
        self.own_cpu
    }

    /// Moves the dispatcher to another CPU (its worker died and another
    /// adopted its rx queue).
    pub fn set_own_cpu(&mut self, cpu: CpuId) {
        self.own_cpu = cpu;
    }

    /// The rx-queue flow table (for stats and tests).
    pub fn rx_table(&self) -> &RxFlowTable<H> {
        &self.rx_table
    }

    /// Sets the coarse clock used for flow idleness (e.g. milliseconds).
    pub fn set_tick(&mut self, now: Tick) {
        self.now = now;
    }

    /// Dispatches one batch. Every descriptor ends in the handler (inline),
    /// in a ring, or back in `pool` (counted).
    ///
    /// The caller flushes `handler` after the batch (the runtime does, once
    /// per round); within the batch, a flow moving off this CPU after some
    /// packets ran inline gets a `handler.flush` first, so their replies
    /// leave before any later packet of the flow is queued elsewhere.
    #[doc(alias("get_rps_cpu", "enqueue_to_backlog"))]
    pub fn dispatch<P, F>(&mut self, batch: &[D], pool: &mut P, handler: &mut F)
    where
        P: FramePool<D>,
        F: Handler<D, P> + ?Sized,
    {
        self.local.rx += batch.len() as u64;
        self.dispatch_received(batch, pool, handler);
    }

    /// Dispatches the rest of a batch whose [`Dispatcher::dispatch`] was
    /// interrupted by a panicking handler (the descriptors from
    /// [`Dispatcher::taken_in_batch`] on), with a fresh handler: like
    /// `dispatch`, but they were counted as received already. They are
    /// the next packets of their flows, so order holds.
    pub fn resume<P, F>(&mut self, rest: &[D], pool: &mut P, handler: &mut F)
    where
        P: FramePool<D>,
        F: Handler<D, P> + ?Sized,
    {
        self.dispatch_received(rest, pool, handler);
    }

    fn dispatch_received<P, F>(&mut self, batch: &[D], pool: &mut P, handler: &mut F)
    where
        P: FramePool<D>,
        F: Handler<D, P> + ?Sized,
    {
        self.pins.refresh();
        // The caller flushed after the last batch.
        self.inline_unflushed = false;
        let fast_path = self.shared.switches.fast_path.load(Ordering::Relaxed);
        let flow_limit = self.shared.switches.flow_limit.load(Ordering::Relaxed);
        let balance = self.shared.balance.is_on();
        for desc in batch.iter().take(PREFETCH_AHEAD) {
            pool.prefetch(desc);
        }
        for (i, &desc) in batch.iter().enumerate() {
            if let Some(ahead) = batch.get(i + PREFETCH_AHEAD) {
                pool.prefetch(ahead);
            }
            self.done_in_batch = i + 1;
            self.dispatch_one(desc, pool, handler, fast_path, flow_limit, balance);
        }
        // Frames pushed to a worker that died around our liveness check
        // would be stranded in its ring: take them back (counted in
        // `worker_gone_drops`). Rings pushed to in this batch may have lost their
        // consumer meanwhile; after a worker exit, any ring may hold some.
        let exits = self.shared.switches.worker_exits.load(Ordering::Acquire);
        if exits != self.seen_worker_exits {
            self.seen_worker_exits = exits;
            self.reclaim_from_abandoned_rings(pool, CpuSet::first(self.producers.len()));
        } else {
            self.reclaim_from_abandoned_rings(pool, self.rung);
        }
        self.finish_batch();
    }

    fn reclaim_from_abandoned_rings<P: FramePool<D>>(&mut self, pool: &mut P, cpus: CpuSet) {
        for cpu in cpus.iter() {
            if let Some(p) = self.producers.get_mut(cpu).and_then(Option::as_mut) {
                let local = &mut self.local;
                p.reclaim_abandoned(|d| {
                    local.worker_gone_drops += 1;
                    pool.release(d);
                });
            }
        }
    }

    /// How many descriptors of the last batch were taken by
    /// [`Dispatcher::dispatch`]. After a handler panicked inside it, the
    /// descriptors from this index on were never touched and are still the
    /// caller's to return to the pool (the one that panicked is lost with
    /// the handler).
    pub fn taken_in_batch(&self) -> usize {
        self.done_in_batch
    }

    #[inline]
    fn dispatch_one<P, F>(
        &mut self,
        desc: D,
        pool: &mut P,
        handler: &mut F,
        fast_path: bool,
        flow_limit: bool,
        balance: bool,
    ) where
        P: FramePool<D>,
        F: Handler<D, P> + ?Sized,
    {
        let mut desc = desc;
        let info = match self
            .classifier
            .classify(pool.frame(&desc), pool.rx_hash(&desc))
        {
            Ok(Some(info)) if info.hash != 0 => {
                pool.tag_flow(&mut desc, info.hash);
                info
            }
            Ok(_) => {
                // No flow: nothing to keep in order, process here.
                self.local.no_flow += 1;
                self.run_inline(desc, pool, handler);
                return;
            }
            Err(Malformed) => {
                self.local.malformed += 1;
                pool.release(desc);
                return;
            }
        };
        // A pin or a learned desire naming a CPU with no live worker is
        // passed over for plain RPS, so the flow still lands somewhere. A
        // flow nobody claimed goes where the load balancer assigned its
        // bucket, if anywhere usable, and is counted for it.
        let claimed = self
            .pins
            .lookup(info.hash, info.dst_port)
            .or_else(|| self.shared.desired.lookup(info.hash));
        let balanced = balance && claimed.is_none();
        let bucket = self.rx_table.bucket_of(info.hash);
        let desired = claimed
            .filter(|&c| self.is_usable(c))
            .or_else(|| {
                balanced
                    .then(|| self.loads.assigned(bucket))
                    .flatten()
                    .filter(|&c| self.is_usable(c))
            })
            .or_else(|| self.rps_cpu(info.hash));
        let heads = RingHeads(&self.producers);
        // The key is parsed again only when the flow moves, for the hook.
        let frame = pool.frame(&desc);
        let steered = self.rx_table.steer_keyed(
            info.hash,
            desired,
            &self.shared.layout,
            &heads,
            self.now,
            || flow_key(frame).ok().flatten(),
        );
        match steered.action {
            SteerAction::Moved { from } => {
                self.local.hook_calls += 1;
                // Leaving this CPU: what ran inline may have staged replies,
                // which must leave before the flow's next packet is handled
                // elsewhere (a ring's head covers only ring packets).
                if from == Some(self.own_cpu) {
                    if self.inline_unflushed {
                        self.inline_unflushed = false;
                        handler.flush(pool);
                    }
                    self.settle_inline(pool, handler);
                }
            }
            SteerAction::HeldBack { .. } => self.local.held_back += 1,
            SteerAction::Stayed | SteerAction::NoTarget => {}
        }
        let Some(cpu) = steered.cpu else {
            // No usable CPU at all (every worker gone): process here.
            self.run_inline(desc, pool, handler);
            return;
        };
        if balanced {
            self.loads.note(steered.bucket, cpu);
        }
        if cpu == self.own_cpu && fast_path && !self.rx_table.has_queued(steered.bucket, &heads) {
            self.local.fast_path += 1;
            self.run_inline(desc, pool, handler);
            return;
        }
        let Some(producer) = self.producers.get_mut(cpu).and_then(Option::as_mut) else {
            self.run_inline(desc, pool, handler);
            return;
        };
        if flow_limit {
            let fill = producer.capacity() - producer.free_len();
            if let Some(fl) = self.flow_limits.get_mut(cpu) {
                if fl.over_limit(info.hash, fill, producer.capacity()) {
                    self.local.flow_limit_drops += 1;
                    pool.release(desc);
                    return;
                }
            }
        }
        match producer.push(desc) {
            Ok(()) => {
                self.rx_table
                    .note_enqueued(steered.bucket, producer.enqueued());
                if cpu == self.own_cpu {
                    self.local.queued_local += 1;
                } else {
                    self.local.steered_out += 1;
                }
                self.rung.insert(cpu);
            }
            Err(PushError::Full(desc)) => {
                self.local.dropped += 1;
                pool.release(desc);
            }
        }
    }

    /// A flow leaves this CPU (its replies flushed): in zero-copy mode
    /// ([`Handler::tx_progress`] reports progress) those replies may still
    /// sit in this CPU's tx queue, and the flow's next reply, from another
    /// CPU's queue, could overtake them on the wire. Ring packets are
    /// covered by the runtime (a ring's head passes a packet only once its
    /// replies completed); packets run inline leave no trace in a ring, so
    /// here the dispatcher waits until everything flushed has completed,
    /// at most [`COMPLETION_WAIT`](super::COMPLETION_WAIT).
    ///
    /// Waiting here rather than holding the flow back: holding it would
    /// need the rx table to know about in-flight inline replies per flow
    /// (a second `last_qtail` fed by the tx counters, checked on every
    /// packet); the wait costs nothing per packet, is taken only on a move
    /// off this CPU (rare: a new desire, a balancer move), lasts one
    /// completion round trip (the whole tx backlog, conservatively, since
    /// the counters are not per flow), and is bounded, so a stalled device
    /// delays a move, never the worker for long. In copy mode (`None`) it
    /// returns at once.
    #[cold]
    fn settle_inline<P, F>(&self, pool: &mut P, handler: &mut F)
    where
        F: Handler<D, P> + ?Sized,
    {
        // Past the bound the move goes ahead (the device stalled; nothing
        // waits on it forever).
        let _ = super::wait_completed(handler, pool, super::COMPLETION_WAIT);
    }

    #[inline]
    fn run_inline<P, F>(&mut self, desc: D, pool: &mut P, handler: &mut F)
    where
        F: Handler<D, P> + ?Sized,
    {
        // Counted when handed over: the handler owns what becomes of it,
        // also when it panics (it counts that itself).
        self.local.processed += 1;
        self.inline_unflushed = true;
        handler.handle(desc, pool);
    }

    /// Plain RPS: the flow hash scaled over the configured CPUs that still
    /// have a worker (the kernel's `reciprocal_scale` over `rps_map`). With
    /// no RPS CPU configured or left, the flow stays on this dispatcher's
    /// CPU (the kernel's empty `rps_cpus`: RSS only); when that CPU is
    /// offline or its worker gone, the flow is spread by hash over every
    /// CPU that still has a worker (the kernel moves the queue's interrupt
    /// off an offline CPU; here its flows move instead).
    #[inline]
    fn rps_cpu(&self, hash: u32) -> Option<CpuId> {
        let n = self.rps_cpus.len();
        if n > 0 {
            let start = ((u64::from(hash) * n as u64) >> 32) as usize;
            let spread = (0..n)
                .map(|i| self.rps_cpus[(start + i) % n])
                .find(|&c| self.is_usable(c));
            if spread.is_some() {
                return spread;
            }
        }
        Some(self.own_cpu)
            .filter(|&c| self.is_usable(c))
            .or_else(|| self.any_usable_cpu(hash))
    }

    /// A CPU with a live worker, chosen by `hash` (out of line: only when
    /// this dispatcher's own CPU is unusable).
    #[cold]
    #[inline(never)]
    fn any_usable_cpu(&self, hash: u32) -> Option<CpuId> {
        let usable = || (0..self.producers.len()).filter(|&c| self.is_usable(c));
        let n = usable().count();
        usable().nth(((u64::from(hash) * n as u64) >> 32) as usize)
    }

    #[inline]
    fn is_usable(&self, cpu: CpuId) -> bool {
        self.shared.layout.is_online(cpu)
            && self
                .producers
                .get(cpu)
                .and_then(Option::as_ref)
                .is_some_and(|p| !p.is_abandoned())
    }

    fn finish_batch(&mut self) {
        for cpu in self.rung.iter() {
            if let Some(bell) = self.doorbells.get(cpu).and_then(Option::as_ref) {
                bell.ring();
            }
        }
        self.rung = CpuSet::new();
        if let Some(block) = self.shared.stats.cpu(self.own_cpu) {
            block.flush(&mut self.local);
        }
    }

    /// Background step (idle time, never per packet): expires up to `budget`
    /// idle flow entries (`rps_may_expire_flow`), removing their hook state.
    #[doc(alias = "rps_may_expire_flow")]
    pub fn sweep(&mut self, idle_timeout: Tick, budget: usize) -> usize {
        let heads = RingHeads(&self.producers);
        self.rx_table
            .sweep(&self.shared.layout, &heads, self.now, idle_timeout, budget)
            .expired
    }
}
