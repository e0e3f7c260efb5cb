//! One UDP flow as the application sees it: a [`Flow`] it reads (async or
//! non-blocking) and a [`FlowWriter`] it sends replies with.
//!
//! Invariants:
//! - One reader per flow (`recv` takes `&mut self`); a worker is the only
//!   writer of the queue at a time (the dispatcher sends a flow's packets to
//!   one CPU at a time and moves it only after its queue drained), so
//!   datagrams come out in arrival order.
//! - The queue is bounded: a slow reader loses its own datagrams (counted in
//!   `queue_drops`), never another flow's, and holds no UMEM frame (payloads
//!   are copied out, so the frame pool cannot be exhausted by readers).
//! - A flow's state is small until used: its queue grows in segments as
//!   datagrams wait. The flow table may evict it (see `table`): it is then
//!   closed, its queued datagrams freed, and `recv` gives `None`.
//! - Every datagram returned to the application records the reading
//!   thread's CPU for the flow through the update rule (the
//!   `rps_record_sock_flow` step), so the next packets are steered there.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::task::{Context, Poll};

use crossbeam_queue::SegQueue;
use steer_core::cpu::CpuId;
use steer_core::flow::FlowKey;

use super::notify::{MioNotifier, Readiness};
use super::reply::ReplyTemplate;
use super::{Hub, SendError};

/// State shared by a flow's reader, writers, the worker delivering it and
/// the flow table.
#[derive(Debug)]
pub(crate) struct FlowShared {
    pub(crate) key: FlowKey,
    /// The hash the dispatcher steers the flow by (the NIC's receive hash or
    /// the engine's hasher, as its packets were tagged); consumption is
    /// recorded under it.
    pub(crate) hash: AtomicU32,
    /// Datagrams for the reader: segments allocated as they fill (a flow
    /// that sent one datagram costs one small segment, not `depth` slots).
    queue: SegQueue<Vec<u8>>,
    queued: AtomicUsize,
    depth: usize,
    pub(crate) readiness: Readiness,
    pub(crate) template: ReplyTemplate,
    /// The worker (index) that received the flow's first packet: whose
    /// budget it counts against.
    pub(crate) home: usize,
    /// When the worker offered the flow (monotonic ns): its first read
    /// tells how long new flows wait (overload).
    pub(crate) born_ns: u64,
    /// The reader is gone, or the flow was evicted: deliver no more (a
    /// later packet starts a new flow).
    pub(crate) closed: AtomicBool,
    /// The flow table evicted it (its reader's `recv` ends).
    evicted: AtomicBool,
    /// A reply was sent on the flow.
    has_replied: AtomicBool,
    /// A datagram arrived after a reply: two-way traffic (conntrack's
    /// ASSURED); evicted only after every unassured flow.
    pub(crate) assured: AtomicBool,
    /// A datagram arrived since the eviction clock last passed the flow.
    pub(crate) referenced: AtomicBool,
    pub(crate) delivered: AtomicU64,
    pub(crate) queue_drops: AtomicU64,
    pub(crate) sent: AtomicU64,
}

impl FlowShared {
    pub(crate) fn new(
        key: FlowKey,
        hash: u32,
        depth: usize,
        template: ReplyTemplate,
        home: usize,
        born_ns: u64,
    ) -> Self {
        Self {
            key,
            hash: AtomicU32::new(hash),
            queue: SegQueue::new(),
            queued: AtomicUsize::new(0),
            depth: depth.max(1),
            readiness: Readiness::default(),
            template,
            home,
            born_ns,
            closed: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            has_replied: AtomicBool::new(false),
            assured: AtomicBool::new(false),
            referenced: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            queue_drops: AtomicU64::new(0),
            sent: AtomicU64::new(0),
        }
    }

    /// Called by the delivering worker. `false`: the queue was full (counted)
    /// or the flow is closed.
    pub(crate) fn deliver(&self, payload: Vec<u8>) -> bool {
        if self.closed.load(Relaxed) {
            return false;
        }
        // One worker delivers a flow at a time: the check and the push
        // cannot race another push.
        if self.queued.load(Acquire) >= self.depth {
            self.queue_drops.fetch_add(1, Relaxed);
            return false;
        }
        self.queue.push(payload);
        self.queued.fetch_add(1, Release);
        self.delivered.fetch_add(1, Relaxed);
        if !self.referenced.load(Relaxed) {
            self.referenced.store(true, Relaxed);
        }
        if !self.assured.load(Relaxed) && self.has_replied.load(Relaxed) {
            self.assured.store(true, Relaxed);
        }
        true
    }

    /// The oldest queued datagram.
    pub(crate) fn pop(&self) -> Option<Vec<u8>> {
        let d = self.queue.pop()?;
        self.queued.fetch_sub(1, Release);
        Some(d)
    }

    fn is_empty(&self) -> bool {
        self.queued.load(Acquire) == 0
    }

    /// A reply went out on the flow.
    pub(crate) fn replied(&self) {
        if !self.has_replied.load(Relaxed) {
            self.has_replied.store(true, Relaxed);
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    pub(crate) fn is_evicted(&self) -> bool {
        self.evicted.load(Acquire)
    }

    /// Evicted by the flow table: closed, its queued datagrams freed, its
    /// reader woken to see the end.
    pub(crate) fn evict(&self) {
        self.closed.store(true, Relaxed);
        self.evicted.store(true, Release);
        while self.pop().is_some() {}
        self.readiness.notify();
    }
}

/// A flow's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Datagrams queued for the reader.
    pub delivered: u64,
    /// Datagrams dropped because the reader's queue was full.
    pub queue_drops: u64,
    /// Replies sent on the flow.
    pub sent: u64,
}

/// The receiving end of one UDP flow (5-tuple). Dropping it closes the flow:
/// datagrams queued for it are discarded, and a later datagram of the same
/// 5-tuple is offered to the listener as a new flow.
pub struct Flow {
    pub(crate) shared: Arc<FlowShared>,
    pub(crate) hub: Arc<Hub>,
    /// The listener it was offered on (whose start it holds until read).
    listener: usize,
    pinned: bool,
    /// A datagram was read already.
    read_once: bool,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow")
            .field("key", &self.shared.key)
            .field("hash", &self.hash())
            .finish_non_exhaustive()
    }
}

impl Flow {
    /// A flow offered on `listener`, holding one of its starts (given
    /// back at the first read, or when dropped unread).
    pub(crate) fn new(shared: Arc<FlowShared>, hub: Arc<Hub>, listener: usize) -> Self {
        Self {
            shared,
            hub,
            listener,
            pinned: false,
            read_once: false,
        }
    }

    /// The flow's 5-tuple as received (source = the remote peer).
    pub fn key(&self) -> FlowKey {
        self.shared.key
    }

    /// The flow hash steer steers by: the hash its packets were dispatched
    /// under (the NIC's receive hash when the engine uses it, else the
    /// engine's hasher).
    pub fn hash(&self) -> u32 {
        self.shared.hash.load(Relaxed)
    }

    /// The next datagram's payload; `None` once the engine has stopped or
    /// the flow was evicted to make room for new flows (drop the flow then:
    /// it is closed). Reading records the calling thread's CPU for the flow.
    pub fn recv(&mut self) -> Recv<'_> {
        Recv { flow: self }
    }

    /// The next datagram's payload if one is queued (records like `recv`).
    pub fn try_recv(&mut self) -> Option<Vec<u8>> {
        let d = self.shared.pop()?;
        if !self.read_once {
            self.read_once = true;
            self.hub.first_read(&self.shared, self.listener);
        }
        if !self.pinned {
            self.hub.record(self.hash());
        }
        Some(d)
    }

    /// Whether the flow table evicted this flow to make room under its
    /// budget (its unanswered or least recently active flows go first):
    /// no more datagrams come, and a later datagram of the same 5-tuple is
    /// a new flow. A mio loop checks it when `try_recv` finds nothing.
    pub fn is_evicted(&self) -> bool {
        self.shared.is_evicted()
    }

    /// No more datagrams will come: evicted, or the engine stopped.
    fn is_ended(&self) -> bool {
        self.shared.is_evicted() || self.hub.is_stopped()
    }

    /// Counts a failure of the application's own resources for this flow
    /// (a proxy's backend socket that could not be opened or written):
    /// `backend_errors` in the engine's flow counters, stats and metrics.
    pub fn count_backend_error(&self) {
        self.hub.count_backend_error();
    }

    /// A handle to send replies on this flow, usable from any thread.
    pub fn writer(&self) -> FlowWriter {
        FlowWriter {
            shared: Arc::clone(&self.shared),
            hub: Arc::clone(&self.hub),
        }
    }

    /// Sends `payload` back to the flow's peer (see [`FlowWriter::send`]).
    pub fn send(&self, payload: &[u8]) -> Result<(), SendError> {
        self.hub.send(&self.shared, payload)
    }

    /// Runs this flow's packets on `cpu` from now on, whatever thread reads
    /// it (explicit affinity: overrides learning; seed 001).
    pub fn pin_to(&mut self, cpu: CpuId) {
        self.pinned = true;
        self.hub.pin_flow(self.hash(), cpu);
    }

    /// Back to learning the CPU from where the flow is read.
    pub fn unpin(&mut self) {
        if self.pinned {
            self.pinned = false;
            self.hub.unpin_flow(self.hash());
        }
    }

    /// Wake `notifier` with `token` whenever datagrams arrive (mio loops).
    /// Returns `false` if the flow already had a mio notifier.
    pub fn notify_mio(&self, notifier: &Arc<MioNotifier>, token: usize) -> bool {
        let set = self.shared.readiness.set_mio(notifier, token);
        if !self.shared.is_empty() || self.shared.is_evicted() {
            self.shared.readiness.notify();
        }
        set
    }

    /// This flow's counters.
    pub fn stats(&self) -> FlowStats {
        FlowStats {
            delivered: self.shared.delivered.load(Relaxed),
            queue_drops: self.shared.queue_drops.load(Relaxed),
            sent: self.shared.sent.load(Relaxed),
        }
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.unpin();
        self.shared.closed.store(true, Relaxed);
        if !self.read_once {
            self.hub.start_abandoned(self.listener);
        }
        self.hub.forget(&self.shared);
    }
}

/// The future of [`Flow::recv`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Recv<'a> {
    flow: &'a mut Flow,
}

impl Future for Recv<'_> {
    type Output = Option<Vec<u8>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let flow = &mut *self.flow;
        if let Some(d) = flow.try_recv() {
            return Poll::Ready(Some(d));
        }
        if flow.is_ended() {
            return Poll::Ready(None);
        }
        flow.shared.readiness.register(cx.waker());
        // Re-check after registering: a datagram delivered in between
        // notified before the waker was there.
        match flow.try_recv() {
            Some(d) => Poll::Ready(Some(d)),
            None if flow.is_ended() => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

/// Sends replies on a flow; `Clone + Send + Sync`, usable from any thread
/// or task while the [`Flow`] is read elsewhere.
#[derive(Debug, Clone)]
pub struct FlowWriter {
    shared: Arc<FlowShared>,
    hub: Arc<Hub>,
}

impl FlowWriter {
    /// Sends `payload` to the flow's peer: the flow's turned-around headers,
    /// the payload, fresh lengths and checksums, transmitted from the
    /// AF_XDP socket of the calling thread's CPU. A reply longer than the
    /// link's MTU, and every reply of a flow whose first datagram the
    /// kernel reassembled from fragments, leaves through the engine's
    /// kernel UDP socket on the owned port instead (the kernel fragments
    /// it).
    pub fn send(&self, payload: &[u8]) -> Result<(), SendError> {
        self.hub.send(&self.shared, payload)
    }
}
