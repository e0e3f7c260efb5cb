//! The port's UMEM as the application sees it: the [`Frame`] token through
//! which the application owns one UMEM frame, its `Copy` form [`RawFrame`]
//! for descriptor queues, and [`UmemView`], which reads and rewrites the
//! bytes of owned frames and the [`RxMeta`] the steer program writes in
//! front of a received packet.
//!
//! Invariants:
//! - A [`Frame`] is created only by the socket module, from a descriptor it
//!   took off a ring or out of a free pool (`Frame::from_ring`), or by
//!   [`Frame::from_raw`] from the one live copy of a [`RawFrame`]; it is
//!   consumed when given back (send, recycle) and is neither `Clone` nor
//!   `Copy`. So `&mut Frame` is exclusive access to that frame's memory, and
//!   the kernel never touches a frame while a `Frame` exists for it.
//! - Every `Frame` carries the id of the UMEM it belongs to; a [`UmemView`]
//!   touches only frames of its own UMEM (others read as empty / `None`), so
//!   no access leaves the one mmap'd region it checks against.

use std::sync::atomic::{AtomicU32, Ordering};

use xsk_rs::{FrameDesc, Umem};

/// Ids of the UMEMs of this process (0 is the default [`RawFrame`]'s: no UMEM).
static NEXT_UMEM_ID: AtomicU32 = AtomicU32::new(1);

/// A UMEM frame owned by the application: received from a socket, or taken
/// from a free pool to transmit. Give it back with [`QueueSocket::send`](crate::QueueSocket::send) or
/// [`QueueSocket::recycle`](crate::QueueSocket::recycle) (on any socket of the same port).
#[derive(Debug)]
pub struct Frame {
    desc: FrameDesc,
    umem_id: u32,
}

impl Frame {
    /// The token for a descriptor the socket module took off the rx or
    /// completion ring or out of a free pool, of the UMEM with id `umem_id`.
    pub(crate) fn from_ring(desc: FrameDesc, umem_id: u32) -> Frame {
        Frame { desc, umem_id }
    }

    /// The descriptor, for handing the frame to a ring.
    pub(crate) fn desc(&self) -> FrameDesc {
        self.desc
    }

    /// The id of the UMEM the frame belongs to.
    pub(crate) fn umem_id(&self) -> u32 {
        self.umem_id
    }

    /// Offset of the packet data in the UMEM (unique per frame held).
    pub fn addr(&self) -> usize {
        self.desc.addr()
    }

    /// Packet length in bytes.
    pub fn len(&self) -> usize {
        self.desc.lengths().data()
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Frame {
    /// Turns the token into a plain descriptor that can travel through
    /// `Copy`-only queues (steer's rings and dispatchers). The frame stays
    /// owned by whoever holds the [`RawFrame`]; turn it back with
    /// [`Frame::from_raw`] exactly once to send or recycle it.
    ///
    /// ```no_run
    /// # fn demo(s: &mut steer_xdp::QueueSocket, f: steer_xdp::Frame) {
    /// let raw = f.into_raw();
    /// // ... pass `raw` through a ring to another thread ...
    /// // SAFETY: `raw` came from `into_raw` and is turned back once.
    /// let f = unsafe { steer_xdp::Frame::from_raw(raw) };
    /// s.recycle([f]);
    /// # }
    /// ```
    pub fn into_raw(self) -> RawFrame {
        RawFrame {
            desc: self.desc,
            umem_id: self.umem_id,
            flow_hash: 0,
        }
    }

    /// Takes ownership of a frame back from its descriptor.
    ///
    /// # Safety
    /// `raw` must come from [`Frame::into_raw`], and it (or any copy of it)
    /// must not be turned back again while the returned `Frame` or its
    /// successors exist: two `Frame`s for one UMEM frame would alias its
    /// memory and hand it to the kernel twice.
    pub unsafe fn from_raw(raw: RawFrame) -> Frame {
        Frame {
            desc: raw.desc,
            umem_id: raw.umem_id,
        }
    }
}

/// A [`Frame`] in transit: a `Copy` descriptor without ownership semantics,
/// for queues that move descriptors by value. Made by [`Frame::into_raw`].
/// The default value refers to no frame of any port.
#[derive(Debug, Clone, Copy, Default)]
#[doc(alias = "xdp_desc")]
pub struct RawFrame {
    desc: FrameDesc,
    umem_id: u32,
    /// A tag travelling with the descriptor (it sits in what would be
    /// padding: the descriptor stays 40 bytes): steer's dispatcher writes
    /// the flow hash it steered the frame by, for the handler.
    flow_hash: u32,
}

impl RawFrame {
    /// The flow hash a dispatcher tagged this descriptor with (0: none).
    pub fn flow_hash(&self) -> u32 {
        self.flow_hash
    }

    /// Tags the descriptor with the flow hash it was steered by.
    pub fn set_flow_hash(&mut self, hash: u32) {
        self.flow_hash = hash;
    }

    /// Offset of the packet data in the UMEM.
    pub fn addr(&self) -> usize {
        self.desc.addr()
    }

    /// Packet length in bytes.
    pub fn len(&self) -> usize {
        self.desc.lengths().data()
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The metadata the steer program writes in front of a redirected packet
/// (mirrors `struct steer_meta` in bpf/steer_xdp.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(alias = "steer_meta")]
#[doc(alias = "bpf_xdp_metadata_rx_hash")]
pub struct RxMeta {
    /// The receive hash computed by the device, when it supplied one.
    pub rx_hash: Option<u32>,
    /// The device's hash type (`enum xdp_rss_hash_type`), 0 when unknown.
    pub rx_hash_type: u16,
}

impl RxMeta {
    /// `XDP_RSS_L4` in `enum xdp_rss_hash_type`: the hash covers the ports.
    pub const RSS_L4: u16 = 1 << 3;

    /// The receive hash if it is a hash of the 5-tuple (its type has
    /// [`RxMeta::RSS_L4`]); an L3-only hash (addresses only) or one of
    /// unknown type is `None`, so the caller hashes the flow itself.
    ///
    /// ```
    /// use steer_xdp::RxMeta;
    /// let l4 = RxMeta { rx_hash: Some(7), rx_hash_type: RxMeta::RSS_L4 | 1 };
    /// assert_eq!(l4.five_tuple_hash(), Some(7));
    /// let l3 = RxMeta { rx_hash: Some(7), rx_hash_type: 1 }; // XDP_RSS_L3_IPV4
    /// assert_eq!(l3.five_tuple_hash(), None);
    /// ```
    pub fn five_tuple_hash(&self) -> Option<u32> {
        self.rx_hash
            .filter(|_| self.rx_hash_type & Self::RSS_L4 != 0)
    }
}

const META_LEN: usize = 8;
const META_MAGIC: u16 = 0x5300;
const META_HASH: u16 = 1;

/// A handle on a port's UMEM: reads and rewrites the bytes of [`Frame`]s
/// from any thread (`Clone + Send + Sync`), e.g. the handler a steer ring
/// delivers frames to. Frames of another port read as empty / `None`.
#[derive(Debug, Clone)]
#[doc(alias = "xsk_umem")]
#[doc(alias = "UMEM")]
pub struct UmemView {
    umem: Umem,
    id: u32,
    /// Frame size in bytes (frames are aligned to it in the UMEM).
    frame_size: usize,
}

impl UmemView {
    /// A view on a freshly created `umem` of `frame_size`-byte frames, with
    /// an id of its own.
    pub(crate) fn new(umem: Umem, frame_size: usize) -> Self {
        UmemView {
            umem,
            id: NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed),
            frame_size,
        }
    }

    /// The id the frames of this UMEM carry.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The packet bytes of `frame` (empty for a frame of another port).
    pub fn data<'a>(&'a self, frame: &'a Frame) -> &'a [u8] {
        if frame.umem_id != self.id {
            return &[];
        }
        // SAFETY: the frame belongs to this UMEM and, being held as a `Frame`,
        // is not accessed by the kernel or mutably elsewhere (module invariant).
        unsafe { self.umem.data(&frame.desc) }.contents()
    }

    /// Runs `f` on the packet bytes of `frame`, mutably (in-place rewrites).
    /// Returns `None` for a frame of another port.
    pub fn with_data_mut<R>(&self, frame: &mut Frame, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        if frame.umem_id != self.id {
            return None;
        }
        // SAFETY: as in `data`, and `&mut Frame` makes this access exclusive.
        let mut data = unsafe { self.umem.data_mut(&mut frame.desc) };
        Some(f(data.contents_mut()))
    }

    /// Replaces the packet in `frame` with `bytes` (truncated to the frame's room).
    /// Returns the new length, or `None` for a frame of another port.
    pub fn write(&self, frame: &mut Frame, bytes: &[u8]) -> Option<usize> {
        use std::io::Write;
        if frame.umem_id != self.id {
            return None;
        }
        // SAFETY: as in `with_data_mut`.
        let mut data = unsafe { self.umem.data_mut(&mut frame.desc) };
        let mut cursor = data.cursor();
        cursor.set_pos(0);
        let n = cursor.write(bytes).unwrap_or(0);
        Some(n)
    }

    /// Sets the packet length of `frame` (capped at the frame's room), keeping
    /// its bytes: frames back from the completion ring come with length 0.
    /// Returns the new length, or `None` for a frame of another port.
    pub fn set_len(&self, frame: &mut Frame, len: usize) -> Option<usize> {
        if frame.umem_id != self.id {
            return None;
        }
        // SAFETY: as in `with_data_mut`.
        let mut data = unsafe { self.umem.data_mut(&mut frame.desc) };
        let mut cursor = data.cursor();
        cursor.set_pos(len);
        Some(cursor.pos())
    }

    /// The packet bytes of a frame in transit (empty for a frame of another
    /// port, or the default descriptor).
    ///
    /// # Safety
    /// The caller must own the frame `raw` describes (it holds the only live
    /// copy of a descriptor made by [`Frame::into_raw`]) for as long as the
    /// returned slice lives, so nobody writes the frame meanwhile.
    pub unsafe fn data_raw(&self, raw: &RawFrame) -> &[u8] {
        if raw.umem_id != self.id {
            return &[];
        }
        // SAFETY: the descriptor came from this UMEM (same id) and the
        // caller owns the frame, so nobody writes it meanwhile.
        unsafe { self.umem.data(&raw.desc) }.contents()
    }

    /// The metadata in front of a frame in transit, as [`Self::meta`].
    ///
    /// # Safety
    /// As [`Self::data_raw`].
    pub unsafe fn meta_raw(&self, raw: &RawFrame) -> Option<RxMeta> {
        // SAFETY: forwarded from the caller.
        let data = unsafe { self.data_raw(raw) };
        self.meta_before(data, raw.desc.addr())
    }

    /// The metadata the steer program wrote in front of a received packet, if any.
    pub fn meta(&self, frame: &Frame) -> Option<RxMeta> {
        self.meta_before(self.data(frame), frame.desc.addr())
    }

    /// Reads the metadata in front of `data`, the packet bytes of an owned
    /// frame of this UMEM whose packet starts at UMEM offset `addr`.
    fn meta_before(&self, data: &[u8], addr: usize) -> Option<RxMeta> {
        // Only a packet that starts at least META_LEN bytes into its frame
        // (every rx packet: the kernel leaves XDP_PACKET_HEADROOM) has room
        // for metadata inside its own frame.
        let offset_in_frame = addr % self.frame_size.max(1);
        if data.is_empty() || offset_in_frame < META_LEN {
            return None;
        }
        // SAFETY: the 8 bytes before the packet lie inside the same frame
        // (checked above), so inside the one mmap'd UMEM region; the kernel
        // copied the metadata there before handing the frame over, and the
        // frame is ours (module invariant). Unaligned read of plain bytes.
        let raw: [u8; META_LEN] =
            unsafe { std::ptr::read_unaligned(data.as_ptr().sub(META_LEN).cast()) };
        let hash = u32::from_ne_bytes([raw[0], raw[1], raw[2], raw[3]]);
        let hash_type = u16::from_ne_bytes([raw[4], raw[5]]);
        let flags = u16::from_ne_bytes([raw[6], raw[7]]);
        if flags & 0xff00 != META_MAGIC {
            return None;
        }
        Some(RxMeta {
            rx_hash: (flags & META_HASH != 0).then_some(hash),
            rx_hash_type: hash_type,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flow_hash_tag_costs_no_ring_space() {
        // The descriptor steer's rings carry stays five words: the tag
        // fills what was padding after the UMEM id.
        assert_eq!(std::mem::size_of::<RawFrame>(), 40);
        let mut raw = RawFrame::default();
        assert_eq!(raw.flow_hash(), 0);
        raw.set_flow_hash(0xdead_beef);
        assert_eq!(raw.flow_hash(), 0xdead_beef);
    }
}
