//! Where new flows wait to be accepted: a bounded queue per listener, woken
//! like a flow (async task or mio loop).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use crossbeam_queue::ArrayQueue;

use super::notify::{MioNotifier, Readiness};
use super::{Flow, Hub, HubStats};

/// New flows of one listener.
///
/// Invariant: `starting` counts the flows offered here that have neither
/// been read nor dropped (each [`Flow`] gives its start back exactly once:
/// at its first read or when dropped unread).
#[derive(Debug)]
pub(crate) struct AcceptQueue {
    flows: ArrayQueue<Flow>,
    pub(crate) readiness: Readiness,
    starting: AtomicUsize,
    max_starting: usize,
}

impl AcceptQueue {
    pub(crate) fn new(backlog: usize, max_starting: usize) -> Self {
        Self {
            flows: ArrayQueue::new(backlog.max(1)),
            readiness: Readiness::default(),
            starting: AtomicUsize::new(0),
            max_starting: max_starting.max(1),
        }
    }

    /// Whether `max_starting` flows already wait for their first read.
    pub(crate) fn is_starting_full(&self) -> bool {
        self.starting.load(Relaxed) >= self.max_starting
    }

    /// A new flow is about to be offered (under the hub's admissions lock,
    /// after `is_starting_full` said no: starts never exceed the bound).
    pub(crate) fn begin_start(&self) {
        self.starting.fetch_add(1, Relaxed);
    }

    /// A flow's start is over (first read, or dropped unread).
    pub(crate) fn end_start(&self) {
        self.starting.fetch_sub(1, Relaxed);
    }

    /// Queues a new flow and wakes the acceptor; the flow back when the
    /// backlog is full (the caller drops it, which closes it, once it holds
    /// no lock the drop takes).
    pub(crate) fn offer(&self, flow: Flow) -> Result<(), Flow> {
        self.flows.push(flow)?;
        self.readiness.notify();
        Ok(())
    }
}

/// Offers the engine's new UDP flows to the application.
#[derive(Debug, Clone)]
pub struct FlowListener {
    hub: Arc<Hub>,
    index: usize,
}

impl FlowListener {
    pub(crate) fn new(hub: Arc<Hub>, index: usize) -> Self {
        Self { hub, index }
    }

    fn queue(&self) -> &AcceptQueue {
        &self.hub.accept[self.index]
    }

    /// The next new flow; `None` once the engine has stopped. Accept from
    /// one task per listener (the waker slot holds one task).
    pub fn accept(&self) -> Accept<'_> {
        Accept { listener: self }
    }

    /// A new flow if one is waiting (flows evicted while they waited are
    /// skipped).
    pub fn try_accept(&self) -> Option<Flow> {
        loop {
            let f = self.queue().flows.pop()?;
            if !f.is_evicted() {
                return Some(f);
            }
        }
    }

    /// Wake `notifier` with `token` when flows arrive (mio loops). Returns
    /// `false` if the listener already had a mio notifier.
    pub fn notify_mio(&self, notifier: &Arc<MioNotifier>, token: usize) -> bool {
        let set = self.queue().readiness.set_mio(notifier, token);
        if !self.queue().flows.is_empty() {
            self.queue().readiness.notify();
        }
        set
    }

    /// Counters of the engine's flow delivery.
    pub fn stats(&self) -> HubStats {
        self.hub.stats()
    }
}

/// The future of [`FlowListener::accept`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Accept<'a> {
    listener: &'a FlowListener,
}

impl Future for Accept<'_> {
    type Output = Option<Flow>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let l = self.listener;
        if let Some(f) = l.try_accept() {
            return Poll::Ready(Some(f));
        }
        if l.hub.is_stopped() {
            return Poll::Ready(None);
        }
        l.queue().readiness.register(cx.waker());
        match l.try_accept() {
            Some(f) => Poll::Ready(Some(f)),
            None if l.hub.is_stopped() => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}
