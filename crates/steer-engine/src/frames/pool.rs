//! The UMEM as dispatchers and handlers see it ([`FramePool`]): frame bytes
//! by descriptor, the NIC hash from the XDP program's metadata (a 5-tuple
//! hash only), the flow hash tagged on the descriptor for the handler,
//! header prefetch, and release to the spare pool.

use std::sync::Arc;

use steer_core::dispatch::FramePool;
use steer_xdp::{RawFrame, UmemView};

use super::{adopt, SparePool};

/// A worker's handle on the UMEM and the spare pool.
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
        // asks (frames module invariant), so nobody writes the frame meanwhile.
        unsafe { self.umem.data_raw(desc) }
    }

    #[inline]
    fn rx_hash(&self, desc: &RawFrame) -> Option<u32> {
        if !self.use_rx_hash {
            return None;
        }
        // SAFETY: as in `frame`.
        // Only a hash of the 5-tuple stands for the flow: an L3-only hash
        // (a NIC hashing addresses only) would put every flow between two
        // hosts on one CPU; the classifier hashes those itself.
        unsafe { self.umem.meta_raw(desc) }.and_then(|m| m.five_tuple_hash())
    }

    #[inline]
    fn tag_flow(&self, desc: &mut RawFrame, hash: u32) {
        desc.set_flow_hash(hash);
    }

    #[inline]
    fn release(&mut self, desc: RawFrame) {
        self.spare.put(adopt(desc));
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
