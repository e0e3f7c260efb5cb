//! The dispatcher's classifier: a frame in, its flow hash and destination
//! port out.
//!
//! [`Classifier`] is the interface the dispatcher calls, with its answer
//! ([`FlowInfo`], or [`Malformed`]); any finder of flows can implement it
//! (the tests and benches use trivial ones).
//!
//! [`FlowClassifier`] is [`flow_key`](super::flow_key) then a [`FlowHasher`], with the NIC's
//! receive hash used instead of hashing when asked. It gives the same result
//! as `flow_key` followed by the hasher for every frame, errors included;
//! the common shapes hash the fast path's key (`fast`) straight from
//! registers, one hashing tail per shape, and the rest go through the full
//! parser out of line (`classify_rest`, packed into one register as a
//! `GeneralOutcome`).

use super::{fast, flow_key_general, nonzero, FlowHasher};
use crate::packet::ethernet::ethertype;

/// A frame's flow, as the dispatcher needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowInfo {
    /// The flow hash (non-zero).
    pub hash: u32,
    /// The destination port (0 when the protocol has none, or a fragment).
    pub dst_port: u16,
}

/// The frame could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Finds a frame's flow: parse and hash (or use the NIC's receive hash).
pub trait Classifier {
    /// `Ok(Some(..))` for a frame with a flow, `Ok(None)` for one without
    /// (non-IP), `Err(Malformed)` for one that does not parse.
    fn classify(
        &mut self,
        frame: &[u8],
        rx_hash: Option<u32>,
    ) -> Result<Option<FlowInfo>, Malformed>;
}

/// The dispatcher's [`Classifier`]: [`flow_key`](super::flow_key) then a [`FlowHasher`]; a
/// non-zero NIC receive hash is used instead of hashing when present (the
/// key is still parsed for the destination port).
#[derive(Debug, Clone, Default)]
pub struct FlowClassifier<H> {
    hasher: H,
    use_rx_hash: bool,
}

impl<H: FlowHasher> FlowClassifier<H> {
    /// Hashes every frame with `hasher` (ignores the NIC's hash).
    pub fn new(hasher: H) -> Self {
        Self {
            hasher,
            use_rx_hash: false,
        }
    }

    /// Takes a non-zero NIC receive hash when the frame has one.
    #[must_use]
    pub fn use_rx_hash(mut self, yes: bool) -> Self {
        self.use_rx_hash = yes;
        self
    }

    /// The hasher.
    pub fn hasher(&self) -> &H {
        &self.hasher
    }
}

/// The [`FlowInfo`] of a fast-path key (`nic`: the NIC's hash, used
/// instead of hashing when present).
#[inline(always)]
fn fast_info<H: FlowHasher>(hasher: &H, raw: fast::RawKey, nic: Option<u32>) -> FlowInfo {
    FlowInfo {
        hash: nic.unwrap_or_else(|| hasher.hash(&raw.key())),
        dst_port: raw.dst_port(),
    }
}

impl<H: FlowHasher> Classifier for FlowClassifier<H> {
    /// The same result as [`flow_key`](super::flow_key) then the hasher, for every frame.
    /// Common shapes hash the fast path's key straight from registers, one
    /// hashing tail per shape; the rest go through the full parser out of
    /// line, so the paths meet only in the hash and the port (merging their
    /// keys instead cost about 30 instructions per packet).
    #[inline]
    fn classify(
        &mut self,
        frame: &[u8],
        rx_hash: Option<u32>,
    ) -> Result<Option<FlowInfo>, Malformed> {
        let nic = rx_hash.filter(|&h| self.use_rx_hash && h != 0);
        // One return per shape, so each hashes its own words (see `fast`).
        if let Some(raw) = fast::untagged_v4(frame) {
            return Ok(Some(fast_info(&self.hasher, raw, nic)));
        }
        if let Some(raw) = fast::untagged_v6(frame) {
            return Ok(Some(fast_info(&self.hasher, raw, nic)));
        }
        GeneralOutcome(classify_rest(&self.hasher, frame, nic)).unpack()
    }
}

/// [`classify_rest`]'s result in one register: the hash in the low 32
/// bits (0 for "no flow", as hashes are non-zero), the destination port in
/// the next 16, [`GeneralOutcome::MALFORMED`] for malformed frames. (The
/// `Result<Option<FlowInfo>>` itself is returned through memory, and the
/// fast path, merged with it, stored its own result there too.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GeneralOutcome(u64);

impl GeneralOutcome {
    const MALFORMED: u64 = 1 << 48;

    #[inline(always)]
    fn pack(r: Result<Option<FlowInfo>, Malformed>) -> u64 {
        match r {
            // `nonzero`: a hasher breaking its contract must not turn a flow
            // into "no flow".
            Ok(Some(i)) => u64::from(nonzero(i.hash)) | (u64::from(i.dst_port) << 32),
            Ok(None) => 0,
            Err(Malformed) => Self::MALFORMED,
        }
    }

    #[inline(always)]
    fn unpack(self) -> Result<Option<FlowInfo>, Malformed> {
        match self.0 {
            0 => Ok(None),
            Self::MALFORMED => Err(Malformed),
            x => Ok(Some(FlowInfo {
                hash: x as u32,
                dst_port: (x >> 32) as u16,
            })),
        }
    }
}

/// [`FlowClassifier::classify`] for the frames that are not untagged
/// IPv4 or IPv6 of the fast path's shapes, out of line (the cold path):
/// one VLAN tag then a fast-path shape, else the full parser. Packed as a
/// [`GeneralOutcome`].
#[inline(never)]
fn classify_rest<H: FlowHasher>(hasher: &H, frame: &[u8], nic: Option<u32>) -> u64 {
    // One return per IP version, as in `classify`.
    if let Some((l3, et)) = fast::after_one_tag(frame) {
        match et {
            ethertype::IPV4 => {
                if let Some(raw) = fast::ipv4_at(l3) {
                    return GeneralOutcome::pack(Ok(Some(fast_info(hasher, raw, nic))));
                }
            }
            ethertype::IPV6 => {
                if let Some(raw) = fast::ipv6_at(l3) {
                    return GeneralOutcome::pack(Ok(Some(fast_info(hasher, raw, nic))));
                }
            }
            _ => {}
        }
    }
    GeneralOutcome::pack(match flow_key_general(frame) {
        Err(_) => Err(Malformed),
        Ok(None) => Ok(None),
        Ok(Some(key)) => Ok(Some(FlowInfo {
            hash: nic.unwrap_or_else(|| hasher.hash(&key)),
            dst_port: key.dst_port(),
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::KeyedHasher;
    use crate::packet::build::FrameBuilder;
    use std::net::{IpAddr, Ipv4Addr};

    fn a4(x: u8) -> IpAddr {
        Ipv4Addr::new(10, 0, 0, x).into()
    }

    #[test]
    fn classifier_uses_rx_hash_only_when_asked() {
        let f = FrameBuilder::udp(a4(1), a4(2), 1, 53).build();
        let mut c = FlowClassifier::new(KeyedHasher::with_seed(1));
        let own = c.classify(&f, Some(77)).unwrap().unwrap();
        assert_ne!(own.hash, 77);
        assert_eq!(own.dst_port, 53);
        let mut c = c.use_rx_hash(true);
        assert_eq!(c.classify(&f, Some(77)).unwrap().unwrap().hash, 77);
        assert_eq!(c.classify(&f, Some(0)).unwrap().unwrap().hash, own.hash);
        assert_eq!(c.classify(&f[..20], None), Err(Malformed));
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        assert_eq!(c.classify(&arp, None), Ok(None));
    }

    #[test]
    fn general_outcome_round_trips() {
        let cases = [
            Ok(None),
            Err(Malformed),
            Ok(Some(FlowInfo {
                hash: 1,
                dst_port: 0,
            })),
            Ok(Some(FlowInfo {
                hash: u32::MAX,
                dst_port: u16::MAX,
            })),
            Ok(Some(FlowInfo {
                hash: 0x8000_0000,
                dst_port: 1,
            })),
        ];
        for r in cases {
            assert_eq!(GeneralOutcome(GeneralOutcome::pack(r)).unpack(), r);
        }
        // A hash 0 from a hasher breaking its contract stays a flow.
        let zero = Ok(Some(FlowInfo {
            hash: 0,
            dst_port: 53,
        }));
        assert_eq!(
            GeneralOutcome(GeneralOutcome::pack(zero)).unpack(),
            Ok(Some(FlowInfo {
                hash: 1,
                dst_port: 53
            }))
        );
    }
}
