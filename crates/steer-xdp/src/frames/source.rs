//! One rx queue's AF_XDP socket as the runtime's [`RxSource`]: received
//! frames lent out as [`RawFrame`] descriptors, the socket's fill ring
//! topped up from the spare pool and its excess free frames spilled back.
//!
//! Invariant: every frame received is lent out in the same call (or, if it
//! could not be, which cannot happen with one UMEM, given back to the
//! socket), except the frames of a multi-buffer packet whose end has not
//! been received yet, which wait in the source's gatherer (and go back to
//! the socket if the source is dropped); every descriptor given back is
//! taken back once or refused.

use std::sync::Arc;

use steer_core::runtime::RxSource;
use tracing::warn;

use super::chain::{Gathered, Gatherer};
use super::custody::{self, RawFrame};
use super::spare::SparePool;
use super::{lock, SharedSocket};
use crate::umem::{Frame, UmemView};

/// One rx queue's socket as a [`RxSource`].
#[derive(Debug)]
pub struct XskSource {
    socket: SharedSocket,
    umem: UmemView,
    spare: Arc<SparePool>,
    frames: Vec<Frame>,
    /// Top the socket up from the spare pool when its fill ring and free
    /// pool together hold fewer frames than this.
    low_water: usize,
    /// Give the socket's free frames above this back to the spare pool:
    /// with the fill ring full they are idle, and completions of replies
    /// sent from other queues' frames pile up here.
    high_water: usize,
    /// The socket's ring size (the most a top-up moves).
    ring_size: usize,
    /// The frames of a multi-buffer packet received so far.
    gatherer: Gatherer,
    warned: bool,
}

impl XskSource {
    /// The source of `socket` (rings of `ring_size`), topping it up from
    /// and spilling it to `spare`.
    pub fn new(socket: SharedSocket, spare: Arc<SparePool>, ring_size: usize) -> Self {
        let umem = lock(&socket).umem();
        Self {
            socket,
            umem,
            spare,
            frames: Vec::with_capacity(ring_size),
            low_water: ring_size / 2,
            high_water: ring_size,
            ring_size,
            gatherer: Gatherer::default(),
            warned: false,
        }
    }
}

impl RxSource<RawFrame> for XskSource {
    fn poll(&mut self, out: &mut [RawFrame]) -> usize {
        let mut s = lock(&self.socket);
        // Idle rounds (most rounds of a worker waiting for traffic) cost one
        // read of the rx ring: no top-up, spill, kick or reap is due.
        if s.idle(self.low_water, self.high_water) {
            return 0;
        }
        let in_fill = s.ring_census().fill_ring as usize;
        let have = in_fill + s.free_frames();
        if have < self.low_water {
            let want = self.ring_size.saturating_sub(have);
            self.spare.top_up(&mut s, want, false, &mut self.frames);
        }
        // Completions of frames this socket transmitted, and a kick if its
        // tx ring still holds frames (copy mode sends a bounded batch per kick).
        s.complete();
        if s.free_frames() > self.high_water {
            self.spare
                .spill(&mut s, self.high_water / 2, &mut self.frames);
        }
        let n = match s.recv(&mut self.frames, out.len()) {
            Ok(n) => n,
            Err(e) => {
                if !self.warned {
                    self.warned = true;
                    warn!(queue = s.queue(), error = %e, "AF_XDP receive failed; will keep trying");
                }
                self.frames.len()
            }
        };
        debug_assert!(n <= out.len());
        let mut lent = 0;
        for f in self.frames.drain(..) {
            let lent_now = match self.gatherer.push(f, &mut *s, &self.umem) {
                Gathered::Single(f) => custody::lend(&self.umem, f),
                Gathered::Multi(head, bytes) => custody::lend_gathered(&self.umem, head, bytes),
                Gathered::Pending | Gathered::Refused => continue,
            };
            match lent_now {
                Ok(raw) if lent < out.len() => {
                    out[lent] = raw;
                    lent += 1;
                }
                Ok(raw) => {
                    // More than asked for (cannot happen: `recv` takes at
                    // most `out.len()`): back to the spare pool.
                    if let Some(f) = custody::reclaim(&self.umem, raw) {
                        self.spare.put(f);
                    }
                }
                // Not of this socket's UMEM (cannot happen): not ours to lend.
                Err(f) => self.spare.put_all(s.recycle([f])),
            }
        }
        lent
    }

    fn give_back(&mut self, descs: &[RawFrame]) {
        let mut s = lock(&self.socket);
        let strays = s.recycle(
            descs
                .iter()
                .filter_map(|&d| custody::reclaim(&self.umem, d)),
        );
        self.spare.put_all(strays);
    }

    fn has_pending(&self) -> bool {
        lock(&self.socket).rx_ready()
    }
}

impl Drop for XskSource {
    /// The frames of a packet whose end never came go back to the socket.
    fn drop(&mut self) {
        let mut s = lock(&self.socket);
        let strays = self.gatherer.abandon(&mut *s);
        self.spare.put_all(strays);
    }
}
