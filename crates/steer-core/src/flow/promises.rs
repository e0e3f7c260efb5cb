//! What the frame parser and the flow key promise for every input, checked
//! on one frame, so that the fuzz target and the stable seed test check the
//! same promises: the layer offsets are ordered and inside the frame, a
//! payload range lies inside it, reading the ports does not panic, the fast
//! flow key equals the general one (errors included), and the symmetric
//! keyed hash hashes both directions of a key alike.
//!
//! Owns no state. [`check`] never panics on any input: a broken promise is
//! an error naming it, for the caller to assert on.

use std::fmt;

use super::{flow_key, flow_key_general, FlowHasher, KeyedHasher};
use crate::packet::parse;

/// A promise a frame broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokenPromise {
    /// The layer offsets are out of order or beyond the frame.
    LayerOffsets,
    /// The payload range lies outside the frame.
    PayloadRange,
    /// [`flow_key`] and [`flow_key_general`] disagree.
    FastPath,
    /// The symmetric keyed hash differs between the two directions.
    SymmetricHash,
}

impl fmt::Display for BrokenPromise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::LayerOffsets => "layer offsets out of order or beyond the frame",
            Self::PayloadRange => "payload range outside the frame",
            Self::FastPath => "the fast flow key differs from the general one",
            Self::SymmetricHash => "the symmetric hash differs between directions",
        })
    }
}

impl std::error::Error for BrokenPromise {}

/// Checks every promise (module docs) on `frame`.
///
/// ```
/// use std::net::Ipv4Addr;
/// use steer_core::flow::promises;
/// use steer_core::packet::build::FrameBuilder;
///
/// let frame = FrameBuilder::udp(
///     Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 0, 2).into(), 5000, 53).build();
/// for cut in 0..=frame.len() {
///     assert_eq!(promises::check(&frame[..cut]), Ok(()));
/// }
/// ```
pub fn check(frame: &[u8]) -> Result<(), BrokenPromise> {
    if let Ok(Some(l)) = parse(frame) {
        if !(l.l3_offset <= l.l4_offset && l.l4_offset <= l.l3_end && l.l3_end <= frame.len()) {
            return Err(BrokenPromise::LayerOffsets);
        }
        if let Ok(r) = l.payload_range(frame) {
            if r.start > r.end || r.end > frame.len() {
                return Err(BrokenPromise::PayloadRange);
            }
        }
        let _ = l.ports(frame);
    }
    let key = flow_key(frame);
    if key != flow_key_general(frame) {
        return Err(BrokenPromise::FastPath);
    }
    if let Ok(Some(k)) = key {
        let keyed = KeyedHasher::with_seed(1).symmetric(true);
        if keyed.hash(&k) != keyed.hash(&k.reversed()) {
            return Err(BrokenPromise::SymmetricHash);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_keeps_the_promises() {
        for frame in [&[][..], &[0xff; 13], &[0x45; 64], &[0; 1500]] {
            assert_eq!(check(frame), Ok(()));
        }
        assert!(BrokenPromise::FastPath.to_string().contains("fast"));
    }
}
