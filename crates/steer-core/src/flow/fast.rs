//! The fast path of [`flow_key`](super::flow_key): the common frame shapes
//! read at fixed offsets after one length check per layer (Ethernet, IP).
//!
//! Handled here (everything else returns `None` and goes through the full
//! parser, [`super::flow_key_general`]):
//!
//! - Ethernet, untagged or with one VLAN tag (802.1Q or 802.1ad), then
//! - IPv4 without options (`0x45`), not a fragment, UDP or TCP, the total
//!   length within the frame and covering the port words; or
//! - IPv6 whose first next header is UDP or TCP (no extension header), the
//!   payload length within the frame and covering the port words.
//!
//! One function per shape: [`untagged_v4`], [`untagged_v6`], then
//! [`tagged`]. `flow_key` and `FlowClassifier::classify` call them in this
//! order, the untagged ones inline and the tagged one out of line (with the
//! full parser), so that each shape is hashed on its own (see the comment
//! above [`untagged_v4`]).
//!
//! **Invariant:** the shapes are disjoint, and when one of them returns
//! `Some(k)`, the general path returns `Ok(Some(k.key()))` for the same
//! frame (the conditions above are exactly the general path's checks for
//! these shapes; the tests in this module compare the two over crafted,
//! random and truncated frames). When all return `None` nothing is
//! concluded: the general path decides, errors included.
//!
//! The frame's prefix is borrowed as a fixed-size array (`first_chunk`), so
//! the reads at constant offsets need no bounds checks. The module also owns
//! [`RawKey`], the integer form both paths meet in.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{FlowAddrs, FlowKey, Ports};
use crate::packet::ethernet::{self, ethertype, HEADER_LEN as ETH_LEN, VLAN_TAG_LEN};
use crate::packet::ip_proto;
use crate::packet::ipv4::{self, MIN_HEADER_LEN as IPV4_LEN};
use crate::packet::ipv6::{self, HEADER_LEN as IPV6_LEN};

/// Length of the port words the key reads.
const PORTS_LEN: usize = 4;
/// Ethernet header and room for one VLAN tag.
const ETH_TAG_LEN: usize = ETH_LEN + VLAN_TAG_LEN;
/// IPv4 header without options + the port words.
const V4_LEN: usize = IPV4_LEN + PORTS_LEN;
/// Fixed IPv6 header + the port words.
const V6_LEN: usize = IPV6_LEN + PORTS_LEN;

/// IPv4 flags and offset bits that make a datagram a fragment (MF and the
/// 13-bit offset; DF does not).
const V4_FRAGMENT_BITS: u16 = 0x3fff;

/// A flow key as plain integers in **wire order** (each word is the
/// little-endian reading of the header bytes it comes from, as one load
/// gives them): the form the fast and the general path of
/// [`flow_key`](super::flow_key) meet in, and the words
/// [`KeyedHasher`](super::KeyedHasher) hashes, so that converting to a
/// [`FlowKey`] and hashing it folds back to the loads. (Merging two
/// [`FlowKey`]s, whose IPv4 and IPv6 addresses overlap in memory, made the
/// compiler store the fast path's key to the stack and read it back; so
/// did an enum of the two address kinds: the fields are kept apart.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawKey {
    v6: bool,
    /// IPv4: the source then the destination address (8 header bytes);
    /// 0 for IPv6.
    v4_addrs: u64,
    /// IPv6: the source and destination addresses; 0 for IPv4.
    v6_src: u128,
    v6_dst: u128,
    protocol: u8,
    /// Ports present.
    has_ports: bool,
    /// The 4 bytes of the source and destination ports (0 without ports).
    ports: u32,
}

impl RawKey {
    /// The integers of `k`.
    #[inline(always)]
    pub(super) fn new(k: &FlowKey) -> Self {
        let (v6, v4_addrs, v6_src, v6_dst) = match k.addrs {
            FlowAddrs::V4 { src, dst } => (
                false,
                u64::from(src.to_bits().swap_bytes())
                    | (u64::from(dst.to_bits().swap_bytes()) << 32),
                0,
                0,
            ),
            FlowAddrs::V6 { src, dst } => (
                true,
                0,
                src.to_bits().swap_bytes(),
                dst.to_bits().swap_bytes(),
            ),
        };
        let (sp, dp) = (k.src_port().to_be_bytes(), k.dst_port().to_be_bytes());
        Self {
            v6,
            v4_addrs,
            v6_src,
            v6_dst,
            protocol: k.protocol,
            has_ports: k.ports.is_some(),
            ports: u32::from_le_bytes([sp[0], sp[1], dp[0], dp[1]]),
        }
    }

    /// The destination port (0 without ports).
    #[inline(always)]
    pub(super) fn dst_port(&self) -> u16 {
        ((self.ports >> 16) as u16).swap_bytes()
    }

    /// The key.
    #[inline(always)]
    pub(super) fn key(self) -> FlowKey {
        // A little-endian word's `swap_bytes` is the big-endian reading of
        // the same bytes.
        let addrs = if self.v6 {
            FlowAddrs::V6 {
                src: Ipv6Addr::from_bits(self.v6_src.swap_bytes()),
                dst: Ipv6Addr::from_bits(self.v6_dst.swap_bytes()),
            }
        } else {
            FlowAddrs::V4 {
                src: Ipv4Addr::from_bits((self.v4_addrs as u32).swap_bytes()),
                dst: Ipv4Addr::from_bits(((self.v4_addrs >> 32) as u32).swap_bytes()),
            }
        };
        let ports = self.ports.swap_bytes();
        FlowKey {
            addrs,
            protocol: self.protocol,
            ports: self.has_ports.then_some(Ports {
                src: (ports >> 16) as u16,
                dst: ports as u16,
            }),
        }
    }
}

/// The flow key of a frame of one of the common shapes (see the module
/// doc), or `None` to defer to the full parser: [`untagged_v4`], then
/// [`untagged_v6`], then [`tagged`], the order `flow_key` and
/// `FlowClassifier::classify` try them in. The tests check it against the
/// full parser.
#[cfg(test)]
pub(super) fn key(frame: &[u8]) -> Option<RawKey> {
    untagged_v4(frame)
        .or_else(|| untagged_v6(frame))
        .or_else(|| tagged(frame))
}

// The shapes have one function each, untagged IPv4 first, so that a caller
// hashing the key (`FlowClassifier::classify`) gets one hashing tail per IP
// version: one shared key made the compiler carry both kinds of words, and
// field pointers, through a merged tail; and one EtherType dispatch became
// a switch that tried the two VLAN TPIDs before IPv4. NICs usually strip
// the tag before AF_XDP sees a frame, and steer's XDP program passes tagged
// frames to the kernel, so the tagged shapes are the cold ones.

/// The key of an untagged IPv4 frame of the fast path's shape: one length
/// check (the frame covers the Ethernet header, the IPv4 header and the
/// ports).
#[inline(always)]
pub(super) fn untagged_v4(frame: &[u8]) -> Option<RawKey> {
    let f: &[u8; ETH_LEN + V4_LEN] = frame.first_chunk()?;
    if be16(f, ethernet::field::ETHERTYPE) != ethertype::IPV4 {
        return None;
    }
    v4(f.last_chunk()?, frame.len() - ETH_LEN)
}

/// The key of an untagged IPv6 frame of the fast path's shape.
#[inline(always)]
pub(super) fn untagged_v6(frame: &[u8]) -> Option<RawKey> {
    let f: &[u8; ETH_LEN + V6_LEN] = frame.first_chunk()?;
    if be16(f, ethernet::field::ETHERTYPE) != ethertype::IPV6 {
        return None;
    }
    v6(f.last_chunk()?, frame.len() - ETH_LEN)
}

/// The key of a frame with one VLAN tag then IPv4 or IPv6 of the fast
/// path's shape (a second tag, QinQ, is no IP EtherType here).
#[inline(always)]
pub(super) fn tagged(frame: &[u8]) -> Option<RawKey> {
    let (l3, et) = after_one_tag(frame)?;
    match et {
        ethertype::IPV4 => ipv4_at(l3),
        ethertype::IPV6 => ipv6_at(l3),
        _ => None,
    }
}

/// What follows one VLAN tag: the bytes after it and the EtherType the tag
/// names; `None` when the frame is not tagged.
#[inline(always)]
pub(super) fn after_one_tag(frame: &[u8]) -> Option<(&[u8], u16)> {
    let eth: &[u8; ETH_TAG_LEN] = frame.first_chunk()?;
    if !ethertype::is_vlan(be16(eth, ethernet::field::ETHERTYPE)) {
        return None;
    }
    Some((frame.get(ETH_TAG_LEN..)?, be16(eth, ETH_LEN + 2)))
}

/// The key of the IPv4 packet `l3` (the bytes after the Ethernet header
/// and its tag) if it is of the fast path's shape.
#[inline(always)]
pub(super) fn ipv4_at(l3: &[u8]) -> Option<RawKey> {
    v4(l3.first_chunk()?, l3.len())
}

/// The key of the IPv6 packet `l3` if it is of the fast path's shape.
#[inline(always)]
pub(super) fn ipv6_at(l3: &[u8]) -> Option<RawKey> {
    v6(l3.first_chunk()?, l3.len())
}

/// UDP or TCP: the protocols the fast path reads ports for (the other
/// protocols with ports take the general path). One table load: two
/// comparisons cost four more instructions per packet.
#[inline(always)]
fn udp_or_tcp(p: u8) -> bool {
    static UDP_OR_TCP: [bool; 256] = {
        let mut t = [false; 256];
        t[ip_proto::UDP as usize] = true;
        t[ip_proto::TCP as usize] = true;
        t
    };
    UDP_OR_TCP[usize::from(p)]
}

/// The bits of an IPv4 header's first 8 bytes, read little-endian, that
/// must equal [`V4_PLAIN`] for the fast path: the version/IHL byte and the
/// fragment bits (MF and the offset; DF does not count).
const V4_PLAIN_MASK: u64 = 0xff | ((V4_FRAGMENT_BITS.swap_bytes() as u64) << 48);
/// Version 4, IHL 5, not a fragment (see [`V4_PLAIN_MASK`]).
const V4_PLAIN: u64 = 0x45;

/// `h`: the first bytes of the IPv4 header; `room`: bytes from the header
/// to the end of the frame (at least `V4_LEN`).
#[inline(always)]
fn v4(h: &[u8; V4_LEN], room: usize) -> Option<RawKey> {
    let total = usize::from(be16(h, ipv4::field::LENGTH));
    let protocol = h[ipv4::field::PROTOCOL];
    // Version 4, IHL 5 and not a fragment, in one masked comparison; UDP
    // or TCP; ports within the datagram (total ≥ 24) and the datagram
    // within the frame (total ≤ room), in one comparison. `&`, not `&&`:
    // no branch per condition.
    let ok = (le64(h, 0) & V4_PLAIN_MASK == V4_PLAIN)
        & udp_or_tcp(protocol)
        & (total.wrapping_sub(V4_LEN) <= room - V4_LEN);
    if !ok {
        return None;
    }
    Some(RawKey {
        v6: false,
        // Both addresses in one load.
        v4_addrs: le64(h, ipv4::field::SRC.start),
        v6_src: 0,
        v6_dst: 0,
        protocol,
        has_ports: true,
        ports: le32(h, IPV4_LEN),
    })
}

/// `h`: the first bytes of the IPv6 header; `room`: bytes from the header
/// to the end of the frame (at least `V6_LEN`).
#[inline(always)]
fn v6(h: &[u8; V6_LEN], room: usize) -> Option<RawKey> {
    let payload = usize::from(be16(h, ipv6::field::PAYLOAD_LEN));
    let protocol = h[ipv6::field::NEXT_HEADER];
    // Version 6; the first next header is UDP or TCP (so there is no
    // extension header); ports within the payload (≥ 4) and the payload
    // within the frame (40 + payload ≤ room), in one comparison.
    let ok = (h[0] >> 4 == 6)
        & udp_or_tcp(protocol)
        & (payload.wrapping_sub(PORTS_LEN) <= room - V6_LEN);
    if !ok {
        return None;
    }
    Some(RawKey {
        v6: true,
        v4_addrs: 0,
        v6_src: le128(h, ipv6::field::SRC.start),
        v6_dst: le128(h, ipv6::field::DST.start),
        protocol,
        has_ports: true,
        ports: le32(h, IPV6_LEN),
    })
}

// Reads at constant offsets into a fixed-size array: after inlining the
// `try_into` is known to succeed and no bounds check remains.

#[inline(always)]
fn be16<const N: usize>(h: &[u8; N], at: usize) -> u16 {
    u16::from_be_bytes([h[at], h[at + 1]])
}

#[inline(always)]
fn le32<const N: usize>(h: &[u8; N], at: usize) -> u32 {
    u32::from_le_bytes(h[at..at + 4].try_into().expect("constant in-bounds offset"))
}

#[inline(always)]
fn le64<const N: usize>(h: &[u8; N], at: usize) -> u64 {
    u64::from_le_bytes(h[at..at + 8].try_into().expect("constant in-bounds offset"))
}

#[inline(always)]
fn le128<const N: usize>(h: &[u8; N], at: usize) -> u128 {
    u128::from_le_bytes(
        h[at..at + 16]
            .try_into()
            .expect("constant in-bounds offset"),
    )
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use proptest::prelude::*;

    use super::super::{flow_key, flow_key_general};
    use super::*;
    use crate::packet::build::FrameBuilder;

    fn a4(x: u8) -> IpAddr {
        Ipv4Addr::new(10, 0, 0, x).into()
    }

    fn a6(x: u16) -> IpAddr {
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, x).into()
    }

    /// The fast path agrees with the general path on `frame`: `Some` only
    /// where the general path finds the same key, and `flow_key` (fast or
    /// fallback) equals the general path always (errors included).
    fn agree(frame: &[u8]) {
        let general = flow_key_general(frame);
        if let Some(k) = key(frame) {
            assert_eq!(
                general,
                Ok(Some(k.key())),
                "fast path differs on {frame:02x?}"
            );
        }
        assert_eq!(flow_key(frame), general, "flow_key differs on {frame:02x?}");
    }

    /// `agree` on the frame, on every prefix of it, and with each header
    /// byte set to a few values that matter to the checks.
    fn agree_around(frame: &[u8]) {
        for cut in 0..=frame.len() {
            agree(&frame[..cut]);
        }
        let mut f = frame.to_vec();
        for at in 0..frame.len().min(ETH_TAG_LEN + V6_LEN + 4) {
            let orig = f[at];
            for v in [
                0x00, 0x01, 0x04, 0x05, 0x06, 0x11, 0x20, 0x2c, 0x3c, 0x40, 0x45, 0x46, 0x55, 0x60,
                0x65, 0x86, 0x88, 0xa8, 0xdd, 0x08, 0xff,
            ] {
                f[at] = v;
                agree(&f);
            }
            f[at] = orig;
        }
    }

    /// Frames of every shape the general path knows, fast or not.
    fn crafted() -> Vec<Vec<u8>> {
        let p = [0xabu8; 24];
        let mut v = Vec::new();
        for (src, dst) in [(a4(1), a4(2)), (a6(1), a6(2))] {
            v.push(FrameBuilder::udp(src, dst, 1000, 53).payload(&p).build());
            v.push(FrameBuilder::tcp(src, dst, 40000, 443).build());
            v.push(FrameBuilder::udp(src, dst, 1, 2).build());
            v.push(
                FrameBuilder::proto(src, dst, ip_proto::ICMP)
                    .payload(&p)
                    .build(),
            );
            v.push(
                FrameBuilder::proto(src, dst, ip_proto::SCTP)
                    .payload(&p)
                    .build(),
            );
            v.push(
                FrameBuilder::proto(src, dst, ip_proto::DCCP)
                    .payload(&[1, 2])
                    .build(),
            );
            v.push(
                FrameBuilder::udp(src, dst, 5, 6)
                    .vlan(ethertype::VLAN, 100)
                    .build(),
            );
            v.push(
                FrameBuilder::tcp(src, dst, 5, 6)
                    .vlan(ethertype::QINQ, 7)
                    .vlan(ethertype::VLAN, 8)
                    .build(),
            );
            v.push(
                FrameBuilder::udp(src, dst, 5, 6)
                    .payload(&p)
                    .fragment(0, true)
                    .build(),
            );
            v.push(
                FrameBuilder::udp(src, dst, 5, 6)
                    .payload(&p)
                    .fragment(3, false)
                    .build(),
            );
        }
        v.push(
            FrameBuilder::udp(a4(1), a4(2), 7, 8)
                .ipv4_options(&[1, 1, 1, 0])
                .build(),
        );
        for kind in [
            ip_proto::HOP_BY_HOP,
            ip_proto::IPV6_ROUTING,
            ip_proto::IPV6_DEST_OPTS,
        ] {
            v.push(
                FrameBuilder::tcp(a6(1), a6(2), 7, 8)
                    .ipv6_ext(kind, 0)
                    .build(),
            );
        }
        // Ethernet padding after a short datagram.
        let mut padded = FrameBuilder::udp(a4(1), a4(2), 7, 8).build();
        padded.resize(64, 0);
        v.push(padded);
        let mut padded6 = FrameBuilder::udp(a6(1), a6(2), 7, 8).build();
        padded6.resize(96, 0);
        v.push(padded6);
        v
    }

    #[test]
    fn common_shapes_take_the_fast_path() {
        let p = [0u8; 8];
        for (src, dst) in [(a4(1), a4(2)), (a6(1), a6(2))] {
            for f in [
                FrameBuilder::udp(src, dst, 1000, 53).payload(&p).build(),
                FrameBuilder::tcp(src, dst, 40000, 443).build(),
                FrameBuilder::udp(src, dst, 1, 2)
                    .vlan(ethertype::VLAN, 100)
                    .build(),
                FrameBuilder::tcp(src, dst, 1, 2)
                    .vlan(ethertype::QINQ, 7)
                    .build(),
            ] {
                let k = key(&f).expect("fast path");
                assert_eq!(flow_key_general(&f), Ok(Some(k.key())));
                assert_eq!(RawKey::new(&k.key()), k);
            }
        }
        // A DF flag is no fragment.
        let mut f = FrameBuilder::udp(a4(1), a4(2), 1, 2).build();
        f[ETH_LEN + ipv4::field::FLG_OFF] |= 0x40;
        assert!(key(&f).is_some());
    }

    #[test]
    fn other_shapes_defer_to_the_parser() {
        let p = [0u8; 8];
        for f in [
            FrameBuilder::udp(a4(1), a4(2), 1, 2)
                .vlan(ethertype::QINQ, 1)
                .vlan(ethertype::VLAN, 2)
                .build(),
            FrameBuilder::proto(a4(1), a4(2), ip_proto::SCTP)
                .payload(&p)
                .build(),
            FrameBuilder::udp(a4(1), a4(2), 1, 2)
                .ipv4_options(&[1, 1, 1, 1])
                .build(),
            FrameBuilder::udp(a4(1), a4(2), 1, 2)
                .payload(&p)
                .fragment(0, true)
                .build(),
            FrameBuilder::proto(a4(1), a4(2), ip_proto::ICMP)
                .payload(&p)
                .build(),
            FrameBuilder::tcp(a6(1), a6(2), 1, 2)
                .ipv6_ext(ip_proto::IPV6_DEST_OPTS, 0)
                .build(),
            FrameBuilder::udp(a6(1), a6(2), 1, 2)
                .payload(&p)
                .fragment(0, true)
                .build(),
        ] {
            assert_eq!(key(&f), None);
            assert!(matches!(flow_key(&f), Ok(Some(_))));
        }
    }

    #[test]
    fn crafted_frames_agree() {
        for f in crafted() {
            agree_around(&f);
        }
    }

    #[test]
    fn truncated_and_malformed_give_the_typed_error() {
        use crate::packet::{Layer, ParseError};
        let f = FrameBuilder::udp(a4(1), a4(2), 1, 2).build();
        assert_eq!(flow_key(&f[..20]), Err(ParseError::Truncated(Layer::Ipv4)));
        // Total length claims more than the frame holds.
        let mut g = f.clone();
        g[ETH_LEN + ipv4::field::LENGTH + 1] += 1;
        assert_eq!(flow_key(&g), Err(ParseError::BadTotalLength));
        // Total length leaves 2 bytes of UDP: no room for the ports.
        let mut g = f.clone();
        g[ETH_LEN + ipv4::field::LENGTH..][..2].copy_from_slice(&22u16.to_be_bytes());
        assert_eq!(flow_key(&g), Err(ParseError::Truncated(Layer::Ports)));
        let f6 = FrameBuilder::udp(a6(1), a6(2), 1, 2).build();
        assert_eq!(
            flow_key(&f6[..ETH_LEN + IPV6_LEN - 1]),
            Err(ParseError::Truncated(Layer::Ipv6))
        );
        assert_eq!(
            flow_key(&f6[..f6.len() - 1]),
            Err(ParseError::BadPayloadLength)
        );
        let mut g = f6.clone();
        g[ETH_LEN] = 0x40;
        assert_eq!(flow_key(&g), Err(ParseError::BadIpVersion));
    }

    /// A frame that starts like an IPv4 or IPv6 frame, untagged or with
    /// one or two VLAN tags, with random header fields (version/IHL,
    /// lengths, flags, protocol) and length.
    fn ipish() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::sample::select(vec![
                vec![],
                vec![ethertype::VLAN],
                vec![ethertype::QINQ],
                vec![ethertype::QINQ, ethertype::VLAN],
                vec![ethertype::IPV4],
            ]),
            any::<bool>(),
            prop::sample::select(vec![0x45u8, 0x46, 0x44, 0x55, 0x60, 0x6f, 0x40, 0x00]),
            0u16..120,
            prop::sample::select(vec![0u16, 0x4000, 0x2000, 0x0001, 0x1fff, 0xffff]),
            prop::sample::select(vec![6u8, 17, 33, 132, 136, 1, 0, 43, 44, 60, 58, 59]),
            prop::collection::vec(any::<u8>(), 0..120),
        )
            .prop_map(|(tags, six, ver, len, flags, proto, mut f)| {
                f.resize(f.len().max(2 * ETH_TAG_LEN + V6_LEN + 8), 0);
                let et = if six {
                    ethertype::IPV6
                } else {
                    ethertype::IPV4
                };
                // TPIDs (or a bogus IPv4 EtherType in the first tag slot),
                // then the IP EtherType.
                let mut at = ethernet::field::ETHERTYPE;
                for t in tags.iter().chain([&et]) {
                    f[at..][..2].copy_from_slice(&t.to_be_bytes());
                    at += VLAN_TAG_LEN;
                }
                let ip = at - VLAN_TAG_LEN + 2;
                f[ip] = ver;
                if six {
                    f[ip + 4..][..2].copy_from_slice(&len.to_be_bytes());
                    f[ip + 6] = proto;
                } else {
                    f[ip + 2..][..2].copy_from_slice(&len.to_be_bytes());
                    f[ip + 6..][..2].copy_from_slice(&flags.to_be_bytes());
                    f[ip + 9] = proto;
                }
                f
            })
    }

    proptest! {
        #[test]
        fn random_bytes_agree(f in prop::collection::vec(any::<u8>(), 0..200)) {
            agree(&f);
        }

        #[test]
        fn random_ip_frames_agree(f in ipish(), cut in 0usize..200) {
            agree(&f);
            agree(&f[..cut.min(f.len())]);
        }

        #[test]
        fn built_frames_agree(
            six in any::<bool>(),
            tcp in any::<bool>(),
            sp in any::<u16>(),
            dp in any::<u16>(),
            x in any::<u16>(),
            tags in 0usize..3,
            pad in 0usize..64,
            cut in 0usize..200,
        ) {
            let (src, dst) = if six {
                (a6(x), a6(x ^ 0xffff))
            } else {
                (a4(x as u8), a4((x >> 8) as u8))
            };
            let b = if tcp {
                FrameBuilder::tcp(src, dst, sp, dp)
            } else {
                FrameBuilder::udp(src, dst, sp, dp)
            };
            let b = match tags {
                0 => b,
                1 => b.vlan(ethertype::VLAN, x & 0xfff),
                _ => b.vlan(ethertype::QINQ, 1).vlan(ethertype::VLAN, x & 0xfff),
            };
            let mut f = b.payload(&[0x5a; 16]).build();
            prop_assert_eq!(key(&f).is_some(), tags < 2);
            f.resize(f.len() + pad, 0);
            agree(&f);
            agree(&f[..cut.min(f.len())]);
        }
    }
}
