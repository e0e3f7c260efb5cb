//! Frame ownership between the sockets and steer-core's runtime: the one
//! place a UMEM frame becomes a `Copy` descriptor ([`RawFrame`]) and a
//! [`Frame`] again, with the adapters an engine plugs into the runtime: the
//! rx source ([`XskSource`]), the frame pool its dispatchers and handlers
//! read through ([`UmemPool`]), the spare pool ([`SparePool`]) and a
//! worker's transmit path ([`TxPath`]). Everything here is safe to call;
//! the `unsafe` it needs is in this module and rests on the argument below.
//!
//! # Where a frame is
//!
//! A UMEM frame is always in exactly one place: on a socket's ring or in
//! its free pool (the socket module's business), held as a [`Frame`] (an
//! owned token, neither `Clone` nor `Copy`: in the spare pool, on a
//! transmit path, in the application's hands), or **lent out** as a
//! descriptor. steer-core's rings and dispatchers move descriptors by value
//! and need them `Copy`; a [`RawFrame`] is that descriptor, and any number
//! of copies of it may exist. What keeps those copies from becoming two
//! owners is the frame's custody state, one byte per UMEM frame, kept by
//! the UMEM's [`UmemView`] and shared by every view of it:
//!
//! - *lend* ([`XskSource`], on each frame it receives) consumes the
//!   `Frame` and marks its frame LENT (a release store): from then on no
//!   `Frame` exists for it and no ring or pool holds it.
//! - *reclaim* ([`UmemPool::adopt`], [`FramePool::release`],
//!   [`RxSource::give_back`]) turns a descriptor back into a `Frame` only
//!   by switching its frame from LENT to not lent in one atomic
//!   compare-exchange (acquire: the bytes written before the loan are
//!   seen). Of all the copies of a descriptor, and of stale descriptors of
//!   an earlier loan of the same frame, exactly one wins; the others get
//!   `None` and touch nothing. A descriptor of another UMEM, or the default
//!   one, names no frame here and is refused the same way.
//!
//! So at any time at most one `Frame` exists per UMEM frame, whatever a
//! caller does with descriptors: the unsafe constructor this rests on
//! (`Frame::reclaim`) is called in one place, after winning the exchange.
//! A stale descriptor that wins gets the frame with the stale length and
//! tag, which is wrong data but inside the frame's memory: never two
//! owners, never a frame handed to the kernel twice.
//!
//! Reading a lent frame ([`FramePool::frame`], [`FramePool::rx_hash`],
//! [`FramePool::prefetch`]) needs no `Frame`: the pool reads it through the
//! descriptor, and only while its custody says LENT (a relaxed load of a
//! byte the lending thread has just written). Nobody writes a lent frame:
//! the kernel has it on no ring, and writing takes a `Frame`. What the
//! state cannot see is a copy reclaimed on another thread while a slice
//! read through the descriptor is still alive; that is excluded by the
//! contract of steer-core's runtime, the one rule taken from outside this
//! module: each descriptor an [`RxSource`] hands out is read through the
//! pool only by whoever holds it at the time (its dispatcher, then its
//! handler), and is passed, once, to exactly one of `Handler::handle`,
//! [`FramePool::release`] and [`RxSource::give_back`]. A holder that reads
//! and then hands the descriptor on (to a ring, to the handler) has
//! finished reading first.
//!
//! # Packets in several frames
//!
//! A multi-buffer packet (sockets bound with `XDP_USE_SG`) is lent out as
//! its first frame, in custody state GATHERED instead of LENT, with a
//! contiguous copy of the whole packet in that frame's gather slot (kept by
//! the [`UmemView`] beside the custody states, one per frame); its other
//! frames go back to the socket at once. The slot follows the frame's
//! custody exactly as the frame's bytes do: written by the lender while it
//! still owns the `Frame` (before the release store), read through the
//! descriptor only by the loan's holder while the state says GATHERED, and
//! taken by the one caller whose compare-exchange ends the loan. So the
//! argument above covers it unchanged, and a packet in one frame pays
//! nothing for it (the state byte it already reads says LENT). See the
//! `chain` module for the receive and transmit sides.
//!
//! # Sharing frames between sockets
//!
//! With one UMEM shared by all sockets of a port, a frame received on one
//! queue may be transmitted and completed on another. Frames released by
//! handlers go to the spare pool; a socket whose free pool runs low takes
//! from it, and a transmitting socket whose free pool grows past its
//! high-water mark gives its excess back, so no queue starves while
//! another hoards.
//!
//! [`FramePool`]: steer_core::dispatch::FramePool
//! [`FramePool::frame`]: steer_core::dispatch::FramePool::frame
//! [`FramePool::rx_hash`]: steer_core::dispatch::FramePool::rx_hash
//! [`FramePool::prefetch`]: steer_core::dispatch::FramePool::prefetch
//! [`FramePool::release`]: steer_core::dispatch::FramePool::release
//! [`RxSource`]: steer_core::runtime::RxSource
//! [`RxSource::give_back`]: steer_core::runtime::RxSource::give_back
//! [`Frame`]: crate::Frame
//! [`UmemView`]: crate::UmemView
//! [`RawFrame`]: crate::frames::RawFrame
//! [`XskSource`]: crate::frames::XskSource
//! [`UmemPool`]: crate::frames::UmemPool
//! [`UmemPool::adopt`]: crate::frames::UmemPool::adopt
//! [`SparePool`]: crate::frames::SparePool
//! [`TxPath`]: crate::frames::TxPath

mod chain;
mod custody;
mod pool;
mod source;
mod spare;
mod tx;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::socket::QueueSocket;

pub use chain::{scatter, RxPacket, MAX_CHAIN};
pub use custody::RawFrame;
pub use pool::UmemPool;
pub use source::XskSource;
pub use spare::SparePool;
pub use tx::{send_or_recycle, TxCounts, TxPath, TxResources};

/// A socket shared by the rx source that polls it and the handlers that
/// transmit on it. Each holder locks it once per batch.
pub type SharedSocket = Arc<Mutex<QueueSocket>>;

/// Locks a shared socket; a holder that panicked left it consistent (every
/// socket operation completes before it returns), so poisoning is ignored.
pub fn lock(socket: &SharedSocket) -> MutexGuard<'_, QueueSocket> {
    socket.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A UMEM with no socket, for the tests of this module.
#[cfg(test)]
pub(crate) mod tests_support {
    use std::num::NonZeroU32;

    use xsk_rs::config::UmemConfig;
    use xsk_rs::Umem;

    use crate::umem::{Frame, UmemView};

    /// A UMEM of `n` frames bound to no interface, and a [`Frame`] for each
    /// (as if taken out of a free pool); `None`, said on stderr, where the
    /// kernel refuses to register one (no AF_XDP, not root).
    pub(crate) fn test_umem(n: u32) -> Option<(UmemView, Vec<Frame>)> {
        let config = UmemConfig::default();
        let frame_size = config.frame_size().get() as usize;
        match Umem::new(config, NonZeroU32::new(n)?, false) {
            Ok((umem, descs)) => {
                let view = UmemView::new(umem, frame_size, descs.len());
                let frames = descs
                    .into_iter()
                    .map(|d| Frame::from_ring(d, view.id()))
                    .collect();
                Some((view, frames))
            }
            Err(e) => {
                eprintln!("skipped: cannot create a UMEM here: {e}");
                None
            }
        }
    }
}
