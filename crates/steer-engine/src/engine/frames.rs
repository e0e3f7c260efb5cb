//! Where the engine's frames live between the sockets: the shared spare
//! pool, the [`FramePool`] view of the UMEM that dispatchers and handlers
//! use, and the [`RxSource`] that turns an AF_XDP socket into a stream of
//! [`RawFrame`] descriptors.
//!
//! Invariants:
//! - Every `RawFrame` the engine handles came from [`Frame::into_raw`] and
//!   has exactly one owner at a time: a dispatcher, a ring slot, a handler,
//!   the spare pool, or a socket (as a [`Frame`] again). It is turned back
//!   into a `Frame` exactly once, by whoever gives it to a socket.
//! - With one UMEM shared by all sockets a frame received on one queue may
//!   be transmitted and completed on another. Frames released by handlers go
//!   to the spare pool; a socket whose free pool runs low takes from it, and
//!   a transmitting socket whose free pool grows past its high-water mark
//!   gives its excess back, so no queue starves while another hoards.
//! - The spare pool is bounded by the UMEM's frame count, so a push cannot
//!   fail while the invariant above holds; if it ever did, the frame is
//!   counted in `lost` instead of silently vanishing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crossbeam_queue::ArrayQueue;
use steer_core::dispatch::FramePool;
use steer_core::runtime::RxSource;
use tracing::warn;
use xdp_io::{Frame, QueueSocket, RawFrame, UmemView};

/// A socket shared by the rx source that polls it and the handlers that
/// transmit on it. Each holder locks it once per batch.
pub(crate) type SharedSocket = Arc<Mutex<QueueSocket>>;

pub(crate) fn lock(socket: &SharedSocket) -> MutexGuard<'_, QueueSocket> {
    socket.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Free frames not in any socket's pool, shared by all workers.
#[derive(Debug)]
pub(crate) struct SparePool {
    frames: ArrayQueue<RawFrame>,
    /// Frames kept back from rx top-ups for replies the application sends
    /// (flow delivery), so receive cannot starve transmit.
    reserve: usize,
    /// Frames that found the pool full (never expected; see module docs).
    pub(crate) lost: AtomicU64,
}

impl SparePool {
    pub(crate) fn new(capacity: usize, reserve: usize) -> Self {
        Self {
            frames: ArrayQueue::new(capacity.max(1)),
            reserve,
            lost: AtomicU64::new(0),
        }
    }

    pub(crate) fn put(&self, raw: RawFrame) {
        if self.frames.push(raw).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn take(&self) -> Option<RawFrame> {
        self.frames.pop()
    }

    /// Moves up to `max` spare frames into `socket`'s free pool, leaving
    /// the reserve for transmit unless `all`.
    pub(crate) fn top_up(
        &self,
        socket: &mut QueueSocket,
        max: usize,
        all: bool,
        scratch: &mut Vec<Frame>,
    ) {
        let keep = if all { 0 } else { self.reserve };
        let max = max.min(self.frames.len().saturating_sub(keep));
        while scratch.len() < max {
            let Some(raw) = self.take() else { break };
            // SAFETY: the spare pool owns `raw` (module invariant) and gives
            // it up here; it becomes a Frame exactly once.
            scratch.push(unsafe { Frame::from_raw(raw) });
        }
        if !scratch.is_empty() {
            for stray in socket.recycle(scratch.drain(..)) {
                // Not a frame of this port: cannot happen with one UMEM.
                self.put(stray.into_raw());
            }
        }
    }

    /// Moves the part of `socket`'s free pool above `keep` to the spare pool.
    pub(crate) fn spill(&self, socket: &mut QueueSocket, keep: usize, scratch: &mut Vec<Frame>) {
        let excess = socket.free_frames().saturating_sub(keep);
        if excess > 0 {
            socket.alloc(excess, scratch);
            for f in scratch.drain(..) {
                self.put(f.into_raw());
            }
        }
    }
}

/// The UMEM as dispatchers and handlers see it: frame bytes by descriptor,
/// the NIC hash from the program's metadata, and release to the spare pool.
#[derive(Debug, Clone)]
pub(crate) struct UmemPool {
    pub(crate) umem: UmemView,
    pub(crate) spare: Arc<SparePool>,
    pub(crate) use_rx_hash: bool,
}

impl FramePool<RawFrame> for UmemPool {
    #[inline]
    fn frame(&self, desc: &RawFrame) -> &[u8] {
        // SAFETY: the caller (dispatcher or handler) owns `desc` while it
        // asks (module invariant), so nobody writes the frame meanwhile.
        unsafe { self.umem.data_raw(desc) }
    }

    #[inline]
    fn rx_hash(&self, desc: &RawFrame) -> Option<u32> {
        if !self.use_rx_hash {
            return None;
        }
        // SAFETY: as in `frame`.
        unsafe { self.umem.meta_raw(desc) }.and_then(|m| m.rx_hash)
    }

    #[inline]
    fn release(&mut self, desc: RawFrame) {
        self.spare.put(desc);
    }

    #[inline]
    fn prefetch(&self, desc: &RawFrame) {
        // The kernel copied the frame in on the sending CPU: the headers'
        // cache lines are elsewhere. Ask for the first 64 bytes (Ethernet,
        // IP and L4 headers; two lines when the packet starts mid-line).
        let data = self.frame(desc);
        if let (Some(first), Some(last)) = (data.first(), data.get(63).or(data.last())) {
            prefetch_line(first);
            prefetch_line(last);
        }
    }
}

/// Hints the CPU to fetch the cache line holding `byte` (a no-op off
/// x86_64).
#[inline(always)]
fn prefetch_line(byte: &u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no architectural effect (it reads nothing into
    // the program and cannot fault), and SSE is part of the x86_64 baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(byte).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = byte;
}

/// One rx queue's AF_XDP socket as a [`RxSource`].
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
        // SAFETY: the runtime gives back descriptors it polled from us and
        // never dispatched: we are their only owner again.
        let frames = descs.iter().map(|&d| unsafe { Frame::from_raw(d) });
        for stray in s.recycle(frames) {
            self.spare.put(stray.into_raw());
        }
    }

    fn has_pending(&self) -> bool {
        lock(&self.socket).rx_ready()
    }
}
