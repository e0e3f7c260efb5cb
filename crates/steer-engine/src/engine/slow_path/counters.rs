//! The slow path's counters, engine-wide: the reader thread and the
//! workers add to them as datagrams pass (the slow path is rare, so one
//! shared block is enough), and [`SlowCounters::snapshot`] reads them for
//! the stats, the stats socket and the metrics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::observe::SlowPathStats;

/// What [`SlowCounters::add`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    Received(usize),
    Answered(usize),
    Consumed,
    Refused,
    TooLarge,
    QueueFull,
    SendFailed,
    /// These many were still queued for a worker at stop.
    LeftAtStop(usize),
}

/// The slow path's counters.
#[derive(Debug, Default)]
pub(crate) struct SlowCounters {
    sockets: AtomicU64,
    bind_failed: AtomicU64,
    received: AtomicU64,
    received_bytes: AtomicU64,
    answered: AtomicU64,
    answered_bytes: AtomicU64,
    consumed: AtomicU64,
    refused: AtomicU64,
    too_large: AtomicU64,
    queue_full: AtomicU64,
    send_failed: AtomicU64,
    left_at_stop: AtomicU64,
}

impl SlowCounters {
    /// Counters starting from what opening the sockets gave.
    pub(crate) fn new(sockets: usize, bind_failed: u64) -> Self {
        let c = Self::default();
        c.sockets.store(sockets as u64, Relaxed);
        c.bind_failed.store(bind_failed, Relaxed);
        c
    }

    /// Counts `event`.
    pub(crate) fn add(&self, event: Event) {
        let bump = |c: &AtomicU64, n: u64| {
            c.fetch_add(n, Relaxed);
        };
        match event {
            Event::Received(bytes) => {
                bump(&self.received, 1);
                bump(&self.received_bytes, bytes as u64);
            }
            Event::Answered(bytes) => {
                bump(&self.answered, 1);
                bump(&self.answered_bytes, bytes as u64);
            }
            Event::Consumed => bump(&self.consumed, 1),
            Event::Refused => bump(&self.refused, 1),
            Event::TooLarge => bump(&self.too_large, 1),
            Event::QueueFull => bump(&self.queue_full, 1),
            Event::SendFailed => bump(&self.send_failed, 1),
            Event::LeftAtStop(n) => bump(&self.left_at_stop, n as u64),
        }
    }

    /// The counters now.
    pub(crate) fn snapshot(&self) -> SlowPathStats {
        SlowPathStats {
            sockets: self.sockets.load(Relaxed),
            bind_failed: self.bind_failed.load(Relaxed),
            received: self.received.load(Relaxed),
            received_bytes: self.received_bytes.load(Relaxed),
            answered: self.answered.load(Relaxed),
            answered_bytes: self.answered_bytes.load(Relaxed),
            consumed: self.consumed.load(Relaxed),
            refused: self.refused.load(Relaxed),
            too_large: self.too_large.load(Relaxed),
            queue_full: self.queue_full.load(Relaxed),
            send_failed: self.send_failed.load(Relaxed),
            left_at_stop: self.left_at_stop.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_lands_in_its_counter() {
        let c = SlowCounters::new(4, 1);
        c.add(Event::Received(3000));
        c.add(Event::Received(10));
        c.add(Event::Answered(3000));
        for e in [
            Event::Consumed,
            Event::Refused,
            Event::TooLarge,
            Event::QueueFull,
            Event::SendFailed,
        ] {
            c.add(e);
        }
        c.add(Event::LeftAtStop(3));
        let s = c.snapshot();
        assert_eq!((s.sockets, s.bind_failed), (4, 1));
        assert_eq!((s.received, s.received_bytes), (2, 3010));
        assert_eq!((s.answered, s.answered_bytes), (1, 3000));
        assert_eq!(
            (
                s.consumed,
                s.refused,
                s.too_large,
                s.queue_full,
                s.send_failed
            ),
            (1, 1, 1, 1, 1)
        );
        assert_eq!(s.left_at_stop, 3);
    }
}
