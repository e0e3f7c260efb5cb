//! The UMEM as dispatchers and handlers see it ([`FramePool`]): frame bytes
//! by descriptor, the NIC hash from the XDP program's metadata (a 5-tuple
//! hash only), the flow hash tagged on the descriptor for the handler,
//! header prefetch, release to the spare pool, and [`UmemPool::adopt`], the
//! handler's way to own the frame it was handed.
//!
//! Invariant: every descriptor that comes in ends taken back (to a `Frame`
//! the caller owns, or into the spare pool) or refused, never both (the
//! custody argument in [`crate::frames`]).

use std::sync::Arc;

use steer_core::dispatch::FramePool;

use super::chain::RxPacket;
use super::custody::{self, RawFrame};
use super::spare::SparePool;
use crate::umem::{Frame, UmemView};

/// A worker's handle on the UMEM and the spare pool: cheap to clone, one
/// per worker.
#[derive(Debug, Clone)]
pub struct UmemPool {
    umem: UmemView,
    spare: Arc<SparePool>,
    use_rx_hash: bool,
}

impl UmemPool {
    /// A handle on `umem` releasing frames to `spare`; with `use_rx_hash`
    /// the NIC's 5-tuple hash stands for the flow when the packet has one.
    pub fn new(umem: UmemView, spare: Arc<SparePool>, use_rx_hash: bool) -> Self {
        Self {
            umem,
            spare,
            use_rx_hash,
        }
    }

    /// The UMEM the pool reads.
    pub fn umem(&self) -> &UmemView {
        &self.umem
    }

    /// The spare pool released frames go to.
    pub fn spare(&self) -> &Arc<SparePool> {
        &self.spare
    }

    /// Takes the frame `desc` names back as a [`Frame`] the caller owns (to
    /// rewrite, send, or put in the spare pool): `None` when it is not lent
    /// out, as for a second copy of a descriptor already adopted, or one of
    /// another port.
    #[inline]
    pub fn adopt(&self, desc: RawFrame) -> Option<Frame> {
        custody::reclaim(&self.umem, desc)
    }

    /// As [`UmemPool::adopt`], keeping the contiguous copy of a packet
    /// received in several frames ([`RxPacket::gathered`]); `adopt` drops it.
    #[inline]
    pub fn adopt_packet(&self, desc: RawFrame) -> Option<RxPacket> {
        custody::reclaim_packet(&self.umem, desc)
            .map(|(frame, gathered)| RxPacket { frame, gathered })
    }
}

impl FramePool<RawFrame> for UmemPool {
    #[inline]
    fn frame(&self, desc: &RawFrame) -> &[u8] {
        custody::data(&self.umem, desc)
    }

    #[inline]
    fn rx_hash(&self, desc: &RawFrame) -> Option<u32> {
        if !self.use_rx_hash {
            return None;
        }
        // Only a hash of the 5-tuple stands for the flow: an L3-only hash
        // (a NIC hashing addresses only) would put every flow between two
        // hosts on one CPU; the classifier hashes those itself.
        custody::meta(&self.umem, desc).and_then(|m| m.five_tuple_hash())
    }

    #[inline]
    fn tag_flow(&self, desc: &mut RawFrame, hash: u32) {
        desc.set_flow_hash(hash);
    }

    #[inline]
    fn release(&mut self, desc: RawFrame) {
        if let Some(frame) = self.adopt(desc) {
            self.spare.put(frame);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::tests_support::test_umem;

    #[test]
    fn released_frames_go_to_the_spare_pool_once() {
        let Some((umem, mut frames)) = test_umem(4) else {
            return;
        };
        let spare = Arc::new(SparePool::new(4, 0));
        let mut pool = UmemPool::new(umem.clone(), Arc::clone(&spare), false);
        let mut frame = frames.pop().unwrap();
        umem.write(&mut frame, &[7u8; 60]).unwrap();
        let raw = custody::lend(&umem, frame).unwrap();
        assert_eq!(pool.frame(&raw), &[7u8; 60][..]);
        pool.prefetch(&raw);
        assert_eq!(pool.rx_hash(&raw), None);
        pool.release(raw);
        pool.release(raw);
        assert_eq!(spare.len(), 1);
        assert!(pool.adopt(raw).is_none());
        assert!(pool.frame(&raw).is_empty());
        assert_eq!(spare.lost.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn a_descriptor_is_adopted_once_by_any_worker() {
        let Some((umem, mut frames)) = test_umem(2) else {
            return;
        };
        let spare = Arc::new(SparePool::new(2, 0));
        // Two workers' handles on the same UMEM.
        let (a, b) = (
            UmemPool::new(umem.clone(), Arc::clone(&spare), false),
            UmemPool::new(umem.clone(), spare, false),
        );
        let raw = custody::lend(&umem, frames.pop().unwrap()).unwrap();
        let frame = a.adopt(raw).expect("the holder adopts it");
        assert!(b.adopt(raw).is_none(), "a copy elsewhere is refused");
        assert!(a.adopt(raw).is_none(), "and so is the same one again");
        // The adopted frame is an ordinary owned frame again.
        assert_eq!(umem.data(&frame).len(), raw.len());
    }

    #[test]
    fn the_flow_tag_travels_with_the_descriptor() {
        let Some((umem, mut frames)) = test_umem(2) else {
            return;
        };
        let pool = UmemPool::new(umem.clone(), Arc::new(SparePool::new(2, 0)), true);
        let mut raw = custody::lend(&umem, frames.pop().unwrap()).unwrap();
        pool.tag_flow(&mut raw, 42);
        let copy = raw;
        assert_eq!(copy.flow_hash(), 42);
        // A fresh frame carries no steer metadata: no NIC hash.
        assert_eq!(pool.rx_hash(&copy), None);
        assert!(pool.adopt(copy).is_some());
    }
}
