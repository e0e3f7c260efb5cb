//! IPv4 header view (RFC 791).
//!
//! `check_len` accepts a buffer that starts with an IPv4 header and holds
//! the whole datagram: version 4, IHL ≥ 5, the header (with options) within
//! the buffer, and `IHL*4 ≤ total length ≤ buffer length` (bytes past the
//! total length, e.g. Ethernet padding, are ignored by [`Ipv4Packet::payload`]).
//! After it succeeds no accessor panics.

use std::net::Ipv4Addr;

use super::checksum::Checksum;
use super::{be16, put_be16, Layer, ParseError};

/// Byte ranges of the IPv4 header.
pub mod field {
    use std::ops::Range;
    /// Version (high nibble) and IHL (low nibble).
    pub const VER_IHL: usize = 0;
    /// DSCP and ECN.
    pub const DSCP_ECN: usize = 1;
    /// Total length.
    pub const LENGTH: usize = 2;
    /// Identification.
    pub const IDENT: usize = 4;
    /// Flags (3 bits) and fragment offset (13 bits, 8-byte units).
    pub const FLG_OFF: usize = 6;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Upper-layer protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: usize = 10;
    /// Source address.
    pub const SRC: Range<usize> = 12..16;
    /// Destination address.
    pub const DST: Range<usize> = 16..20;
}

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A view of an IPv4 datagram.
///
/// ```
/// use std::net::Ipv4Addr;
/// use steer_core::packet::{Ipv4Packet, ParseError};
/// let mut buf = [0u8; 28];
/// buf[0] = 0x45;
/// buf[3] = 28;
/// let mut ip = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
/// ip.set_src_addr(Ipv4Addr::new(192, 0, 2, 1));
/// ip.fill_checksum();
/// assert!(ip.verify_checksum());
/// assert_eq!(ip.payload().len(), 8);
/// buf[0] = 0x44;
/// assert_eq!(Ipv4Packet::new_checked(&buf[..]).unwrap_err(), ParseError::BadIhl);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T> {
    buffer: T,
}

view_constructors!(Ipv4Packet);

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Checks the header and total length against the buffer.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(ParseError::Truncated(Layer::Ipv4));
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(ParseError::BadIpVersion);
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(ParseError::BadIhl);
        }
        if b.len() < hl {
            return Err(ParseError::Truncated(Layer::Ipv4));
        }
        let total = usize::from(self.total_len());
        if total < hl || total > b.len() {
            return Err(ParseError::BadTotalLength);
        }
        Ok(())
    }

    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// DSCP and ECN byte.
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Total length (header and payload).
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// True when this datagram is a fragment (first or not).
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Upper-layer protocol.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The options (between the fixed header and the payload).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// The payload: from the end of the header to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }

    /// True when the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        Checksum::new()
            .add_bytes(&self.buffer.as_ref()[..self.header_len()])
            .verifies()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4,
    /// 20..=60).
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        put_be16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, id: u16) {
        put_be16(self.buffer.as_mut(), field::IDENT, id);
    }

    /// Sets the flags (DF, MF) and the fragment offset in bytes (a multiple
    /// of 8).
    pub fn set_fragment(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let mut w = (offset >> 3) & OFFSET_MASK;
        if dont_frag {
            w |= FLAG_DF;
        }
        if more_frags {
            w |= FLAG_MF;
        }
        put_be16(self.buffer.as_mut(), field::FLG_OFF, w);
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = p;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        put_be16(self.buffer.as_mut(), field::CHECKSUM, c);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// Swaps source and destination (the header checksum stays valid).
    pub fn swap_addrs(&mut self) {
        let (s, d) = (self.src_addr(), self.dst_addr());
        self.set_src_addr(d);
        self.set_dst_addr(s);
    }

    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = Checksum::new()
            .add_bytes(&self.buffer.as_ref()[..hl])
            .finish();
        self.set_checksum(c);
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, total) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[hl..total]
    }
}
