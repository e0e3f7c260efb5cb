//! UDP header view (RFC 768).
//!
//! `check_len` accepts a buffer holding the 8-byte header with
//! `8 ≤ length field ≤ buffer length`; the datagram is the first `length`
//! bytes. After it succeeds no accessor panics. The checksum helpers take
//! the pseudo-header addresses; a computed checksum of 0 is sent as
//! `0xffff`, and a received 0 over IPv4 means "no checksum".

use std::net::{Ipv4Addr, Ipv6Addr};

use super::checksum::Checksum;
use super::{be16, ip_proto, put_be16, Layer, ParseError};

/// Byte offsets of the UDP header.
pub mod field {
    /// Source port.
    pub const SRC_PORT: usize = 0;
    /// Destination port.
    pub const DST_PORT: usize = 2;
    /// Length (header and payload).
    pub const LENGTH: usize = 4;
    /// Checksum.
    pub const CHECKSUM: usize = 6;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram.
///
/// ```
/// use std::net::Ipv4Addr;
/// use steer_core::packet::UdpPacket;
/// let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
/// let mut buf = [0u8; 12];
/// let mut udp = UdpPacket::new_unchecked(&mut buf[..]);
/// udp.set_src_port(1234);
/// udp.set_dst_port(53);
/// udp.set_len(12);
/// udp.fill_checksum_v4(a, b);
/// let udp = UdpPacket::new_checked(&buf[..]).unwrap();
/// assert!(udp.verify_checksum_v4(a, b));
/// assert_eq!(udp.payload().len(), 4);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct UdpPacket<T> {
    buffer: T,
}

view_constructors!(UdpPacket);
l4_ports!(UdpPacket);

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Checks the header and the length field against the buffer.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated(Layer::Udp));
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN || len > b.len() {
            return Err(ParseError::BadL4Length);
        }
        Ok(())
    }

    /// Length field (header and payload).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The payload (up to the length field).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.len())]
    }

    /// True when the checksum is correct over IPv4 (or absent: 0).
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.checksum() == 0
            || Checksum::new()
                .pseudo_header_v4(src, dst, ip_proto::UDP, self.len())
                .add_bytes(self.datagram())
                .verifies()
    }

    /// True when the checksum is correct over IPv6 (where it is mandatory).
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        self.checksum() != 0
            && Checksum::new()
                .pseudo_header_v6(src, dst, ip_proto::UDP, u32::from(self.len()))
                .add_bytes(self.datagram())
                .verifies()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the length field.
    pub fn set_len(&mut self, len: u16) {
        put_be16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        put_be16(self.buffer.as_mut(), field::CHECKSUM, c);
    }

    /// Computes and stores the checksum over IPv4. The length field must be
    /// set and within the buffer.
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = Checksum::new()
            .pseudo_header_v4(src, dst, ip_proto::UDP, self.len())
            .add_bytes(self.datagram())
            .finish();
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Computes and stores the checksum over IPv6. The length field must be
    /// set and within the buffer.
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = Checksum::new()
            .pseudo_header_v6(src, dst, ip_proto::UDP, u32::from(self.len()))
            .add_bytes(self.datagram())
            .finish();
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }
}
