//! The spare pool: free frames not in any socket's pool, shared by all
//! workers and by flow delivery's replies.
//!
//! Invariant: the pool is bounded by the UMEM's frame count, so a push
//! cannot fail while every frame has one owner; if it ever did, the frame
//! is counted in `lost` instead of silently vanishing.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::socket::QueueSocket;
use crate::umem::Frame;
use crossbeam_queue::ArrayQueue;

/// Free frames shared by all workers.
#[derive(Debug)]
pub struct SparePool {
    frames: ArrayQueue<Frame>,
    /// Frames kept back from rx top-ups for replies the application sends
    /// (flow delivery), so receive cannot starve transmit.
    reserve: usize,
    /// Frames that found the pool full (never expected; see module docs).
    pub lost: AtomicU64,
}

impl SparePool {
    /// A pool for up to `capacity` frames (the UMEM's frame count), of
    /// which rx top-ups leave `reserve` for transmit.
    pub fn new(capacity: usize, reserve: usize) -> Self {
        Self {
            frames: ArrayQueue::new(capacity.max(1)),
            reserve,
            lost: AtomicU64::new(0),
        }
    }

    /// Puts a free frame in the pool (no longer marked as continuing a
    /// multi-buffer packet: a frame taken from the pool stands alone).
    pub fn put(&self, mut frame: Frame) {
        frame.set_continues(false);
        if self.frames.push(frame).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes a free frame, if any.
    pub fn take(&self) -> Option<Frame> {
        self.frames.pop()
    }

    /// Frames in the pool now.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether the pool is empty now.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Gives frames a socket did not take (not of its UMEM: cannot happen
    /// with one UMEM) back to the pool.
    pub fn put_all(&self, strays: impl IntoIterator<Item = Frame>) {
        for stray in strays {
            self.put(stray);
        }
    }

    /// Moves up to `max` spare frames into `socket`'s free pool, leaving
    /// the reserve for transmit unless `all`.
    pub fn top_up(
        &self,
        socket: &mut QueueSocket,
        max: usize,
        all: bool,
        scratch: &mut Vec<Frame>,
    ) {
        let keep = if all { 0 } else { self.reserve };
        let max = max.min(self.frames.len().saturating_sub(keep));
        while scratch.len() < max {
            let Some(frame) = self.take() else { break };
            scratch.push(frame);
        }
        if !scratch.is_empty() {
            self.put_all(socket.recycle(scratch.drain(..)));
        }
    }

    /// Moves the part of `socket`'s free pool above `keep` to the spare pool.
    pub fn spill(&self, socket: &mut QueueSocket, keep: usize, scratch: &mut Vec<Frame>) {
        let excess = socket.free_frames().saturating_sub(keep);
        if excess > 0 {
            socket.alloc(excess, scratch);
            self.put_all(scratch.drain(..));
        }
    }
}
