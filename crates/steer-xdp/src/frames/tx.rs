//! A worker's transmit path: replies are staged per packet and put on the
//! worker's AF_XDP socket once per batch (at the runtime's flush point).
//!
//! Invariants: a staged frame is on the tx ring after the next flush, or,
//! when the ring stays full, back in the socket's free pool and counted in
//! `tx_dropped`: never lost (a path dropped with frames staged recycles
//! them). Packets of one flow leave in the order they were
//! staged (one worker per flow at a time, one FIFO per worker).

use std::sync::Arc;

use super::spare::SparePool;
use super::{lock, SharedSocket};
use crate::socket::QueueSocket;
use crate::umem::{Frame, UmemView};

/// Per-flush outcome, for the worker's counters, in packets (a
/// multi-buffer packet's chain of frames counts once).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TxCounts {
    /// Packets put on the tx ring.
    pub sent: u64,
    /// Packets that found the tx ring full and were recycled.
    pub dropped: u64,
}

/// Packets in `frames`: frames that end one (not continued by the next).
fn packets(frames: &[Frame]) -> u64 {
    frames.iter().filter(|f| !f.continues()).count() as u64
}

/// A worker's replies on their way to its socket's tx ring.
#[derive(Debug)]
pub struct TxPath {
    socket: SharedSocket,
    spare: Arc<SparePool>,
    staged: Vec<Frame>,
    scratch: Vec<Frame>,
    /// Free frames the socket keeps; the excess goes to the spare pool.
    high_water: usize,
    /// Report transmit progress ([`TxPath::progress`]): the socket is bound
    /// zero-copy.
    zero_copy: bool,
    /// The socket's transmit sequence after this path's last send: its
    /// replies are on the wire once the socket completed that many.
    flushed_to: u64,
}

impl TxPath {
    /// The path to `socket` (rings of `ring_size`), spilling excess free
    /// frames to `spare`.
    pub fn new(socket: SharedSocket, spare: Arc<SparePool>, ring_size: usize) -> Self {
        Self {
            socket,
            spare,
            staged: Vec::with_capacity(ring_size),
            scratch: Vec::new(),
            high_water: ring_size,
            zero_copy: false,
            flushed_to: 0,
        }
    }

    /// Whether the socket is bound zero-copy, where a flushed reply is only
    /// queued to the device: then [`TxPath::progress`] reports how far the
    /// device got (default: copy mode, no report).
    pub fn with_zero_copy(mut self, zero_copy: bool) -> Self {
        self.zero_copy = zero_copy;
        self
    }

    /// Transmit progress for the runtime's
    /// [`Handler::tx_progress`](steer_core::dispatch::Handler::tx_progress),
    /// in the socket's transmit sequence: `flushed` is where it stood after
    /// this path's last send, `completed` how far the device completed
    /// (at most `flushed`). Reaps completions (and kicks when the ring asks).
    /// `None` in copy mode, where a flush hands frames to the device before
    /// it returns. Frames other senders put on the same socket in between
    /// only make the wait longer: the ring completes in order.
    pub fn progress(&mut self) -> Option<steer_core::dispatch::TxProgress> {
        if !self.zero_copy {
            return None;
        }
        let (_, completed) = lock(&self.socket).tx_sequence();
        Some(steer_core::dispatch::TxProgress {
            flushed: self.flushed_to,
            completed: completed.min(self.flushed_to),
        })
    }

    /// Stages a reply, to leave at the next [`TxPath::flush`].
    pub fn stage(&mut self, frame: Frame) {
        self.staged.push(frame);
    }

    /// Stages a reply of `bytes` that may need several frames (a
    /// multi-buffer packet): written across `head` and frames from the
    /// spare pool, or the socket's free pool when the spare pool is empty
    /// ([`scatter`](super::scatter)). Returns whether it was staged; if not
    /// (too long for a chain, or no free frames), every frame is back in
    /// the spare pool and the refusal is counted.
    pub fn stage_packet(&mut self, umem: &UmemView, head: Frame, bytes: &[u8]) -> bool {
        let mut s = lock(&self.socket);
        match super::chain::scatter(umem, &self.spare, head, bytes, Some(&mut s)) {
            Some(chain) => {
                self.staged.extend(chain);
                true
            }
            None => {
                s.count_multi_refused();
                false
            }
        }
    }

    /// Sends what is staged. A full tx ring gets one completion pass and a
    /// second try; what still does not fit is recycled and counted.
    pub fn flush(&mut self) -> TxCounts {
        if self.staged.is_empty() {
            return TxCounts::default();
        }
        let mut s = lock(&self.socket);
        let counts = send_or_recycle(&mut s, &mut self.staged, &self.spare);
        if self.zero_copy {
            self.flushed_to = s.tx_sequence().0;
        }
        if s.free_frames() > self.high_water {
            self.spare
                .spill(&mut s, self.high_water / 2, &mut self.scratch);
        }
        counts
    }
}

impl Drop for TxPath {
    /// A handler dropped with replies still staged (a worker restarted
    /// after its handler panicked mid-flush): the frames go back to the
    /// socket's free pool rather than leak.
    fn drop(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        let mut s = lock(&self.socket);
        self.spare.put_all(s.recycle(self.staged.drain(..)));
    }
}

/// Puts `frames` on `socket`'s tx ring, in order. A full ring gets one
/// completion pass and a second try; what still does not fit goes back to
/// the socket's free pool (strays to `spare`) and is counted as dropped.
/// `frames` is empty afterwards.
pub fn send_or_recycle(
    socket: &mut QueueSocket,
    frames: &mut Vec<Frame>,
    spare: &SparePool,
) -> TxCounts {
    let before = packets(frames);
    // A failed kick (e.g. EAGAIN) still leaves the frames on the ring:
    // what left `frames` was queued, whatever `send` returned.
    let _ = socket.send(frames);
    if !frames.is_empty() {
        socket.complete();
        let _ = socket.send(frames);
    }
    let dropped = packets(frames);
    if !frames.is_empty() {
        let chains = frames
            .windows(2)
            .filter(|w| w[0].continues() && !w[1].continues())
            .count();
        socket.count_multi(0, 0, chains as u64);
        spare.put_all(socket.recycle(frames.drain(..)));
    }
    TxCounts {
        sent: before - dropped,
        dropped,
    }
}

/// The transmit resources of a port, for sends from outside the workers
/// (an application's replies from its own threads): every queue's socket,
/// the spare pool and the UMEM.
#[derive(Debug, Clone)]
pub struct TxResources {
    /// Every queue's socket, shared with the rx sources.
    pub sockets: Vec<SharedSocket>,
    /// The spare pool.
    pub spare: Arc<SparePool>,
    /// The UMEM, to write replies into frames.
    pub umem: UmemView,
    /// Whether the sockets take multi-buffer packets (`XDP_USE_SG`): a
    /// reply longer than one frame may then leave as a chain
    /// ([`scatter`](super::scatter)).
    pub multi_buffer: bool,
}
