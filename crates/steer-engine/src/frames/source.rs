//! One rx queue's AF_XDP socket as the runtime's [`RxSource`]: received
//! frames out as [`RawFrame`] descriptors, the socket's fill ring topped up
//! from the spare pool and its excess free frames spilled back.

use std::sync::Arc;

use steer_core::runtime::RxSource;
use steer_xdp::{Frame, RawFrame};
use tracing::warn;

use super::{adopt, lock, SharedSocket, SparePool};

/// One rx queue's socket as a [`RxSource`].
#[derive(Debug)]
pub(crate) struct XskSource {
    socket: SharedSocket,
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
    warned: bool,
}

impl XskSource {
    pub(crate) fn new(socket: SharedSocket, spare: Arc<SparePool>, ring_size: usize) -> Self {
        Self {
            socket,
            spare,
            frames: Vec::with_capacity(ring_size),
            low_water: ring_size / 2,
            high_water: ring_size,
            ring_size,
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
        for (slot, f) in out.iter_mut().zip(self.frames.drain(..)) {
            *slot = f.into_raw();
        }
        n
    }

    fn give_back(&mut self, descs: &[RawFrame]) {
        let mut s = lock(&self.socket);
        let strays = s.recycle(descs.iter().map(|&d| adopt(d)));
        self.spare.put_all(strays);
    }

    fn has_pending(&self) -> bool {
        lock(&self.socket).rx_ready()
    }
}
