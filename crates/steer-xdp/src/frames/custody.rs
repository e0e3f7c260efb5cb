//! The descriptor a lent frame travels as ([`RawFrame`]) and the two moves
//! of a loan: `lend` (a [`Frame`] becomes a descriptor, its frame LENT) and
//! `reclaim` (a descriptor becomes the `Frame` again, once per loan), plus
//! the read of a lent frame through its descriptor. The argument for why
//! this is sound is the parent module's ([`crate::frames`]).
//!
//! Invariants: a frame's custody state is LENT exactly while no `Frame`
//! exists for it and no ring or pool holds it; it becomes LENT only in
//! `lend`, which consumes the frame's `Frame`, and stops being LENT only in
//! `reclaim`, by the one compare-exchange that makes the new `Frame`.

use std::sync::atomic::Ordering;

use xsk_rs::FrameDesc;

use crate::umem::{Frame, RxMeta, UmemView};

/// Custody state of a frame that is not lent out (the initial state).
const HOME: u8 = 0;
/// Custody state of a frame lent out as a descriptor.
const LENT: u8 = 1;

/// A lent frame in transit: a `Copy` descriptor for queues that move
/// descriptors by value (steer's rings and dispatchers). Made by an
/// [`XskSource`](super::XskSource) for each frame it receives; taken back
/// into a [`Frame`] once, by [`UmemPool::adopt`](super::UmemPool::adopt) or
/// by the pool's and source's give-back paths. Copies are harmless: only
/// one of them is ever taken back. The default value refers to no frame of
/// any port.
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

/// Lends `frame`, of `umem`'s UMEM, out as a descriptor. A frame of
/// another UMEM is handed back (no custody state here to mark).
pub(super) fn lend(umem: &UmemView, frame: Frame) -> Result<RawFrame, Frame> {
    let state = match umem.custody_of(frame.addr()) {
        Some(state) if frame.umem_id() == umem.id() => state,
        _ => return Err(frame),
    };
    let (desc, umem_id) = frame.into_parts();
    // The frame's `Frame` is gone: from here on the descriptor is the loan.
    // Release: whoever reclaims it sees what was written to the frame.
    state.store(LENT, Ordering::Release);
    Ok(RawFrame {
        desc,
        umem_id,
        flow_hash: 0,
    })
}

/// Takes the frame `raw` names back, ending its loan: `None` when it is not
/// lent out (already taken back through another copy of `raw`, or `raw` is
/// stale, of another UMEM, or the default descriptor).
pub(super) fn reclaim(umem: &UmemView, raw: RawFrame) -> Option<Frame> {
    if raw.umem_id != umem.id() {
        return None;
    }
    let state = umem.custody_of(raw.desc.addr())?;
    state
        .compare_exchange(LENT, HOME, Ordering::AcqRel, Ordering::Relaxed)
        .ok()?;
    // SAFETY: the exchange above ended the frame's one loan, and only this
    // call won it: while it was LENT no `Frame` existed for the frame and no
    // ring or pool held it (module invariant), and the one `Frame` made here
    // is what makes it not lent. `raw.desc` names a frame of this UMEM (same
    // id, its custody state exists) and was made by `lend` from that frame's
    // `Frame`.
    Some(unsafe { Frame::reclaim(raw.desc, raw.umem_id) })
}

/// Whether the frame `raw` names is lent out now.
fn is_lent(umem: &UmemView, raw: &RawFrame) -> bool {
    raw.umem_id == umem.id()
        && umem
            .custody_of(raw.desc.addr())
            .is_some_and(|s| s.load(Ordering::Relaxed) == LENT)
}

/// The packet bytes of the lent frame `raw` names, read by its holder;
/// empty when it is not lent out (or of another UMEM).
pub(super) fn data<'a>(umem: &'a UmemView, raw: &RawFrame) -> &'a [u8] {
    if !is_lent(umem, raw) {
        return &[];
    }
    // SAFETY: the frame is lent out, so no `Frame` exists for it and the
    // kernel has it on no ring: nobody writes it. Its holder is the caller
    // (the runtime contract in `crate::frames`), so it is not reclaimed
    // while the slice lives.
    unsafe { umem.data_of(&raw.desc, raw.umem_id) }
}

/// The metadata in front of the lent frame `raw` names, as [`data`].
pub(super) fn meta(umem: &UmemView, raw: &RawFrame) -> Option<RxMeta> {
    if !is_lent(umem, raw) {
        return None;
    }
    // SAFETY: as in `data`.
    unsafe { umem.meta_of(&raw.desc, raw.umem_id) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::tests_support::test_umem;

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

    #[test]
    fn a_descriptor_is_adopted_once_whatever_its_copies() {
        let Some((umem, mut frames)) = test_umem(4) else {
            return;
        };
        let frame = frames.pop().unwrap();
        let addr = frame.addr();
        let raw = lend(&umem, frame).unwrap();
        let copy = raw;
        let back = reclaim(&umem, raw).expect("the loan is taken back");
        assert_eq!(back.addr(), addr);
        // The copy, and the original again, find the frame not lent.
        assert!(reclaim(&umem, copy).is_none());
        assert!(reclaim(&umem, raw).is_none());
        // Lent again: a descriptor of the earlier loan may win it, but then
        // the new one cannot; one Frame either way.
        let again = lend(&umem, back).unwrap();
        let stale = reclaim(&umem, copy).expect("a stale copy may take the loan");
        assert!(reclaim(&umem, again).is_none());
        assert_eq!(stale.addr(), addr);
    }

    #[test]
    fn descriptors_of_no_frame_are_refused() {
        let Some((umem, _frames)) = test_umem(2) else {
            return;
        };
        assert!(reclaim(&umem, RawFrame::default()).is_none());
        assert!(data(&umem, &RawFrame::default()).is_empty());
        // Another UMEM's frame is neither lent nor taken back here.
        let Some((other, mut theirs)) = test_umem(2) else {
            return;
        };
        let foreign = theirs.pop().unwrap();
        let foreign = lend(&umem, foreign).expect_err("not this UMEM's");
        let raw = lend(&other, foreign).unwrap();
        assert!(reclaim(&umem, raw).is_none());
        assert!(data(&umem, &raw).is_empty());
        assert!(reclaim(&other, raw).is_some());
    }

    #[test]
    fn a_lent_frame_reads_until_it_is_taken_back() {
        let Some((umem, mut frames)) = test_umem(2) else {
            return;
        };
        let mut frame = frames.pop().unwrap();
        assert_eq!(umem.write(&mut frame, b"hello"), Some(5));
        let raw = lend(&umem, frame).unwrap();
        assert_eq!(data(&umem, &raw), b"hello");
        assert_eq!(raw.len(), 5);
        let frame = reclaim(&umem, raw).unwrap();
        // Through the Frame it still reads; through the old descriptor not.
        assert_eq!(umem.data(&frame), b"hello");
        assert!(data(&umem, &raw).is_empty());
        assert_eq!(meta(&umem, &raw), None);
    }

    #[test]
    fn racing_adoptions_of_copies_make_one_frame() {
        let Some((umem, mut frames)) = test_umem(64) else {
            return;
        };
        let raws: Vec<RawFrame> = frames.drain(..).map(|f| lend(&umem, f).unwrap()).collect();
        let won: Vec<usize> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let (umem, raws) = (&umem, &raws);
                    s.spawn(move || {
                        raws.iter()
                            .filter_map(|&r| reclaim(umem, r))
                            .map(|f| f.addr())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        let mut won = won;
        won.sort_unstable();
        let mut lent: Vec<usize> = raws.iter().map(RawFrame::addr).collect();
        lent.sort_unstable();
        assert_eq!(won, lent, "every frame exactly once");
    }
}
