//! The port's UMEM as the application sees it: the [`Frame`] token through
//! which the application owns one UMEM frame, and [`UmemView`], which reads
//! and rewrites the bytes of owned frames and the [`RxMeta`] the steer
//! program writes in front of a received packet. A frame lent out as a
//! `Copy` descriptor is [`crate::frames`]' business; this module only keeps
//! the per-frame custody state that module reads and writes.
//!
//! Invariants:
//! - A [`Frame`] is created only by the socket module, from a descriptor it
//!   took off a ring or out of a free pool (`Frame::from_ring`), or by
//!   [`crate::frames`] when it takes a lent frame back (`Frame::reclaim`);
//!   it is consumed when given back (send, recycle, lend) and is neither
//!   `Clone` nor `Copy`. So `&mut Frame` is exclusive access to that frame's
//!   memory, and the kernel never touches a frame while a `Frame` exists
//!   for it.
//! - Every `Frame` carries the id of the UMEM it belongs to; a [`UmemView`]
//!   touches only frames of its own UMEM (others read as empty / `None`), so
//!   no access leaves the one mmap'd region it checks against.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use xsk_rs::{FrameDesc, Umem};

/// Ids of the UMEMs of this process (0 is no UMEM's: a default descriptor's).
static NEXT_UMEM_ID: AtomicU32 = AtomicU32::new(1);

/// A UMEM frame owned by the application: received from a socket, or taken
/// from a free pool to transmit. Give it back with [`QueueSocket::send`](crate::QueueSocket::send) or
/// [`QueueSocket::recycle`](crate::QueueSocket::recycle) (on any socket of the same port).
#[derive(Debug)]
pub struct Frame {
    desc: FrameDesc,
    umem_id: u32,
}

/// Where a frame's packet is and how long it is: the accessors a [`Frame`]
/// and its lent descriptor ([`RawFrame`](crate::RawFrame)) share, over
/// their `desc` field.
macro_rules! packet_extent {
    () => {
        /// Offset of the packet data in the UMEM (unique per frame held).
        pub fn addr(&self) -> usize {
            self.desc.addr()
        }

        /// Packet length in bytes (of this frame's part of the packet when
        /// the packet spans several frames).
        pub fn len(&self) -> usize {
            self.desc.lengths().data()
        }

        /// Whether the packet is empty.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
    };
}
pub(crate) use packet_extent;

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

    packet_extent!();

    /// Whether the packet goes on in the next frame (`XDP_PKT_CONTD` on
    /// the descriptor): a frame received on a multi-buffer socket, or one
    /// of a chain staged for transmission.
    #[doc(alias = "XDP_PKT_CONTD")]
    pub fn continues(&self) -> bool {
        self.desc.options() & XDP_PKT_CONTD != 0
    }

    /// Marks the packet as going on in the next frame on transmission (or
    /// ending here): only the frames of a chain but its last continue.
    pub(crate) fn set_continues(&mut self, on: bool) {
        let options = self.desc.options() & !XDP_PKT_CONTD;
        self.desc
            .set_options(options | if on { XDP_PKT_CONTD } else { 0 });
    }
}

/// `XDP_PKT_CONTD`: the descriptor's packet goes on in the next descriptor.
pub(crate) const XDP_PKT_CONTD: u32 = 1;

impl Frame {
    /// The descriptor and UMEM id, consuming the token: for
    /// [`crate::frames`], which lends the frame out as a descriptor.
    pub(crate) fn into_parts(self) -> (FrameDesc, u32) {
        (self.desc, self.umem_id)
    }

    /// The token for a frame [`crate::frames`] takes back from a lent
    /// descriptor.
    ///
    /// # Safety
    /// No `Frame` exists for that UMEM frame and no ring or free pool holds
    /// it: the caller has just ended the one loan of it (the custody
    /// argument in [`crate::frames`]).
    pub(crate) unsafe fn reclaim(desc: FrameDesc, umem_id: u32) -> Frame {
        Frame { desc, umem_id }
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
    /// log2 of `frame_size` (a power of two, as the UMEM config demands;
    /// another size is divided by instead): the frame index of an offset.
    frame_shift: Option<u32>,
    /// One custody state per frame of the UMEM, by frame index (`addr /
    /// frame_size`): whether the frame is lent out as a descriptor. Read
    /// and written only by [`crate::frames`]; shared by every view of the
    /// UMEM, so there is one state per frame, whoever asks.
    custody: Arc<[AtomicU8]>,
    /// One slot per frame, by frame index: the contiguous copy of a
    /// multi-buffer packet lent out as its first frame. Read and written
    /// only by [`crate::frames`], under the custody state of the same frame.
    gathered: Arc<[GatherSlot]>,
}

/// The slot of one frame for the contiguous copy of a multi-buffer packet
/// whose first frame it is. Who may touch it is decided by the frame's
/// custody state ([`crate::frames`]): the owner of the frame's `Frame`
/// writes it before lending the frame, the holder of the loan reads it,
/// and whoever ends the loan takes it.
#[derive(Default)]
pub(crate) struct GatherSlot(UnsafeCell<Option<Box<[u8]>>>);

impl std::fmt::Debug for GatherSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GatherSlot")
    }
}

// SAFETY: the slot is reached only through `GatherSlot::get`, whose callers
// (in `crate::frames`) hold the frame's exclusive or lent access as the
// custody protocol defines it: a write happens only by the one owner of the
// frame's `Frame` before a release store (lend) or by the one winner of the
// compare-exchange that ends the loan (acquire); reads happen only by the
// loan's holder in between. So no two threads touch a slot at once, and
// each sees the other's writes.
unsafe impl Sync for GatherSlot {}

impl GatherSlot {
    /// The slot's content.
    ///
    /// # Safety
    /// The caller has the access to the slot the custody protocol in
    /// [`crate::frames`] gives (see the `Sync` impl): shared access for the
    /// life of the returned pointer's uses, exclusive for writes.
    pub(crate) fn get(&self) -> *mut Option<Box<[u8]>> {
        self.0.get()
    }
}

impl UmemView {
    /// A view on a freshly created `umem` of `frame_count` frames of
    /// `frame_size` bytes, with an id of its own and no frame lent out.
    pub(crate) fn new(umem: Umem, frame_size: usize, frame_count: usize) -> Self {
        UmemView {
            umem,
            id: NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed),
            frame_size,
            frame_shift: frame_size
                .is_power_of_two()
                .then(|| frame_size.trailing_zeros()),
            custody: (0..frame_count).map(|_| AtomicU8::new(0)).collect(),
            gathered: (0..frame_count).map(|_| GatherSlot::default()).collect(),
        }
    }

    /// The gather slot of the frame holding UMEM offset `addr`, `None` past
    /// the UMEM's end (same index as [`Self::custody_of`]).
    #[inline]
    pub(crate) fn gather_slot_of(&self, addr: usize) -> Option<&GatherSlot> {
        let index = match self.frame_shift {
            Some(shift) => addr >> shift,
            None => addr / self.frame_size.max(1),
        };
        self.gathered.get(index)
    }

    /// Bytes of packet data one frame holds (the frame less the headroom
    /// the kernel keeps in front of a packet).
    pub fn frame_room(&self) -> usize {
        self.frame_size
            .saturating_sub(crate::config::XDP_PACKET_HEADROOM as usize)
    }

    /// The custody state of the frame holding UMEM offset `addr`, `None`
    /// past the UMEM's end. The states start at 0; what the values mean is
    /// [`crate::frames`]' business.
    #[inline]
    pub(crate) fn custody_of(&self, addr: usize) -> Option<&AtomicU8> {
        let index = match self.frame_shift {
            Some(shift) => addr >> shift,
            None => addr / self.frame_size.max(1),
        };
        self.custody.get(index)
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

    /// The packet bytes of the frame `desc` names if it is of this UMEM
    /// (`umem_id`; empty otherwise): a lent frame, read by its holder.
    ///
    /// # Safety
    /// Nobody writes the frame while the returned slice lives: no `Frame`
    /// exists for it and it is on no ring (it is lent out, and the caller
    /// holds the loan; see [`crate::frames`]).
    pub(crate) unsafe fn data_of(&self, desc: &FrameDesc, umem_id: u32) -> &[u8] {
        if umem_id != self.id {
            return &[];
        }
        // SAFETY: the descriptor is of this UMEM (same id) and nobody
        // writes the frame meanwhile (forwarded from the caller).
        unsafe { self.umem.data(desc) }.contents()
    }

    /// The metadata in front of the frame `desc` names, as [`Self::meta`].
    ///
    /// # Safety
    /// As [`Self::data_of`].
    pub(crate) unsafe fn meta_of(&self, desc: &FrameDesc, umem_id: u32) -> Option<RxMeta> {
        // SAFETY: forwarded from the caller.
        let data = unsafe { self.data_of(desc, umem_id) };
        self.meta_before(data, desc.addr())
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
