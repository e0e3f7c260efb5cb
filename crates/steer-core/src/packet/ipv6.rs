//! IPv6 header view (RFC 8200) and the bounded walk over its extension
//! headers.
//!
//! `check_len` accepts a buffer that starts with the 40-byte fixed header,
//! says version 6 and holds the whole payload (`40 + payload length ≤
//! buffer`; jumbograms are not supported). After it succeeds no accessor
//! panics. [`walk_ext_headers`] follows hop-by-hop, routing,
//! destination-options and fragment headers, at most
//! [`MAX_IPV6_EXT_HEADERS`] of them, and stops at the fragment header
//! (what follows a fragment header is fragmentable data).

use std::net::Ipv6Addr;

use super::{be16, ip_proto, put_be16, Fragment, Layer, ParseError};

/// At most this many IPv6 extension headers are followed.
pub const MAX_IPV6_EXT_HEADERS: usize = 8;

/// Byte ranges of the fixed IPv6 header.
pub mod field {
    use std::ops::Range;
    /// Version, traffic class and flow label.
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length.
    pub const PAYLOAD_LEN: usize = 4;
    /// Next header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC: Range<usize> = 8..24;
    /// Destination address.
    pub const DST: Range<usize> = 24..40;
}

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// Length of the fragment extension header.
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// A view of an IPv6 packet.
///
/// ```
/// use std::net::Ipv6Addr;
/// use steer_core::packet::Ipv6Packet;
/// let mut buf = [0u8; 48];
/// buf[0] = 0x60;
/// buf[5] = 8;
/// let mut ip = Ipv6Packet::new_checked(&mut buf[..]).unwrap();
/// ip.set_dst_addr(Ipv6Addr::LOCALHOST);
/// assert_eq!(ip.dst_addr(), Ipv6Addr::LOCALHOST);
/// assert_eq!(ip.payload().len(), 8);
/// assert!(Ipv6Packet::new_checked(&buf[..47]).is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T> {
    buffer: T,
}

view_constructors!(Ipv6Packet);

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Checks the fixed header and the payload length against the buffer.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated(Layer::Ipv6));
        }
        if b[0] >> 4 != 6 {
            return Err(ParseError::BadIpVersion);
        }
        if HEADER_LEN + usize::from(self.payload_len()) > b.len() {
            return Err(ParseError::BadPayloadLength);
        }
        Ok(())
    }

    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x000f_ffff
    }

    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    /// The first next-header value.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr16(&self.buffer.as_ref()[field::SRC]))
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr16(&self.buffer.as_ref()[field::DST]))
    }

    /// The payload (extension headers and upper layer), up to the payload
    /// length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version 6, traffic class 0 and `flow_label`.
    pub fn set_version_flow(&mut self, flow_label: u32) {
        let w = (6u32 << 28) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        put_be16(self.buffer.as_mut(), field::PAYLOAD_LEN, len);
    }

    /// Sets the first next-header value.
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = nh;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// Swaps source and destination (upper-layer checksums stay valid).
    pub fn swap_addrs(&mut self) {
        let (s, d) = (self.src_addr(), self.dst_addr());
        self.set_src_addr(d);
        self.set_dst_addr(s);
    }
}

#[inline(always)]
fn addr16(b: &[u8]) -> [u8; 16] {
    let mut a = [0; 16];
    a.copy_from_slice(b);
    a
}

/// Where the extension chain ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// The upper-layer protocol (for a fragment: the fragment header's next
    /// header, so first and later fragments agree).
    pub protocol: u8,
    /// Offset of the upper-layer header in the IPv6 payload.
    pub offset: usize,
    /// Fragment state, if a fragment header was met.
    pub fragment: Option<Fragment>,
}

/// Walks the extension headers of an IPv6 `payload` starting with
/// `next_header`. Hop-by-hop is accepted only first; at most
/// [`MAX_IPV6_EXT_HEADERS`] headers are followed.
///
/// ```
/// use steer_core::packet::ipv6::walk_ext_headers;
/// // A destination-options header (8 bytes) then UDP.
/// let payload = [17, 0, 0, 0, 0, 0, 0, 0, /* UDP */ 0, 1, 0, 2];
/// let up = walk_ext_headers(60, &payload).unwrap();
/// assert_eq!((up.protocol, up.offset, up.fragment), (17, 8, None));
/// ```
pub fn walk_ext_headers(next_header: u8, payload: &[u8]) -> Result<UpperLayer, ParseError> {
    let mut nh = next_header;
    let mut off = 0usize;
    for i in 0..=MAX_IPV6_EXT_HEADERS {
        match nh {
            ip_proto::HOP_BY_HOP | ip_proto::IPV6_ROUTING | ip_proto::IPV6_DEST_OPTS => {
                if nh == ip_proto::HOP_BY_HOP && i != 0 {
                    return Err(ParseError::BadExtHeader);
                }
                if i == MAX_IPV6_EXT_HEADERS {
                    return Err(ParseError::TooManyExtHeaders);
                }
                let hdr = payload
                    .get(off..off + 2)
                    .ok_or(ParseError::Truncated(Layer::Ipv6Ext))?;
                let len = (usize::from(hdr[1]) + 1) * 8;
                if payload.len() < off + len {
                    return Err(ParseError::Truncated(Layer::Ipv6Ext));
                }
                nh = hdr[0];
                off += len;
            }
            ip_proto::IPV6_FRAGMENT => {
                if i == MAX_IPV6_EXT_HEADERS {
                    return Err(ParseError::TooManyExtHeaders);
                }
                let hdr = payload
                    .get(off..off + FRAGMENT_HEADER_LEN)
                    .ok_or(ParseError::Truncated(Layer::Ipv6Ext))?;
                let w = be16(hdr, 2);
                let frag = if w & 0xfff8 != 0 {
                    Fragment::Later
                } else {
                    Fragment::First
                };
                return Ok(UpperLayer {
                    protocol: hdr[0],
                    offset: off + FRAGMENT_HEADER_LEN,
                    fragment: Some(frag),
                });
            }
            _ => {
                return Ok(UpperLayer {
                    protocol: nh,
                    offset: off,
                    fragment: None,
                })
            }
        }
    }
    Err(ParseError::TooManyExtHeaders)
}
