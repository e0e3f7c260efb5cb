//! One pass over a frame: Ethernet, VLAN tags, IPv4/IPv6 (and the IPv6
//! extension chain), to the L4 offset. Nothing past the port words is read
//! here; the L4 header is checked only when the payload range is asked for.
//!
//! Invariants of a returned [`Layers`] (for the frame it came from):
//! `l3_offset ≤ l4_offset ≤ l3_end ≤ frame.len()`, and the IP header at
//! `l3_offset..l3_end` passed its view's `check_len`.

use std::ops::Range;

use super::ethernet::{ethertype, EthernetFrame, VlanTag, HEADER_LEN as ETH_LEN, VLAN_TAG_LEN};
use super::ipv6::{walk_ext_headers, HEADER_LEN as IPV6_LEN};
use super::{ip_proto, Fragment, Ipv4Packet, Ipv6Packet, Layer, ParseError, TcpPacket, UdpPacket};

/// At most this many VLAN tags (QinQ: an 802.1ad tag then an 802.1Q tag).
pub const MAX_VLAN_TAGS: usize = 2;

/// The IP version of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// Where a frame's layers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layers {
    /// Number of VLAN tags (0..=2).
    pub vlan_tags: u8,
    /// VLAN ids, outer first (0 where absent).
    pub vlan_ids: [u16; MAX_VLAN_TAGS],
    /// IPv4 or IPv6.
    pub ip: IpVersion,
    /// Offset of the IP header.
    pub l3_offset: usize,
    /// Offset of the upper-layer header (after IPv4 options or IPv6
    /// extension headers).
    pub l4_offset: usize,
    /// End of the IP datagram (total length / payload length; Ethernet
    /// padding after it is excluded).
    pub l3_end: usize,
    /// Upper-layer protocol.
    pub protocol: u8,
    /// Fragment state (`None` for a whole datagram).
    pub fragment: Option<Fragment>,
}

/// Parses `frame` down to the L4 offset. `Ok(None)` for a frame that is not
/// IPv4 or IPv6 (ARP, LLDP, ...).
///
/// ```
/// use steer_core::packet::{parse, ParseError, Layer};
/// let arp = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 1, 2, 3, 4, 5, 0x08, 0x06];
/// assert_eq!(parse(&arp), Ok(None));
/// assert_eq!(parse(&arp[..10]), Err(ParseError::Truncated(Layer::Ethernet)));
/// ```
#[inline(always)]
pub fn parse(frame: &[u8]) -> Result<Option<Layers>, ParseError> {
    let eth = EthernetFrame::new_checked(frame)?;
    let mut et = eth.ethertype();
    let mut off = ETH_LEN;
    let mut vlan_tags = 0u8;
    let mut vlan_ids = [0u16; MAX_VLAN_TAGS];
    while ethertype::is_vlan(et) {
        if usize::from(vlan_tags) == MAX_VLAN_TAGS {
            return Err(ParseError::TooManyVlanTags);
        }
        let tag = VlanTag::new_checked(frame.get(off..).unwrap_or_default())?;
        vlan_ids[usize::from(vlan_tags)] = tag.vid();
        vlan_tags += 1;
        et = tag.ethertype();
        off += VLAN_TAG_LEN;
    }
    let l3 = frame.get(off..).unwrap_or_default();
    let (ip, l4_rel, len, protocol, fragment) = match et {
        ethertype::IPV4 => {
            let p = Ipv4Packet::new_checked(l3)?;
            let fragment = if !p.is_fragment() {
                None
            } else if p.frag_offset() == 0 {
                Some(Fragment::First)
            } else {
                Some(Fragment::Later)
            };
            (
                IpVersion::V4,
                p.header_len(),
                usize::from(p.total_len()),
                p.protocol(),
                fragment,
            )
        }
        ethertype::IPV6 => {
            let p = Ipv6Packet::new_checked(l3)?;
            let up = walk_ext_headers(p.next_header(), p.payload())?;
            (
                IpVersion::V6,
                IPV6_LEN + up.offset,
                IPV6_LEN + usize::from(p.payload_len()),
                up.protocol,
                up.fragment,
            )
        }
        _ => return Ok(None),
    };
    Ok(Some(Layers {
        vlan_tags,
        vlan_ids,
        ip,
        l3_offset: off,
        l4_offset: off + l4_rel,
        l3_end: off + len,
        protocol,
        fragment,
    }))
}

impl Layers {
    /// The upper-layer bytes (`l4_offset..l3_end`) of `frame`.
    #[inline]
    pub fn l4<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame.get(self.l4_offset..self.l3_end).unwrap_or_default()
    }

    /// Source and destination ports, for a non-fragment whose protocol has
    /// them ([`ip_proto::has_ports`]); `Ok(None)` otherwise.
    #[inline]
    pub fn ports(&self, frame: &[u8]) -> Result<Option<(u16, u16)>, ParseError> {
        if self.fragment.is_some() || !ip_proto::has_ports(self.protocol) {
            return Ok(None);
        }
        match self.l4(frame) {
            [a, b, c, d, ..] => Ok(Some((
                u16::from_be_bytes([*a, *b]),
                u16::from_be_bytes([*c, *d]),
            ))),
            _ => Err(ParseError::Truncated(Layer::Ports)),
        }
    }

    /// The range of `frame` holding the UDP or TCP payload (after checking
    /// the UDP length or TCP data offset). Fails for a non-first fragment
    /// and for other protocols; a first UDP fragment usually fails too
    /// (its UDP length covers the whole datagram, not this fragment).
    pub fn payload_range(&self, frame: &[u8]) -> Result<Range<usize>, ParseError> {
        if self.fragment == Some(Fragment::Later) {
            return Err(ParseError::NotFirstFragment);
        }
        let seg = self.l4(frame);
        match self.protocol {
            ip_proto::UDP => {
                let udp = UdpPacket::new_checked(seg)?;
                let start = self.l4_offset + super::udp::HEADER_LEN;
                Ok(start..self.l4_offset + usize::from(udp.len()))
            }
            ip_proto::TCP => {
                let tcp = TcpPacket::new_checked(seg)?;
                Ok(self.l4_offset + tcp.header_len()..self.l3_end)
            }
            _ => Err(ParseError::NotUdpOrTcp),
        }
    }
}
