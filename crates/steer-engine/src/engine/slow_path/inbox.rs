//! Each worker's slow-path inbox, and the worker's side of the slow path:
//! the reader queues a reassembled datagram (already a frame, with its
//! flow hash) in the inbox of the flow's worker and rings its doorbell;
//! the worker takes a few per round ([`SlowWorker::take`]), runs its
//! handler on them and sends the replies through the kernel socket of the
//! port they leave from ([`SlowWorker::reply`]).
//!
//! Invariants: an inbox holds at most [`INBOX_DATAGRAMS`] datagrams (a
//! hostile sender fills it and is dropped, counted, the worker keeps its
//! pace); nothing here blocks: the queue's lock is held for a push or a
//! few pops, and replies are sent with `MSG_DONTWAIT` (a full send buffer
//! drops the reply, counted).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::counters::Event;
use super::frame::reply_of;
use super::sender::KernelSender;

/// Datagrams one worker's inbox holds (at most 64 KiB each).
pub(crate) const INBOX_DATAGRAMS: usize = 64;

/// Datagrams a worker handles per round: the slow path does not starve
/// the worker's rx queues and rings.
pub(crate) const PER_ROUND: usize = 8;

/// A reassembled datagram on its way to a worker.
#[derive(Debug)]
pub(crate) struct Datagram {
    /// The datagram as the frame a handler understands.
    pub(crate) frame: Vec<u8>,
    /// Its flow hash, as the dispatchers hash its flow.
    pub(crate) hash: u32,
    /// The interface it came in on (for the reply's source).
    pub(crate) ifindex: u32,
}

/// One worker's bounded queue of datagrams.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    queue: Mutex<VecDeque<Datagram>>,
    /// The queue's length, read without the lock by a worker about to
    /// sleep.
    len: AtomicUsize,
}

impl Inbox {
    /// Queues `d`, or hands it back when the inbox is full.
    pub(crate) fn push(&self, d: Datagram) -> Result<(), Datagram> {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if q.len() >= INBOX_DATAGRAMS {
            return Err(d);
        }
        q.push_back(d);
        self.len.store(q.len(), Ordering::SeqCst);
        Ok(())
    }

    /// Whether a datagram waits.
    pub(crate) fn is_pending(&self) -> bool {
        self.len.load(Ordering::SeqCst) > 0
    }

    /// Empties the inbox; how many datagrams it held.
    pub(crate) fn clear(&self) -> usize {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let n = q.len();
        q.clear();
        self.len.store(0, Ordering::SeqCst);
        n
    }

    fn take(&self, max: usize, into: &mut Vec<Datagram>) {
        if !self.is_pending() {
            return;
        }
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let n = max.min(q.len());
        into.extend(q.drain(..n));
        self.len.store(q.len(), Ordering::SeqCst);
    }
}

/// A worker's side of the slow path.
#[derive(Debug, Clone)]
pub(crate) struct SlowWorker {
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) sender: KernelSender,
}

impl SlowWorker {
    /// Up to [`PER_ROUND`] waiting datagrams, into `into`.
    pub(crate) fn take(&self, into: &mut Vec<Datagram>) {
        self.inbox.take(PER_ROUND, into);
    }

    /// Whether a datagram waits for this worker.
    pub(crate) fn is_pending(&self) -> bool {
        self.inbox.is_pending()
    }

    /// Sends the reply frame `frame` (the handler's rewrite of a datagram
    /// that came in on `ifindex`) through the socket of its source port;
    /// counted as answered, refused (no UDP datagram from an owned port)
    /// or failed.
    pub(crate) fn reply(&self, frame: &[u8], ifindex: u32) {
        match reply_of(frame) {
            Some(r) if r.from.is_ipv6() == r.to.is_ipv6() => {
                // Counted answered or failed by the sender.
                let _ = self.sender.send(&frame[r.payload], r.from, r.to, ifindex);
            }
            _ => self.count(Event::Refused),
        }
    }

    /// Counts what became of a datagram without a reply.
    pub(crate) fn count(&self, event: Event) {
        self.sender.counters.add(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(hash: u32) -> Datagram {
        Datagram {
            frame: vec![0; 64],
            hash,
            ifindex: 0,
        }
    }

    fn worker() -> SlowWorker {
        SlowWorker {
            inbox: Arc::new(Inbox::default()),
            sender: KernelSender {
                sockets: Arc::new(Vec::new()),
                counters: Arc::new(super::super::counters::SlowCounters::default()),
            },
        }
    }

    #[test]
    fn an_inbox_is_bounded_and_gives_a_few_per_round_in_order() {
        let w = worker();
        assert!(!w.is_pending());
        for h in 0..INBOX_DATAGRAMS as u32 {
            w.inbox.push(d(h)).unwrap();
        }
        assert!(w.inbox.push(d(999)).is_err(), "full: handed back");
        assert!(w.is_pending());
        let mut got = Vec::new();
        w.take(&mut got);
        assert_eq!(got.len(), PER_ROUND);
        assert!(got.iter().map(|d| d.hash).eq(0..PER_ROUND as u32));
        while w.is_pending() {
            w.take(&mut got);
        }
        assert_eq!(got.len(), INBOX_DATAGRAMS);
        assert!(w.inbox.push(d(1)).is_ok(), "room again");
        let left = w.inbox.clear();
        assert!(left > 0 && !w.inbox.is_pending(), "{left} left, now empty");
    }

    #[test]
    fn a_reply_that_is_no_datagram_is_refused_and_one_from_no_owned_port_fails() {
        let w = worker();
        w.reply(&[0u8; 10], 0);
        let frame = steer_core::packet::build::FrameBuilder::udp(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            9000,
            4000,
        )
        .build();
        w.reply(&frame, 0); // no socket on port 9000 here
        let s = w.sender.counters.snapshot();
        assert_eq!((s.refused, s.send_failed, s.answered), (1, 1, 0));
    }
}
