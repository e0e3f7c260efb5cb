//! Ring heads held until the device completed the replies (zero-copy mode).
//!
//! A worker publishes its inbound rings' heads after it flushed its handler
//! (see the worker module). In AF_XDP zero-copy mode a flushed reply is
//! only queued to the NIC, and another worker's tx queue can put a moved
//! flow's next reply on the wire first; so when the handler reports
//! [`TxProgress`] (`Some`), a head may pass a packet only once the frames
//! flushed for it have *completed*. [`HeldHeads`] owns that:
//!
//! - at each flush it records a checkpoint: every inbound ring's consumed
//!   position and the handler's `flushed` count then;
//! - it publishes each ring up to the newest checkpoint whose `flushed <=
//!   completed` (replies complete in flush order, see
//!   [`Handler::tx_progress`](crate::dispatch::Handler::tx_progress)), one
//!   store per ring per release;
//! - with `None` (copy mode: sent when flushed) it publishes every ring at
//!   once, exactly today's one publish per ring per round, and holds
//!   nothing.
//!
//! Invariants: memory is fixed at start ([`CHECKPOINTS`] checkpoints of one
//! position per ring); a full queue does not grow, the flush folds into the
//! newest checkpoint (its positions and count move forward: those packets
//! are released a little later, never earlier); a head never passes a
//! position whose checkpoint has not completed, and never moves back.

use crate::dispatch::TxProgress;
use crate::ring::Consumer;

/// Checkpoints a worker keeps before folding new flushes into the newest.
pub(super) const CHECKPOINTS: usize = 8;

/// The checkpoints of one worker's inbound rings (see the module docs).
#[derive(Debug)]
pub(super) struct HeldHeads {
    rings: usize,
    /// `flushed` of each checkpoint, oldest at `first`, `len` in use
    /// (a fixed circular buffer).
    flushed: [u64; CHECKPOINTS],
    /// Ring positions, `rings` per checkpoint, in the same slots.
    positions: Vec<u64>,
    first: usize,
    len: usize,
}

impl HeldHeads {
    /// Room for the checkpoints of `rings` inbound rings.
    pub(super) fn new(rings: usize) -> Self {
        Self {
            rings,
            flushed: [0; CHECKPOINTS],
            positions: vec![0; rings * CHECKPOINTS],
            first: 0,
            len: 0,
        }
    }

    /// Whether some head is held back (the worker must keep polling
    /// progress, not sleep past it).
    #[inline]
    pub(super) fn is_holding(&self) -> bool {
        self.len > 0
    }

    /// After a flush: with no progress reported, publishes every ring now
    /// (and drops any checkpoint); else records a checkpoint of the rings'
    /// consumed positions at `progress.flushed` and publishes what has
    /// completed.
    #[inline]
    pub(super) fn flushed<D, R: AsMut<Consumer<D>>>(
        &mut self,
        progress: Option<TxProgress>,
        rings: &mut [R],
    ) {
        match progress {
            Some(p) if !p.settled() => {
                self.record(p.flushed, rings);
                self.completed(Some(p), rings);
            }
            // Copy mode, or everything flushed has left: nothing to hold.
            _ => self.release_all(rings),
        }
    }

    /// Progress polled between flushes: publishes each ring up to the
    /// newest checkpoint that has completed (all of them on `None`).
    #[inline]
    pub(super) fn completed<D, R: AsMut<Consumer<D>>>(
        &mut self,
        progress: Option<TxProgress>,
        rings: &mut [R],
    ) {
        let Some(progress) = progress else {
            self.release_all(rings);
            return;
        };
        let mut newest = None;
        while self.len > 0 && self.flushed[self.first] <= progress.completed {
            newest = Some(self.first);
            self.first = (self.first + 1) % CHECKPOINTS;
            self.len -= 1;
        }
        if let Some(slot) = newest {
            let at = slot * self.rings;
            for (ring, &pos) in rings.iter_mut().zip(&self.positions[at..at + self.rings]) {
                ring.as_mut().publish_to(pos);
            }
        }
    }

    /// Publishes every ring past everything taken and forgets the
    /// checkpoints (copy mode, a settled device, or a worker that stops
    /// waiting).
    pub(super) fn release_all<D, R: AsMut<Consumer<D>>>(&mut self, rings: &mut [R]) {
        self.len = 0;
        for ring in rings {
            ring.as_mut().publish();
        }
    }

    fn record<D, R: AsMut<Consumer<D>>>(&mut self, flushed: u64, rings: &mut [R]) {
        let slot = if self.len == CHECKPOINTS {
            // Full: fold into the newest (no growth, no wait).
            (self.first + self.len - 1) % CHECKPOINTS
        } else {
            let slot = (self.first + self.len) % CHECKPOINTS;
            self.len += 1;
            slot
        };
        self.flushed[slot] = flushed;
        let at = slot * self.rings;
        for (pos, ring) in self.positions[at..at + self.rings].iter_mut().zip(rings) {
            *pos = ring.as_mut().dequeued();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{channel, Producer};

    struct Ring(Consumer<u32>);

    impl AsMut<Consumer<u32>> for Ring {
        fn as_mut(&mut self) -> &mut Consumer<u32> {
            &mut self.0
        }
    }

    fn rings(n: usize) -> (Vec<Producer<u32>>, Vec<Ring>) {
        (0..n)
            .map(|_| {
                let (tx, rx) = channel::<u32>(16).unwrap();
                (tx, Ring(rx))
            })
            .unzip()
    }

    /// Takes `n` items from ring `i` unpublished (pushing them first).
    fn take(tx: &mut [Producer<u32>], rx: &mut [Ring], i: usize, n: usize) {
        for x in 0..n {
            tx[i].push(x as u32).unwrap();
        }
        assert_eq!(rx[i].0.consume_unpublished(n, |_| {}), n);
    }

    fn progress(flushed: u64, completed: u64) -> Option<TxProgress> {
        Some(TxProgress { flushed, completed })
    }

    #[test]
    fn without_progress_every_head_is_published_at_the_flush() {
        let (mut tx, mut rx) = rings(2);
        let mut held = HeldHeads::new(2);
        take(&mut tx, &mut rx, 0, 3);
        take(&mut tx, &mut rx, 1, 1);
        held.flushed(None, &mut rx);
        assert!(!held.is_holding());
        assert!(tx[0].has_dequeued(3) && tx[1].has_dequeued(1));
    }

    #[test]
    fn heads_are_held_until_the_flushed_replies_completed() {
        let (mut tx, mut rx) = rings(2);
        let mut held = HeldHeads::new(2);
        // Round 1: 2 packets on ring 0, their 2 replies flushed, none done.
        take(&mut tx, &mut rx, 0, 2);
        held.flushed(progress(2, 0), &mut rx);
        // Round 2: 1 more on each ring, 2 more replies flushed.
        take(&mut tx, &mut rx, 0, 1);
        take(&mut tx, &mut rx, 1, 1);
        held.flushed(progress(4, 1), &mut rx);
        assert!(held.is_holding());
        assert!(!tx[0].has_dequeued(1) && !tx[1].has_dequeued(1));
        // Round 1's replies complete: ring 0 up to its packets, not past.
        held.completed(progress(4, 2), &mut rx);
        assert!(tx[0].has_dequeued(2) && !tx[0].has_dequeued(3));
        assert!(!tx[1].has_dequeued(1));
        assert!(held.is_holding());
        // Nothing new completed: nothing moves.
        held.completed(progress(4, 3), &mut rx);
        assert!(!tx[0].has_dequeued(3) && !tx[1].has_dequeued(1));
        // All completed: every head passes everything taken.
        held.completed(progress(4, 4), &mut rx);
        assert!(tx[0].has_dequeued(3) && tx[1].has_dequeued(1));
        assert!(!held.is_holding());
    }

    #[test]
    fn a_settled_flush_publishes_at_once() {
        let (mut tx, mut rx) = rings(1);
        let mut held = HeldHeads::new(1);
        take(&mut tx, &mut rx, 0, 2);
        held.flushed(progress(5, 5), &mut rx);
        assert!(tx[0].has_dequeued(2) && !held.is_holding());
    }

    #[test]
    fn a_full_queue_folds_into_the_newest_checkpoint() {
        let (mut tx, mut rx) = rings(1);
        let mut held = HeldHeads::new(1);
        for round in 1..=CHECKPOINTS as u64 + 3 {
            take(&mut tx, &mut rx, 0, 1);
            held.flushed(progress(round, 0), &mut rx);
        }
        assert_eq!(held.len, CHECKPOINTS);
        // The first CHECKPOINTS - 1 checkpoints are kept one by one.
        held.completed(progress(CHECKPOINTS as u64 + 3, 1), &mut rx);
        assert!(tx[0].has_dequeued(1) && !tx[0].has_dequeued(2));
        // The last one covers every later round: released only once the
        // newest flush completed.
        let last = CHECKPOINTS as u64 - 1;
        held.completed(progress(CHECKPOINTS as u64 + 3, last), &mut rx);
        assert!(tx[0].has_dequeued(last) && !tx[0].has_dequeued(last + 1));
        held.completed(progress(CHECKPOINTS as u64 + 3, last + 3), &mut rx);
        assert!(!tx[0].has_dequeued(last + 1));
        held.completed(progress(CHECKPOINTS as u64 + 3, last + 4), &mut rx);
        assert!(tx[0].has_dequeued(CHECKPOINTS as u64 + 3));
        assert!(!held.is_holding());
    }

    #[test]
    fn no_progress_later_releases_what_was_held() {
        let (mut tx, mut rx) = rings(1);
        let mut held = HeldHeads::new(1);
        take(&mut tx, &mut rx, 0, 1);
        held.flushed(progress(1, 0), &mut rx);
        assert!(!tx[0].has_dequeued(1));
        held.completed(None, &mut rx);
        assert!(tx[0].has_dequeued(1) && !held.is_holding());
    }
}
