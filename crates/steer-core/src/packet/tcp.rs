//! TCP header view (RFC 9293), enough for steering and echoing: ports,
//! sequence numbers, data offset, flags, checksum.
//!
//! The view covers one segment (header and data: the buffer's whole length
//! is the segment length used in the pseudo-header). `check_len` accepts a
//! buffer holding the 20-byte header with `20 ≤ data offset × 4 ≤ buffer
//! length`. After it succeeds no accessor panics.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::checksum::Checksum;
use super::{be16, ip_proto, put_be16, Layer, ParseError};

/// Byte offsets of the TCP header.
pub mod field {
    /// Source port.
    pub const SRC_PORT: usize = 0;
    /// Destination port.
    pub const DST_PORT: usize = 2;
    /// Sequence number.
    pub const SEQ: usize = 4;
    /// Acknowledgment number.
    pub const ACK: usize = 8;
    /// Data offset (high nibble).
    pub const DATA_OFF: usize = 12;
    /// Flags.
    pub const FLAGS: usize = 13;
    /// Window.
    pub const WINDOW: usize = 14;
    /// Checksum.
    pub const CHECKSUM: usize = 16;
}

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// A view of a TCP segment.
///
/// ```
/// use std::net::Ipv6Addr;
/// use steer_core::packet::TcpPacket;
/// let (a, b) = (Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED);
/// let mut buf = [0u8; 24];
/// let mut tcp = TcpPacket::new_unchecked(&mut buf[..]);
/// tcp.set_header_len(20);
/// tcp.set_src_port(443);
/// tcp.fill_checksum_v6(a, b);
/// let tcp = TcpPacket::new_checked(&buf[..]).unwrap();
/// assert!(tcp.verify_checksum_v6(a, b));
/// assert_eq!((tcp.src_port(), tcp.payload().len()), (443, 4));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TcpPacket<T> {
    buffer: T,
}

view_constructors!(TcpPacket);
l4_ports!(TcpPacket);

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Checks the header and the data offset against the buffer.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(ParseError::Truncated(Layer::Tcp));
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN || hl > b.len() {
            return Err(ParseError::BadL4Length);
        }
        Ok(())
    }

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::SEQ..field::SEQ + 4];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::ACK..field::ACK + 4];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }

    /// The flags byte (CWR ECE URG ACK PSH RST SYN FIN).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Window.
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The data after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    fn seg_len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// True when the checksum is correct over IPv4.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let Ok(len) = u16::try_from(self.seg_len()) else {
            return false;
        };
        Checksum::new()
            .pseudo_header_v4(src, dst, ip_proto::TCP, len)
            .add_bytes(self.buffer.as_ref())
            .verifies()
    }

    /// True when the checksum is correct over IPv6.
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let Ok(len) = u32::try_from(self.seg_len()) else {
            return false;
        };
        Checksum::new()
            .pseudo_header_v6(src, dst, ip_proto::TCP, len)
            .add_bytes(self.buffer.as_ref())
            .verifies()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the header length in bytes (a multiple of 4, 20..=60).
    pub fn set_header_len(&mut self, len: usize) {
        let b = self.buffer.as_mut();
        b[field::DATA_OFF] = (((len / 4) as u8) << 4) | (b[field::DATA_OFF] & 0x0f);
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, f: u8) {
        self.buffer.as_mut()[field::FLAGS] = f;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        put_be16(self.buffer.as_mut(), field::CHECKSUM, c);
    }

    /// Computes and stores the checksum over IPv4 (segment = whole buffer,
    /// at most 65535 bytes).
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let len = u16::try_from(self.seg_len()).unwrap_or(u16::MAX);
        let c = Checksum::new()
            .pseudo_header_v4(src, dst, ip_proto::TCP, len)
            .add_bytes(self.buffer.as_ref())
            .finish();
        self.set_checksum(c);
    }

    /// Computes and stores the checksum over IPv6 (segment = whole buffer).
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let len = u32::try_from(self.seg_len()).unwrap_or(u32::MAX);
        let c = Checksum::new()
            .pseudo_header_v6(src, dst, ip_proto::TCP, len)
            .add_bytes(self.buffer.as_ref())
            .finish();
        self.set_checksum(c);
    }
}
