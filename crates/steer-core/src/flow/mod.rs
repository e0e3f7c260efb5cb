//! Flow keys and flow hashes.
//!
//! [`flow_key`] reads from a frame only what the key needs: the addresses,
//! the upper-layer protocol and, for a non-fragment of a protocol with
//! ports, the two port words. The common frame shapes take a fast path
//! (`fast`: fixed offsets, no full parse) that is tested to agree with the
//! full parser ([`flow_key_general`]) on every frame. **Fragments** (first or not) key on addresses
//! and protocol only (ports absent), so every fragment of a datagram lands on
//! one CPU, as the kernel's `skb_get_hash` does. Frames that are not IP have
//! no flow (`Ok(None)`).
//!
//! A [`FlowHasher`] turns a key into a **non-zero** `u32` (0 is reserved for
//! "no hash" in the tables): [`KeyedHasher`] (foldhash, random seed per
//! process) or [`ToeplitzHasher`] (a NIC's RSS hash with a configurable key).
//! Both have a symmetric mode where the two directions of a flow hash alike.
//! [`AnyHasher`] is either, chosen at run time (the engine's hasher setting).
//! [`FlowClassifier`] plugs a hasher into the dispatcher, as a [`Classifier`]
//! (the dispatcher's interface for finding a frame's [`FlowInfo`]).
//! [`promises::check`] checks what the parser and the flow key promise for
//! any input on one frame (for the fuzz target and the seed test).
//!
//! ```
//! use std::net::Ipv4Addr;
//! use steer_core::flow::{flow_key, FlowHasher, KeyedHasher, ToeplitzHasher};
//! use steer_core::packet::build::FrameBuilder;
//!
//! let frame = FrameBuilder::udp(
//!     Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 0, 2).into(), 5000, 53).build();
//! let key = flow_key(&frame).unwrap().unwrap();
//! assert_eq!((key.src_port(), key.dst_port()), (5000, 53));
//! let h = KeyedHasher::with_seed(7).hash(&key);
//! assert_ne!(h, 0);
//! assert_ne!(ToeplitzHasher::default().hash(&key), 0);
//! ```
#![forbid(unsafe_code)]

mod any;
mod classify;
mod fast;
mod keyed;
pub mod promises;
mod text;
mod toeplitz;

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::packet::{self, ipv4, ipv6, IpVersion, ParseError};

pub use any::AnyHasher;
pub use classify::{Classifier, FlowClassifier, FlowInfo, Malformed};
pub use keyed::KeyedHasher;
pub use text::FlowKeyParseError;
pub use toeplitz::{KeyError, ToeplitzHasher, MS_RSS_KEY, SYMMETRIC_RSS_KEY};

/// The addresses of a flow.
///
/// `repr(u64)` puts the addresses at 8-byte-aligned offsets after the tag
/// (by default they follow a one-byte tag): a key built from registers in
/// the fast path of [`flow_key`] then stays in registers through a hasher
/// instead of being spilled and re-read byte-shifted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u64)]
pub enum FlowAddrs {
    /// IPv4 source and destination.
    V4 {
        /// Source.
        src: Ipv4Addr,
        /// Destination.
        dst: Ipv4Addr,
    },
    /// IPv6 source and destination.
    V6 {
        /// Source.
        src: Ipv6Addr,
        /// Destination.
        dst: Ipv6Addr,
    },
}

/// Transport ports of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ports {
    /// Source port.
    pub src: u16,
    /// Destination port.
    pub dst: u16,
}

/// What identifies a flow: addresses, protocol and (when the packet has
/// them and is not a fragment) ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Source and destination addresses.
    pub addrs: FlowAddrs,
    /// Upper-layer protocol.
    pub protocol: u8,
    /// Ports; `None` for fragments and protocols without ports.
    pub ports: Option<Ports>,
}

impl FlowKey {
    /// Source port (0 when there are none).
    #[inline]
    pub fn src_port(&self) -> u16 {
        self.ports.map_or(0, |p| p.src)
    }

    /// Destination port (0 when there are none).
    #[inline]
    pub fn dst_port(&self) -> u16 {
        self.ports.map_or(0, |p| p.dst)
    }

    /// The key of the other direction (addresses and ports swapped).
    #[inline]
    pub fn reversed(&self) -> Self {
        Self {
            addrs: match self.addrs {
                FlowAddrs::V4 { src, dst } => FlowAddrs::V4 { src: dst, dst: src },
                FlowAddrs::V6 { src, dst } => FlowAddrs::V6 { src: dst, dst: src },
            },
            protocol: self.protocol,
            ports: self.ports.map(|p| Ports {
                src: p.dst,
                dst: p.src,
            }),
        }
    }

    /// The direction-independent form: the (address, port) endpoint that
    /// orders lower becomes the source. `k.canonical() ==
    /// k.reversed().canonical()`.
    #[inline]
    pub fn canonical(&self) -> Self {
        let (sp, dp) = (self.src_port(), self.dst_port());
        // Addresses compare as big-endian integers: the same order as
        // their `Ord`, in one comparison instead of a segment-wise one.
        let swap = match self.addrs {
            FlowAddrs::V4 { src, dst } => (src.to_bits(), sp) > (dst.to_bits(), dp),
            FlowAddrs::V6 { src, dst } => (src.to_bits(), sp) > (dst.to_bits(), dp),
        };
        if swap {
            self.reversed()
        } else {
            *self
        }
    }
}

/// Maps a raw hash to the non-zero hash space (0 becomes 1).
#[inline(always)]
pub const fn nonzero(h: u32) -> u32 {
    if h == 0 {
        1
    } else {
        h
    }
}

/// A flow hash function. Implementations return a non-zero value.
#[doc(alias = "skb_get_hash")]
pub trait FlowHasher {
    /// The hash of `key`, never 0.
    fn hash(&self, key: &FlowKey) -> u32;
}

/// The flow key of an Ethernet frame; `Ok(None)` when it is not IP.
///
/// Common shapes (untagged or single-tagged Ethernet, then UDP or TCP over
/// IPv4 without options and not fragmented, or over IPv6 without extension
/// headers) take a fast path that reads fixed offsets after one length
/// check per layer; every other frame goes through [`flow_key_general`].
/// Both give the same result for every frame, errors included.
///
/// ```
/// use std::net::Ipv6Addr;
/// use steer_core::flow::flow_key;
/// use steer_core::packet::build::FrameBuilder;
/// let (a, b) = ("2001:db8::1".parse::<Ipv6Addr>().unwrap(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
/// let first = FrameBuilder::udp(a.into(), b.into(), 1, 2).fragment(0, true).build();
/// let later = FrameBuilder::udp(a.into(), b.into(), 1, 2).fragment(185, false).build();
/// let k = flow_key(&first).unwrap().unwrap();
/// assert_eq!(k.ports, None);
/// assert_eq!(flow_key(&later).unwrap(), Some(k));
/// ```
#[inline(always)]
#[doc(alias = "skb_flow_dissect")]
pub fn flow_key(frame: &[u8]) -> Result<Option<FlowKey>, ParseError> {
    // One return per untagged shape: inlined into a caller that hashes the
    // key, each return's key is known to be IPv4 or IPv6, and the hash can
    // branch on it at compile time.
    if let Some(raw) = fast::untagged_v4(frame) {
        return Ok(Some(raw.key()));
    }
    if let Some(raw) = fast::untagged_v6(frame) {
        return Ok(Some(raw.key()));
    }
    match general_raw(frame)? {
        Some(raw) => Ok(Some(raw.key())),
        None => Ok(None),
    }
}

/// The key of the frames that are not untagged IPv4 or IPv6 of the fast
/// path's shapes, out of line (the cold path of [`flow_key`]): one VLAN tag
/// then a fast-path shape, else [`flow_key_general`]. Its own return slot
/// keeps the caller's key in registers: when the general path wrote the
/// caller's `Result<Option<FlowKey>>` directly, the fast path's key went
/// through that memory too (and its ports through a store-forwarding
/// stall).
#[inline(never)]
fn general_raw(frame: &[u8]) -> Result<Option<fast::RawKey>, ParseError> {
    if let Some(raw) = fast::tagged(frame) {
        return Ok(Some(raw));
    }
    Ok(flow_key_general(frame)?.map(|k| fast::RawKey::new(&k)))
}

/// [`flow_key`] through the full parser ([`packet::parse`]) for every
/// frame: VLAN tags, IPv4 options, the IPv6 extension chain, fragments,
/// protocols without ports, and the typed error for malformed input. It is
/// the reference the fast path of [`flow_key`] is tested against.
///
/// ```
/// use std::net::Ipv4Addr;
/// use steer_core::flow::{flow_key, flow_key_general};
/// use steer_core::packet::build::FrameBuilder;
/// let f = FrameBuilder::udp(Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 0, 2).into(), 1, 2).build();
/// assert_eq!(flow_key_general(&f), flow_key(&f));
/// assert!(flow_key_general(&f[..30]).is_err());
/// ```
#[inline]
pub fn flow_key_general(frame: &[u8]) -> Result<Option<FlowKey>, ParseError> {
    let Some(l) = packet::parse(frame)? else {
        return Ok(None);
    };
    let ports = if l.fragment.is_none() && packet::ip_proto::has_ports(l.protocol) {
        // One 32-bit load for both ports (going through `Layers::ports`'
        // tuple made the compiler split and re-read it: a store-forwarding
        // stall on the hot path).
        let w = frame
            .get(..l.l3_end)
            .and_then(|ip| ip.get(l.l4_offset..l.l4_offset + 4))
            .ok_or(ParseError::Truncated(packet::Layer::Ports))?;
        let w = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
        Some(Ports {
            src: (w >> 16) as u16,
            dst: w as u16,
        })
    } else {
        None
    };
    // In bounds: parse checked the IP header at l3_offset.
    let ip = &frame[l.l3_offset..];
    let addrs = match l.ip {
        IpVersion::V4 => FlowAddrs::V4 {
            src: v4(&ip[ipv4::field::SRC]),
            dst: v4(&ip[ipv4::field::DST]),
        },
        IpVersion::V6 => FlowAddrs::V6 {
            src: v6(&ip[ipv6::field::SRC]),
            dst: v6(&ip[ipv6::field::DST]),
        },
    };
    Ok(Some(FlowKey {
        addrs,
        protocol: l.protocol,
        ports,
    }))
}

#[inline(always)]
fn v4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

#[inline(always)]
fn v6(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    Ipv6Addr::from(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::build::FrameBuilder;
    use crate::packet::ethernet::ethertype;
    use crate::packet::ip_proto;
    use std::net::IpAddr;

    fn a4(x: u8) -> IpAddr {
        Ipv4Addr::new(10, 0, 0, x).into()
    }

    #[test]
    fn udp_v4_key() {
        let f = FrameBuilder::udp(a4(1), a4(2), 1000, 2000).build();
        let k = flow_key(&f).unwrap().unwrap();
        assert_eq!(
            k,
            FlowKey {
                addrs: FlowAddrs::V4 {
                    src: Ipv4Addr::new(10, 0, 0, 1),
                    dst: Ipv4Addr::new(10, 0, 0, 2)
                },
                protocol: ip_proto::UDP,
                ports: Some(Ports {
                    src: 1000,
                    dst: 2000
                }),
            }
        );
    }

    #[test]
    fn icmp_has_no_ports() {
        let f = FrameBuilder::proto(a4(1), a4(2), ip_proto::ICMP)
            .payload(&[8, 0, 0, 0])
            .build();
        let k = flow_key(&f).unwrap().unwrap();
        assert_eq!((k.protocol, k.ports), (ip_proto::ICMP, None));
    }

    #[test]
    fn v4_fragments_share_a_key() {
        let first = FrameBuilder::udp(a4(1), a4(2), 7, 9)
            .payload(&[0; 16])
            .fragment(0, true)
            .build();
        let later = FrameBuilder::udp(a4(1), a4(2), 7, 9)
            .payload(&[0; 16])
            .fragment(3, false)
            .build();
        let k1 = flow_key(&first).unwrap().unwrap();
        let k2 = flow_key(&later).unwrap().unwrap();
        assert_eq!(k1, k2);
        assert_eq!((k1.protocol, k1.ports), (ip_proto::UDP, None));
        let whole = flow_key(&FrameBuilder::udp(a4(1), a4(2), 7, 9).build())
            .unwrap()
            .unwrap();
        assert_ne!(whole, k1);
    }

    #[test]
    fn non_ip_is_no_flow() {
        let mut f = FrameBuilder::udp(a4(1), a4(2), 1, 2).build();
        f[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        assert_eq!(flow_key(&f), Ok(None));
    }

    #[test]
    fn truncated_ports_is_an_error() {
        // An IPv4 header claiming UDP with 2 bytes of payload.
        let mut f = FrameBuilder::proto(a4(1), a4(2), ip_proto::ICMP)
            .payload(&[0, 1])
            .build();
        f[14 + 9] = ip_proto::UDP;
        assert_eq!(
            flow_key(&f),
            Err(ParseError::Truncated(packet::Layer::Ports))
        );
        f.truncate(20);
        assert!(flow_key(&f).is_err());
    }

    #[test]
    fn canonical_is_direction_free() {
        let f = FrameBuilder::tcp(a4(9), a4(1), 80, 5000).build();
        let k = flow_key(&f).unwrap().unwrap();
        assert_eq!(k.canonical(), k.reversed().canonical());
        assert_eq!(k.reversed().reversed(), k);
        // The lower endpoint is the source.
        assert_eq!(k.canonical().src_port(), 5000);
    }

    #[test]
    fn canonical_orders_like_the_address_ord() {
        let addrs = [
            0u128,
            1,
            0xff,
            1 << 64,
            (1 << 64) | 1,
            u128::MAX - 1,
            u128::MAX,
        ];
        for &a in &addrs {
            for &b in &addrs {
                for (sp, dp) in [(1, 2), (2, 1), (5, 5)] {
                    let (s6, d6) = (Ipv6Addr::from_bits(a), Ipv6Addr::from_bits(b));
                    let k = FlowKey {
                        addrs: FlowAddrs::V6 { src: s6, dst: d6 },
                        protocol: ip_proto::TCP,
                        ports: Some(Ports { src: sp, dst: dp }),
                    };
                    let swap = (s6, sp) > (d6, dp);
                    assert_eq!(k.canonical(), if swap { k.reversed() } else { k });
                    let (s4, d4) = (Ipv4Addr::from_bits(a as u32), Ipv4Addr::from_bits(b as u32));
                    let k = FlowKey {
                        addrs: FlowAddrs::V4 { src: s4, dst: d4 },
                        ..k
                    };
                    let swap = (s4, sp) > (d4, dp);
                    assert_eq!(k.canonical(), if swap { k.reversed() } else { k });
                }
            }
        }
    }

    #[test]
    fn nonzero_maps_only_zero() {
        assert_eq!(nonzero(0), 1);
        assert_eq!(nonzero(1), 1);
        assert_eq!(nonzero(u32::MAX), u32::MAX);
    }
}
