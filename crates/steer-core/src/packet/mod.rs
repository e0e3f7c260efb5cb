//! Zero-copy, length-checked views over Ethernet II, VLAN (802.1Q/802.1ad),
//! IPv4, IPv6 (with its extension headers), UDP and TCP, plus the internet
//! checksum.
//!
//! Each layer is a view `Xxx<T: AsRef<[u8]>>` over a buffer (smoltcp style):
//! `new_unchecked` wraps without looking, `check_len` validates, and
//! `new_checked` does both (one macro writes these for every view, another
//! the port accessors UDP and TCP share). **The promise:** once `check_len` has succeeded
//! on a view, none of its accessors panics. Setters live in a separate
//! `impl<T: AsRef<[u8]> + AsMut<[u8]>>` block so that an echo server can swap
//! MACs, addresses and ports and fix checksums in place; [`echo`] does that
//! for a UDP datagram (and answers like sockperf's server).
//!
//! [`parse`] walks a whole frame (Ethernet, up to two VLAN tags, IPv4/IPv6
//! and the IPv6 extension chain) and returns the [`Layers`]: the L3/L4
//! offsets, the upper-layer protocol and the fragment state, from which the
//! flow key ([`crate::flow`]) and the UDP/TCP payload range are read.
//! Malformed or truncated input is a [`ParseError`], never a panic; a frame
//! that is not IPv4/IPv6 is `Ok(None)`.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use steer_core::packet::{self, build::FrameBuilder, Ipv4Packet, UdpPacket};
//!
//! let mut frame = FrameBuilder::udp(
//!     Ipv4Addr::new(10, 0, 0, 1).into(), Ipv4Addr::new(10, 0, 0, 2).into(), 4000, 53)
//!     .payload(b"hello")
//!     .build();
//! let layers = packet::parse(&frame).unwrap().unwrap();
//! assert_eq!(layers.protocol, packet::ip_proto::UDP);
//! let payload = layers.payload_range(&frame).unwrap();
//! assert_eq!(&frame[payload], b"hello");
//!
//! // Echo it back in place: swap addresses and ports (checksums stay valid,
//! // the one's complement sum does not depend on the order of its words).
//! let mut ip = Ipv4Packet::new_unchecked(&mut frame[layers.l3_offset..layers.l3_end]);
//! let (src, dst) = (ip.src_addr(), ip.dst_addr());
//! ip.set_src_addr(dst);
//! ip.set_dst_addr(src);
//! let mut udp = UdpPacket::new_unchecked(&mut frame[layers.l4_offset..layers.l3_end]);
//! let (sp, dp) = (udp.src_port(), udp.dst_port());
//! udp.set_src_port(dp);
//! udp.set_dst_port(sp);
//! assert!(udp.verify_checksum_v4(dst, src));
//! ```
#![forbid(unsafe_code)]

/// The constructors every view shares: `new_unchecked`, `new_checked`
/// (which runs the view's own `check_len`) and `into_inner`. The view is a
/// struct with one field, `buffer: T`.
macro_rules! view_constructors {
    ($view:ident) => {
        impl<T: AsRef<[u8]>> $view<T> {
            /// Wraps `buffer` without checking it.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps `buffer` and checks it (see the module doc).
            pub fn new_checked(buffer: T) -> Result<Self, $crate::packet::ParseError> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// The underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

/// The port accessors UDP and TCP share: both headers start with the
/// source and destination port (`field::SRC_PORT`, `field::DST_PORT` of
/// the invoking module).
macro_rules! l4_ports {
    ($view:ident) => {
        impl<T: AsRef<[u8]>> $view<T> {
            /// Source port.
            pub fn src_port(&self) -> u16 {
                $crate::packet::be16(self.buffer.as_ref(), field::SRC_PORT)
            }

            /// Destination port.
            pub fn dst_port(&self) -> u16 {
                $crate::packet::be16(self.buffer.as_ref(), field::DST_PORT)
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            /// Sets the source port.
            pub fn set_src_port(&mut self, p: u16) {
                $crate::packet::put_be16(self.buffer.as_mut(), field::SRC_PORT, p);
            }

            /// Sets the destination port.
            pub fn set_dst_port(&mut self, p: u16) {
                $crate::packet::put_be16(self.buffer.as_mut(), field::DST_PORT, p);
            }

            /// Swaps the ports (the checksum stays valid).
            pub fn swap_ports(&mut self) {
                let (s, d) = (self.src_port(), self.dst_port());
                self.set_src_port(d);
                self.set_dst_port(s);
            }
        }
    };
}

pub mod build;
pub mod checksum;
pub mod echo;
pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
mod layers;
pub mod tcp;
pub mod udp;
mod verify;

use std::fmt;

pub use ethernet::{EthernetFrame, VlanTag};
pub use ipv4::Ipv4Packet;
pub use ipv6::{Ipv6Packet, MAX_IPV6_EXT_HEADERS};
pub use layers::{parse, IpVersion, Layers, MAX_VLAN_TAGS};
pub use tcp::TcpPacket;
pub use udp::UdpPacket;
pub use verify::verify_udp_frame;

/// IP protocol numbers (IPv4 `protocol`, IPv6 `next header`) used here.
pub mod ip_proto {
    /// IPv6 hop-by-hop options (only as the first header after IPv6).
    pub const HOP_BY_HOP: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// DCCP.
    pub const DCCP: u8 = 33;
    /// IPv6 routing header.
    pub const IPV6_ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const IPV6_FRAGMENT: u8 = 44;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const IPV6_NO_NEXT: u8 = 59;
    /// IPv6 destination options.
    pub const IPV6_DEST_OPTS: u8 = 60;
    /// SCTP.
    pub const SCTP: u8 = 132;
    /// UDP-Lite.
    pub const UDPLITE: u8 = 136;

    /// Protocols whose header starts with a 16-bit source and destination
    /// port (the ones the kernel's flow dissector reads ports for).
    #[inline]
    pub const fn has_ports(proto: u8) -> bool {
        matches!(proto, TCP | UDP | DCCP | SCTP | UDPLITE)
    }
}

/// Which fragment of a datagram a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fragment {
    /// Offset 0 (the L4 header is present).
    First,
    /// Offset above 0 (no L4 header).
    Later,
}

/// The layer a [`ParseError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The Ethernet II header.
    Ethernet,
    /// An 802.1Q / 802.1ad tag.
    Vlan,
    /// The IPv4 header.
    Ipv4,
    /// The fixed IPv6 header.
    Ipv6,
    /// An IPv6 extension header.
    Ipv6Ext,
    /// The UDP header.
    Udp,
    /// The TCP header.
    Tcp,
    /// The port words of a transport header (what the flow key reads).
    Ports,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "VLAN",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Ipv6Ext => "IPv6 extension",
            Layer::Udp => "UDP",
            Layer::Tcp => "TCP",
            Layer::Ports => "transport ports",
        })
    }
}

/// Why a frame did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseError {
    /// The buffer ends inside this layer's header.
    Truncated(Layer),
    /// More VLAN tags than [`MAX_VLAN_TAGS`].
    TooManyVlanTags,
    /// The IP version nibble does not match the EtherType.
    BadIpVersion,
    /// IPv4 IHL below 5 (a header shorter than 20 bytes).
    BadIhl,
    /// IPv4 total length shorter than the header or beyond the buffer.
    BadTotalLength,
    /// IPv6 payload length beyond the buffer.
    BadPayloadLength,
    /// A misplaced IPv6 extension header (hop-by-hop not first).
    BadExtHeader,
    /// More IPv6 extension headers than [`MAX_IPV6_EXT_HEADERS`].
    TooManyExtHeaders,
    /// A UDP length or TCP data offset that does not fit the segment.
    BadL4Length,
    /// A non-first fragment has no transport header.
    NotFirstFragment,
    /// The upper-layer protocol is neither UDP nor TCP.
    NotUdpOrTcp,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Truncated(l) => write!(f, "truncated {l} header"),
            ParseError::TooManyVlanTags => write!(f, "more than {MAX_VLAN_TAGS} VLAN tags"),
            ParseError::BadIpVersion => f.write_str("IP version does not match the EtherType"),
            ParseError::BadIhl => f.write_str("IPv4 header length below 20 bytes"),
            ParseError::BadTotalLength => {
                f.write_str("IPv4 total length shorter than the header or beyond the buffer")
            }
            ParseError::BadPayloadLength => f.write_str("IPv6 payload length beyond the buffer"),
            ParseError::BadExtHeader => f.write_str("misplaced IPv6 extension header"),
            ParseError::TooManyExtHeaders => {
                write!(f, "more than {MAX_IPV6_EXT_HEADERS} IPv6 extension headers")
            }
            ParseError::BadL4Length => f.write_str("bad UDP length or TCP data offset"),
            ParseError::NotFirstFragment => f.write_str("non-first fragment has no L4 header"),
            ParseError::NotUdpOrTcp => f.write_str("upper-layer protocol is not UDP or TCP"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Big-endian u16 at `at` (callers have checked the length).
#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Writes a big-endian u16 at `at` (callers have checked the length).
#[inline(always)]
pub(crate) fn put_be16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
