//! The internet checksum (RFC 1071) and the UDP/TCP pseudo-headers for IPv4
//! (RFC 768/793) and IPv6 (RFC 8200 §8.1).
//!
//! [`Checksum`] accumulates a one's complement sum of big-endian 16-bit
//! words; [`Checksum::finish`] folds and complements it. A buffer whose
//! checksum field is filled in correctly sums to `0xffff`, so `finish()` of
//! it is 0 ([`Checksum::verifies`]). The sum does not depend on word order:
//! swapping source and destination addresses or ports leaves it unchanged.

use std::net::{Ipv4Addr, Ipv6Addr};

/// A running one's complement sum.
///
/// ```
/// use steer_core::packet::checksum::Checksum;
/// // RFC 1071 §3 example words.
/// let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
/// let c = Checksum::new().add_bytes(&data);
/// assert_eq!(c.fold(), 0xddf2);
/// assert_eq!(c.finish(), !0xddf2);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checksum {
    sum: u64,
}

impl Checksum {
    /// An empty sum.
    pub const fn new() -> Self {
        Self { sum: 0 }
    }

    /// Adds `data` as big-endian 16-bit words (an odd last byte is padded
    /// with zero, as RFC 1071 says).
    #[must_use]
    pub fn add_bytes(mut self, data: &[u8]) -> Self {
        let mut chunks = data.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            // Sum 32-bit halves into 64 bits: no carry is lost.
            self.sum += (w >> 32) + (w & 0xffff_ffff);
        }
        let mut rest = chunks.remainder().chunks_exact(2);
        for c in &mut rest {
            self.sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = rest.remainder() {
            self.sum += u64::from(*last) << 8;
        }
        self
    }

    /// Adds one 16-bit word.
    #[must_use]
    pub fn add_u16(mut self, w: u16) -> Self {
        self.sum += u64::from(w);
        self
    }

    /// Adds a 32-bit value as two words.
    #[must_use]
    pub fn add_u32(mut self, w: u32) -> Self {
        self.sum += u64::from(w >> 16) + u64::from(w & 0xffff);
        self
    }

    /// The folded 16-bit one's complement sum (not complemented).
    pub fn fold(self) -> u16 {
        let mut s = self.sum;
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        // s <= 0xffff after the loop.
        s as u16
    }

    /// The checksum to store: the complement of the folded sum.
    pub fn finish(self) -> u16 {
        !self.fold()
    }

    /// True when the summed data includes a correct checksum field.
    pub fn verifies(self) -> bool {
        self.fold() == 0xffff
    }

    /// The IPv4 pseudo-header: addresses, zero, protocol, L4 length.
    #[must_use]
    pub fn pseudo_header_v4(self, src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u16) -> Self {
        self.add_bytes(&src.octets())
            .add_bytes(&dst.octets())
            .add_u16(u16::from(proto))
            .add_u16(len)
    }

    /// The IPv6 pseudo-header: addresses, 32-bit upper-layer length, next
    /// header.
    #[must_use]
    pub fn pseudo_header_v6(self, src: Ipv6Addr, dst: Ipv6Addr, proto: u8, len: u32) -> Self {
        self.add_bytes(&src.octets())
            .add_bytes(&dst.octets())
            .add_u32(len)
            .add_u16(u16::from(proto))
    }
}

/// The checksum of `data` (complemented, ready to store).
pub fn checksum(data: &[u8]) -> u16 {
    Checksum::new().add_bytes(data).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from(c[0]) << 8
            };
            s += u32::from(w);
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn matches_word_by_word_sum() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1001).collect();
        for len in 0..data.len() {
            assert_eq!(checksum(&data[..len]), naive(&data[..len]), "len {len}");
        }
    }

    #[test]
    fn all_ones_fold() {
        let data = [0xffu8; 64];
        assert_eq!(Checksum::new().add_bytes(&data).fold(), 0xffff);
    }

    #[test]
    fn ipv4_header_example() {
        // A classic example header with checksum 0xb861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert!(Checksum::new().add_bytes(&h).verifies());
    }
}
