//! Multi-buffer packets: a packet that spans several UMEM frames, chained
//! by `XDP_PKT_CONTD` on its descriptors (sockets bound with `XDP_USE_SG`).
//!
//! - Receive ([`Gatherer`]): the frames of one packet arrive as a run of
//!   descriptors, every one but the last marked as continuing. The run is
//!   gathered into one contiguous copy; the packet is lent out as its first
//!   frame with the copy in that frame's gather slot (`lend_gathered`, see
//!   [`crate::frames`]), and its other frames go straight back to the
//!   socket's free pool. Readers through the descriptor see the whole
//!   packet; a packet in one frame is lent as before, without a copy.
//! - Adoption ([`RxPacket`]): whoever takes the descriptor back gets the
//!   first frame and the copy.
//! - Transmit ([`scatter`]): a reply longer than one frame is written across
//!   its first frame and frames from the spare pool, every frame but the
//!   last marked as continuing; the socket puts a chain on its tx ring
//!   whole or not at all.
//!
//! Invariants: a frame of a chain is in exactly one place like any other
//! (gathered chains' tails are recycled in the call that gathers them;
//! a chain that cannot be completed or built goes back whole); only frames
//! of a chain being built for transmission carry the continuation mark
//! outside this module's receive path (the spare pool clears it).

use crate::socket::QueueSocket;
use crate::umem::{Frame, UmemView};

use super::spare::SparePool;

/// The most frames one packet may span: the kernel's limit for a packet
/// sent in copy mode (`MAX_SKB_FRAGS`), and more than a 9000-byte MTU needs
/// with 2048-byte frames (6).
pub const MAX_CHAIN: usize = 17;

/// A received packet taken back from its descriptor: its first frame, and
/// for a multi-buffer packet the contiguous copy of all of it (the first
/// frame then holds only the packet's first part).
#[derive(Debug)]
pub struct RxPacket {
    /// The packet's first (for a single-frame packet: only) frame.
    pub frame: Frame,
    /// The whole packet, for a packet that spanned several frames.
    pub gathered: Option<Box<[u8]>>,
}

/// What [`Gatherer::push`] made of a received frame.
#[derive(Debug)]
pub(super) enum Gathered {
    /// A packet in one frame: lend it as it is.
    Single(Frame),
    /// The last frame of a multi-buffer packet arrived: its first frame
    /// and the contiguous copy, to lend together; the other frames are
    /// back in the socket's free pool.
    Multi(Frame, Box<[u8]>),
    /// The frame continues a packet, or is the rest of a refused one:
    /// nothing to lend yet.
    Pending,
    /// A packet longer than [`MAX_CHAIN`] frames was refused; its frames
    /// are back in the socket's free pool.
    Refused,
}

/// Where a [`Gatherer`] puts the frames it is done with and counts what
/// it gathered or refused: the receiving socket (a fake in tests).
pub(super) trait ChainSink {
    /// Takes frames of its UMEM back into its free pool; hands back the
    /// others.
    fn recycle(&mut self, frames: impl IntoIterator<Item = Frame>) -> Vec<Frame>;
    /// Counts `gathered` multi-buffer packets received and `refused` ones.
    fn count_received(&mut self, gathered: u64, refused: u64);
}

impl ChainSink for QueueSocket {
    fn recycle(&mut self, frames: impl IntoIterator<Item = Frame>) -> Vec<Frame> {
        QueueSocket::recycle(self, frames)
    }

    fn count_received(&mut self, gathered: u64, refused: u64) {
        self.count_multi(gathered, 0, refused);
    }
}

/// The frames of a packet received so far (one socket's rx side).
#[derive(Debug, Default)]
pub(super) struct Gatherer {
    chain: Vec<Frame>,
    /// The rest of a refused packet is still to come: its frames are
    /// recycled as they arrive, up to and with the one that ends it.
    discarding: bool,
}

impl Gatherer {
    /// Takes one received frame, in ring order.
    #[inline]
    pub(super) fn push(
        &mut self,
        frame: Frame,
        socket: &mut impl ChainSink,
        umem: &UmemView,
    ) -> Gathered {
        if !self.discarding && self.chain.is_empty() && !frame.continues() {
            return Gathered::Single(frame);
        }
        let ends = !frame.continues();
        if self.discarding {
            self.discarding = !ends;
            let strays = socket.recycle([frame]);
            debug_assert!(strays.is_empty());
            drop(strays);
            return Gathered::Pending;
        }
        self.chain.push(frame);
        if self.chain.len() > MAX_CHAIN {
            // Refused whole: the frames still to come of this packet are
            // recycled as they arrive, never lent as a packet of their own.
            self.discarding = !ends;
            let strays = socket.recycle(self.chain.drain(..));
            debug_assert!(strays.is_empty());
            drop(strays);
            socket.count_received(0, 1);
            return Gathered::Refused;
        }
        if !ends {
            return Gathered::Pending;
        }
        let total = self.chain.iter().map(Frame::len).sum();
        let mut bytes = Vec::with_capacity(total);
        for f in &self.chain {
            bytes.extend_from_slice(umem.data(f));
        }
        let mut frames = self.chain.drain(..);
        let Some(mut head) = frames.next() else {
            return Gathered::Pending;
        };
        let strays = socket.recycle(frames);
        debug_assert!(strays.is_empty());
        drop(strays);
        head.set_continues(false);
        socket.count_received(1, 0);
        Gathered::Multi(head, bytes.into_boxed_slice())
    }

    /// Gives the frames of an unfinished packet back to `socket` (the
    /// source is going away).
    pub(super) fn abandon(&mut self, socket: &mut impl ChainSink) -> Vec<Frame> {
        socket.recycle(self.chain.drain(..))
    }
}

/// Writes `bytes` across `head` and as many frames from `spare` as it
/// needs (then from `socket`'s free pool, when given and the spare pool is
/// empty), each frame but the last marked as continuing: the chain to
/// stage for transmission, in order. `None` when `bytes` needs more than
/// [`MAX_CHAIN`] frames or no frames are left: every frame (`head` too) is
/// then back in the spare pool.
///
/// A packet that fits one frame makes a chain of one (`head`, unmarked).
pub fn scatter(
    umem: &UmemView,
    spare: &SparePool,
    head: Frame,
    bytes: &[u8],
    mut socket: Option<&mut QueueSocket>,
) -> Option<Vec<Frame>> {
    let room = umem.frame_room().max(1);
    let parts = bytes.len().div_ceil(room).max(1);
    if parts > MAX_CHAIN {
        spare.put(head);
        return None;
    }
    let mut chain = Vec::with_capacity(parts);
    chain.push(head);
    while chain.len() < parts {
        if let Some(f) = spare.take() {
            chain.push(f);
            continue;
        }
        let want = parts - chain.len();
        let got = socket
            .as_deref_mut()
            .map_or(0, |s| s.alloc(want, &mut chain));
        if got < want {
            spare.put_all(chain);
            return None;
        }
    }
    let last = parts - 1;
    for (i, (frame, part)) in chain.iter_mut().zip(bytes.chunks(room)).enumerate() {
        umem.set_len(frame, usize::MAX);
        let written = umem.write(frame, part).unwrap_or(0);
        umem.set_len(frame, written);
        frame.set_continues(i < last);
    }
    if bytes.is_empty() {
        umem.set_len(&mut chain[0], 0);
    }
    Some(chain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::tests_support::test_umem;

    #[test]
    fn a_long_packet_is_scattered_and_marked() {
        let Some((umem, frames)) = test_umem(16) else {
            return;
        };
        let spare = SparePool::new(16, 0);
        let mut frames = frames.into_iter();
        let head = frames.next().unwrap();
        spare.put_all(frames);
        let bytes: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let chain = scatter(&umem, &spare, head, &bytes, None).expect("frames enough");
        let room = umem.frame_room();
        assert_eq!(chain.len(), 5000usize.div_ceil(room));
        let marks: Vec<bool> = chain.iter().map(Frame::continues).collect();
        assert!(marks[..marks.len() - 1].iter().all(|&c| c));
        assert!(!marks[marks.len() - 1]);
        let joined: Vec<u8> = chain.iter().flat_map(|f| umem.data(f).to_vec()).collect();
        assert_eq!(joined, bytes);
        // Back in the spare pool, a frame loses its mark.
        let before = spare.len();
        spare.put_all(chain);
        let again = std::iter::from_fn(|| spare.take()).collect::<Vec<_>>();
        assert_eq!(again.len(), before + 5000usize.div_ceil(room));
        assert!(again.iter().all(|f| !f.continues()));
    }

    #[test]
    fn a_packet_without_frames_enough_goes_back_whole() {
        let Some((umem, mut frames)) = test_umem(4) else {
            return;
        };
        let spare = SparePool::new(4, 0);
        let head = frames.pop().unwrap();
        spare.put(frames.pop().unwrap());
        let bytes = vec![1u8; umem.frame_room() * 3];
        assert!(scatter(&umem, &spare, head, &bytes, None).is_none());
        assert_eq!(spare.len(), 2, "the head and the one spare are back");
        // Too many frames for any chain: refused before taking any.
        let head = spare.take().unwrap();
        let huge = vec![0u8; umem.frame_room() * (MAX_CHAIN + 1)];
        assert!(scatter(&umem, &spare, head, &huge, None).is_none());
        assert_eq!(spare.len(), 2);
    }

    /// A socket that keeps what it is given back, and counts.
    #[derive(Default)]
    struct Sink {
        recycled: Vec<Frame>,
        gathered: u64,
        refused: u64,
    }

    impl ChainSink for Sink {
        fn recycle(&mut self, frames: impl IntoIterator<Item = Frame>) -> Vec<Frame> {
            self.recycled.extend(frames);
            Vec::new()
        }
        fn count_received(&mut self, gathered: u64, refused: u64) {
            self.gathered += gathered;
            self.refused += refused;
        }
    }

    /// `n` frames of one received packet: every one but the last marked as
    /// continuing.
    fn received_chain(frames: &mut Vec<Frame>, n: usize) -> Vec<Frame> {
        let mut chain: Vec<Frame> = frames.drain(..n).collect();
        for (i, f) in chain.iter_mut().enumerate() {
            f.set_continues(i + 1 < n);
        }
        chain
    }

    #[test]
    fn a_received_packet_longer_than_a_chain_is_refused_whole_and_the_next_one_is_not() {
        let Some((umem, mut frames)) = test_umem(64) else {
            return;
        };
        let mut sink = Sink::default();
        let mut g = Gatherer::default();
        // MAX_CHAIN frames: gathered.
        let ok = received_chain(&mut frames, MAX_CHAIN);
        let outcomes: Vec<Gathered> = ok
            .into_iter()
            .map(|f| g.push(f, &mut sink, &umem))
            .collect();
        assert!(outcomes[..MAX_CHAIN - 1]
            .iter()
            .all(|o| matches!(o, Gathered::Pending)));
        assert!(matches!(outcomes[MAX_CHAIN - 1], Gathered::Multi(..)));
        assert_eq!((sink.gathered, sink.refused), (1, 0));
        assert_eq!(sink.recycled.len(), MAX_CHAIN - 1, "the tail, back at once");
        // MAX_CHAIN + 3 frames: refused at the one past the limit, the
        // rest recycled as they come; nothing of it is lent.
        sink.recycled.clear();
        let long = received_chain(&mut frames, MAX_CHAIN + 3);
        let outcomes: Vec<Gathered> = long
            .into_iter()
            .map(|f| g.push(f, &mut sink, &umem))
            .collect();
        let refused = outcomes
            .iter()
            .filter(|o| matches!(o, Gathered::Refused))
            .count();
        assert_eq!(refused, 1);
        assert!(matches!(outcomes[MAX_CHAIN], Gathered::Refused));
        assert!(outcomes
            .iter()
            .all(|o| matches!(o, Gathered::Pending | Gathered::Refused)));
        assert_eq!((sink.gathered, sink.refused), (1, 1));
        assert_eq!(sink.recycled.len(), MAX_CHAIN + 3, "every frame of it");
        // The next packet, in one frame, is lent as it is.
        let next = received_chain(&mut frames, 1).pop().unwrap();
        assert!(matches!(
            g.push(next, &mut sink, &umem),
            Gathered::Single(_)
        ));
        // A packet cut off by the source going away goes back whole.
        let cut = received_chain(&mut frames, 4);
        for f in cut.into_iter().take(3) {
            assert!(matches!(g.push(f, &mut sink, &umem), Gathered::Pending));
        }
        sink.recycled.clear();
        assert_eq!(g.abandon(&mut sink).len(), 0);
        assert_eq!(sink.recycled.len(), 3);
    }

    #[test]
    fn a_short_packet_is_one_unmarked_frame() {
        let Some((umem, mut frames)) = test_umem(2) else {
            return;
        };
        let spare = SparePool::new(2, 0);
        let chain = scatter(&umem, &spare, frames.pop().unwrap(), b"hello", None).unwrap();
        assert_eq!(chain.len(), 1);
        assert!(!chain[0].continues());
        assert_eq!(umem.data(&chain[0]), b"hello");
    }
}
