//! Where the engine's UMEM frames live between the sockets, below both the
//! engine and flow delivery: the sockets shared by receive and transmit,
//! the spare pool, the [`FramePool`](steer_core::dispatch::FramePool) view
//! dispatchers and handlers use, the [`RxSource`](steer_core::runtime::RxSource)
//! that turns an AF_XDP socket into a stream of [`RawFrame`] descriptors, and
//! a worker's transmit path.
//!
//! Invariants:
//! - Every `RawFrame` the engine handles came from [`Frame::into_raw`] on a
//!   frame of the port's one UMEM ([`XskSource`] is the only place that
//!   makes them) and has exactly one owner at a time: a dispatcher, a ring
//!   slot, a handler, or the runtime giving it back. It becomes a [`Frame`]
//!   again in one place, [`adopt`], when the runtime hands it over.
//! - Everywhere else frames are [`Frame`]s, owned values: in a socket's
//!   pools and rings, in the spare pool, on a transmit path.
//! - With one UMEM shared by all sockets a frame received on one queue may
//!   be transmitted and completed on another. Frames released by handlers go
//!   to the spare pool; a socket whose free pool runs low takes from it, and
//!   a transmitting socket whose free pool grows past its high-water mark
//!   gives its excess back, so no queue starves while another hoards.

#![allow(unsafe_code)]

mod pool;
mod source;
mod spare;
mod tx;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use steer_xdp::{Frame, QueueSocket, RawFrame};

pub(crate) use pool::UmemPool;
pub(crate) use source::XskSource;
pub(crate) use spare::SparePool;
pub(crate) use tx::{send_or_recycle, TxPath};

/// A socket shared by the rx source that polls it and the handlers that
/// transmit on it. Each holder locks it once per batch.
pub(crate) type SharedSocket = Arc<Mutex<QueueSocket>>;

/// Locks a shared socket; a holder that panicked left it consistent (every
/// socket operation completes before it returns), so poisoning is ignored.
pub(crate) fn lock(socket: &SharedSocket) -> MutexGuard<'_, QueueSocket> {
    socket.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes back a descriptor the runtime hands over (to a handler, to the
/// pool's `release`, or to the source's `give_back`): the one place a
/// [`RawFrame`] becomes a [`Frame`] again.
pub(crate) fn adopt(desc: RawFrame) -> Frame {
    // SAFETY: `desc` came from `Frame::into_raw` in `XskSource::poll`, on a
    // frame of the port's UMEM (module invariant). steer-core's runtime
    // passes each descriptor a source produced to exactly one of
    // `Handler::handle`, `FramePool::release` and `RxSource::give_back`,
    // once (its ownership invariant), and those three are this function's
    // only callers: nobody else holds `desc`, so it becomes a Frame once.
    unsafe { Frame::from_raw(desc) }
}

/// The transmit resources of a port, for sends from outside the workers
/// (flow delivery's replies): every queue's socket, the spare pool and the
/// UMEM.
#[derive(Debug, Clone)]
pub(crate) struct TxResources {
    pub(crate) sockets: Vec<SharedSocket>,
    pub(crate) spare: Arc<SparePool>,
    pub(crate) umem: steer_xdp::UmemView,
}
