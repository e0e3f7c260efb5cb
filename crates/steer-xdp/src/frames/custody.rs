//! The descriptor a lent frame travels as ([`RawFrame`]) and the two moves
//! of a loan: `lend` (a [`Frame`] becomes a descriptor, its frame LENT) and
//! `reclaim` (a descriptor becomes the `Frame` again, once per loan), plus
//! the read of a lent frame through its descriptor. The argument for why
//! this is sound is the parent module's ([`crate::frames`]).
//!
//! Invariants: a frame's custody state is LENT (or GATHERED) exactly while
//! no `Frame` exists for it and no ring or pool holds it; it becomes lent
//! only in `lend` or `lend_gathered`, which consume the frame's `Frame`,
//! and stops being lent only in `reclaim_packet`, by the one
//! compare-exchange that makes the new `Frame`. A frame's gather slot holds
//! a copy exactly while its state is GATHERED: written by `lend_gathered`
//! before its release store, read by the loan's holder, taken by the
//! winner of the exchange.

use std::sync::atomic::Ordering;

use xsk_rs::FrameDesc;

use crate::umem::{Frame, RxMeta, UmemView};

/// Custody state of a frame that is not lent out (the initial state).
const HOME: u8 = 0;
/// Custody state of a frame lent out as a descriptor.
const LENT: u8 = 1;
/// Custody state of the first frame of a multi-buffer packet lent out as a
/// descriptor, with the packet's contiguous copy in the frame's gather slot.
const GATHERED: u8 = 2;

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

    crate::umem::packet_extent!();
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

/// Lends `frame`, of `umem`'s UMEM, out as the descriptor of a packet
/// whose bytes are `bytes` (a multi-buffer packet gathered into one copy;
/// `frame` is its first frame). A frame of another UMEM is handed back.
pub(super) fn lend_gathered(
    umem: &UmemView,
    frame: Frame,
    bytes: Box<[u8]>,
) -> Result<RawFrame, Frame> {
    let (state, slot) = match (
        umem.custody_of(frame.addr()),
        umem.gather_slot_of(frame.addr()),
    ) {
        (Some(state), Some(slot)) if frame.umem_id() == umem.id() => (state, slot),
        _ => return Err(frame),
    };
    // SAFETY: the caller owns the frame's `Frame`, so the frame is not lent
    // out: nobody reads or takes its gather slot (only a holder of a loan
    // or the winner of a loan's end does, and there is no loan). The
    // release store below publishes the write to whoever reads it next.
    unsafe { *slot.get() = Some(bytes) };
    let (desc, umem_id) = frame.into_parts();
    state.store(GATHERED, Ordering::Release);
    Ok(RawFrame {
        desc,
        umem_id,
        flow_hash: 0,
    })
}

/// Takes the frame `raw` names back, ending its loan: `None` when it is not
/// lent out (already taken back through another copy of `raw`, or `raw` is
/// stale, of another UMEM, or the default descriptor). A multi-buffer
/// packet's contiguous copy is dropped: see [`reclaim_packet`].
pub(super) fn reclaim(umem: &UmemView, raw: RawFrame) -> Option<Frame> {
    reclaim_packet(umem, raw).map(|(frame, _)| frame)
}

/// As [`reclaim`], with the contiguous copy of a multi-buffer packet lent
/// with [`lend_gathered`] (`None` for a packet in one frame).
pub(super) fn reclaim_packet(umem: &UmemView, raw: RawFrame) -> Option<(Frame, Option<Box<[u8]>>)> {
    if raw.umem_id != umem.id() {
        return None;
    }
    let state = umem.custody_of(raw.desc.addr())?;
    let gathered = match state.compare_exchange(LENT, HOME, Ordering::AcqRel, Ordering::Relaxed) {
        Ok(_) => None,
        Err(GATHERED) => {
            state
                .compare_exchange(GATHERED, HOME, Ordering::AcqRel, Ordering::Relaxed)
                .ok()?;
            let slot = umem.gather_slot_of(raw.desc.addr())?;
            // SAFETY: this call just ended the frame's one gathered loan (the
            // exchange above, which only one caller wins), so nobody else
            // reads or writes the slot: the holder has handed the descriptor
            // over (the runtime contract in `crate::frames`) and the next
            // writer needs the `Frame` returned here. Acquire: the lender's
            // write is seen.
            unsafe { (*slot.get()).take() }
        }
        Err(_) => return None,
    };
    // SAFETY: the exchange above ended the frame's one loan, and only this
    // call won it: while it was lent no `Frame` existed for the frame and no
    // ring or pool held it (module invariant), and the one `Frame` made here
    // is what makes it not lent. `raw.desc` names a frame of this UMEM (same
    // id, its custody state exists) and was made by `lend` or
    // `lend_gathered` from that frame's `Frame`.
    Some((unsafe { Frame::reclaim(raw.desc, raw.umem_id) }, gathered))
}

/// The custody state of the frame `raw` names when it is lent out now
/// (LENT or GATHERED), `None` otherwise.
fn lent_state(umem: &UmemView, raw: &RawFrame) -> Option<u8> {
    if raw.umem_id != umem.id() {
        return None;
    }
    let state = umem.custody_of(raw.desc.addr())?.load(Ordering::Relaxed);
    (state == LENT || state == GATHERED).then_some(state)
}

/// The packet bytes of the lent frame `raw` names, read by its holder;
/// empty when it is not lent out (or of another UMEM). A multi-buffer
/// packet reads as its contiguous copy, whole.
pub(super) fn data<'a>(umem: &'a UmemView, raw: &RawFrame) -> &'a [u8] {
    match lent_state(umem, raw) {
        // SAFETY: the frame is lent out, so no `Frame` exists for it and the
        // kernel has it on no ring: nobody writes it. Its holder is the
        // caller (the runtime contract in `crate::frames`), so it is not
        // reclaimed while the slice lives.
        Some(LENT) => unsafe { umem.data_of(&raw.desc, raw.umem_id) },
        Some(_) => match umem.gather_slot_of(raw.desc.addr()) {
            // SAFETY: the frame is lent out gathered: its slot was written
            // before the loan began and is taken only by whoever ends the
            // loan, which the caller, its holder, does not do while the
            // slice lives (the runtime contract in `crate::frames`). The
            // relaxed load that saw GATHERED is ordered after the lender's
            // release store by the handoff that gave the caller the loan.
            Some(slot) => unsafe { (*slot.get()).as_deref() }.unwrap_or(&[]),
            None => &[],
        },
        None => &[],
    }
}

/// The metadata in front of the lent frame `raw` names, as [`data`].
pub(super) fn meta(umem: &UmemView, raw: &RawFrame) -> Option<RxMeta> {
    lent_state(umem, raw)?;
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
    fn a_gathered_packet_reads_whole_and_is_taken_back_once() {
        let Some((umem, mut frames)) = test_umem(2) else {
            return;
        };
        let mut frame = frames.pop().unwrap();
        assert_eq!(umem.write(&mut frame, b"head"), Some(4));
        let whole: Box<[u8]> = vec![9u8; 8000].into_boxed_slice();
        let raw = lend_gathered(&umem, frame, whole).unwrap();
        assert_eq!(
            data(&umem, &raw).len(),
            8000,
            "the holder reads the whole packet"
        );
        let copy = raw;
        let (frame, gathered) = reclaim_packet(&umem, raw).expect("the loan ends once");
        assert_eq!(gathered.as_deref().map(<[u8]>::len), Some(8000));
        assert_eq!(umem.data(&frame), b"head");
        assert!(reclaim_packet(&umem, copy).is_none());
        assert!(data(&umem, &copy).is_empty());
        // Lent again as a single frame: no copy comes back with it.
        let raw = lend(&umem, frame).unwrap();
        assert_eq!(data(&umem, &raw), b"head");
        let (_, gathered) = reclaim_packet(&umem, raw).unwrap();
        assert!(gathered.is_none());
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
