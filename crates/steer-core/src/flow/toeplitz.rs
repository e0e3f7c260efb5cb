//! The Toeplitz hash of Microsoft RSS, as NICs compute it, with a
//! configurable key (default: the 40-byte key of the Microsoft RSS
//! verification suite, [`MS_RSS_KEY`]).
//!
//! Input, as the NIC builds it: source address, destination address, then
//! (for TCP, and for UDP unless [`ToeplitzHasher::hash_udp_ports`] is off)
//! source port and destination port, all in network byte order. Fragments
//! and other protocols hash the addresses only (a NIC's 2-tuple), which
//! matches [`FlowKey::ports`] being `None`.
//!
//! The key is expanded once into per-nibble tables: input byte `i`'s high
//! and low nibbles each select the XOR of the 32-bit key windows of their set
//! bits, so hashing is two table loads and XORs per input byte (4.5 KiB of
//! tables for the 36-byte IPv6 input).
//!
//! **Symmetric mode** (our choice): the key is put in
//! [`FlowKey::canonical`] form (lower (address, port) endpoint first) before
//! hashing. It works with any key, but the result is no longer what the NIC
//! computes for the reply direction. To make a *NIC* hash symmetric, program
//! it with [`SYMMETRIC_RSS_KEY`] (0x6d5a repeated, Woo & Park): with that key
//! the plain hash is already direction-free, and this hasher reproduces it.

use std::fmt;

use super::{nonzero, FlowAddrs, FlowHasher, FlowKey};
use crate::packet::ip_proto;

/// The Microsoft RSS verification-suite key (the common NIC default).
pub const MS_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// A key whose Toeplitz hash is the same for both directions of a flow
/// (0x6d5a repeated: a 16-bit period, so swapping the 32/128-bit addresses
/// and the 16-bit ports does not change the sum).
pub const SYMMETRIC_RSS_KEY: [u8; 40] = {
    let mut k = [0u8; 40];
    let mut i = 0;
    while i < 40 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// Longest input: two IPv6 addresses and two ports.
const MAX_INPUT: usize = 36;

/// The key is shorter than [`ToeplitzHasher::MIN_KEY_LEN`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyError {
    /// The length given.
    pub len: usize,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Toeplitz key of {} bytes, at least {} needed",
            self.len,
            ToeplitzHasher::MIN_KEY_LEN
        )
    }
}

impl std::error::Error for KeyError {}

/// The RSS Toeplitz hash.
///
/// ```
/// use std::net::Ipv4Addr;
/// use steer_core::flow::{FlowAddrs, FlowHasher, FlowKey, Ports, ToeplitzHasher};
/// // The first vector of the Microsoft RSS verification suite.
/// let k = FlowKey {
///     addrs: FlowAddrs::V4 { src: Ipv4Addr::new(66, 9, 149, 187), dst: Ipv4Addr::new(161, 142, 100, 80) },
///     protocol: 6,
///     ports: Some(Ports { src: 2794, dst: 1766 }),
/// };
/// assert_eq!(ToeplitzHasher::default().hash(&k), 0x51cc_c178);
/// ```
#[derive(Clone)]
pub struct ToeplitzHasher {
    /// `tables[2 * i + h][nibble]`: input byte `i`, high (`h = 0`) or low
    /// nibble.
    tables: Box<[[u32; 16]; 2 * MAX_INPUT]>,
    symmetric: bool,
    udp_ports: bool,
}

impl fmt::Debug for ToeplitzHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToeplitzHasher")
            .field("symmetric", &self.symmetric)
            .field("udp_ports", &self.udp_ports)
            .finish_non_exhaustive()
    }
}

impl Default for ToeplitzHasher {
    /// [`MS_RSS_KEY`], asymmetric, UDP ports hashed.
    fn default() -> Self {
        Self::from_valid_key(&MS_RSS_KEY)
    }
}

impl ToeplitzHasher {
    /// Shortest key accepted: the longest input (36 bytes) plus 4.
    pub const MIN_KEY_LEN: usize = MAX_INPUT + 4;

    /// A hasher with `key` (at least [`Self::MIN_KEY_LEN`] bytes; bytes past
    /// the 40th are not used).
    pub fn new(key: &[u8]) -> Result<Self, KeyError> {
        if key.len() < Self::MIN_KEY_LEN {
            return Err(KeyError { len: key.len() });
        }
        Ok(Self::from_valid_key(key))
    }

    fn from_valid_key(key: &[u8]) -> Self {
        let mut tables = Box::new([[0u32; 16]; 2 * MAX_INPUT]);
        for (n, table) in tables.iter_mut().enumerate() {
            // Nibble n covers input bits 4n..4n+4 (MSB first).
            for (v, slot) in table.iter_mut().enumerate() {
                let mut acc = 0u32;
                for b in 0..4 {
                    if v & (0x8 >> b) != 0 {
                        acc ^= window(key, 4 * n + b);
                    }
                }
                *slot = acc;
            }
        }
        Self {
            tables,
            symmetric: false,
            udp_ports: true,
        }
    }

    /// Sets the symmetric mode (see the module doc).
    #[must_use]
    pub fn symmetric(mut self, yes: bool) -> Self {
        self.symmetric = yes;
        self
    }

    /// Whether the symmetric mode is on.
    pub fn is_symmetric(&self) -> bool {
        self.symmetric
    }

    /// Whether UDP ports are part of the input (NICs often hash UDP on the
    /// addresses only unless told otherwise, e.g. `ethtool -N <if>
    /// rx-flow-hash udp4 sdfn`). Default: on.
    #[must_use]
    pub fn hash_udp_ports(mut self, yes: bool) -> Self {
        self.udp_ports = yes;
        self
    }

    /// The raw Toeplitz hash of `input` (at most 36 bytes; longer input is
    /// cut). May be 0.
    #[inline(always)]
    pub fn hash_bytes(&self, input: &[u8]) -> u32 {
        let mut h = 0u32;
        for (i, &b) in input.iter().take(MAX_INPUT).enumerate() {
            h ^= self.tables[2 * i][usize::from(b >> 4)]
                ^ self.tables[2 * i + 1][usize::from(b & 15)];
        }
        h
    }

    #[inline(always)]
    fn raw(&self, k: &FlowKey) -> u32 {
        let mut buf = [0u8; MAX_INPUT];
        let mut n = match k.addrs {
            FlowAddrs::V4 { src, dst } => {
                buf[..4].copy_from_slice(&src.octets());
                buf[4..8].copy_from_slice(&dst.octets());
                8
            }
            FlowAddrs::V6 { src, dst } => {
                buf[..16].copy_from_slice(&src.octets());
                buf[16..32].copy_from_slice(&dst.octets());
                32
            }
        };
        let with_ports =
            k.protocol == ip_proto::TCP || (k.protocol == ip_proto::UDP && self.udp_ports);
        if let (Some(p), true) = (k.ports, with_ports) {
            buf[n..n + 2].copy_from_slice(&p.src.to_be_bytes());
            buf[n + 2..n + 4].copy_from_slice(&p.dst.to_be_bytes());
            n += 4;
        }
        self.hash_bytes(&buf[..n])
    }
}

/// The 32 key bits starting at bit `bit` (MSB of byte 0 is bit 0); bits
/// past the end of the key are 0.
fn window(key: &[u8], bit: usize) -> u32 {
    let byte = bit / 8;
    let mut w = 0u64;
    for i in 0..5 {
        w = (w << 8) | u64::from(key.get(byte + i).copied().unwrap_or(0));
    }
    (w >> (8 - bit % 8)) as u32
}

impl FlowHasher for ToeplitzHasher {
    #[inline(always)]
    fn hash(&self, key: &FlowKey) -> u32 {
        let h = if self.symmetric {
            self.raw(&key.canonical())
        } else {
            self.raw(key)
        };
        nonzero(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit by bit, straight from the definition.
    fn reference(key: &[u8], input: &[u8]) -> u32 {
        let mut h = 0u32;
        for (i, &b) in input.iter().enumerate() {
            for j in 0..8 {
                if b & (0x80 >> j) != 0 {
                    h ^= window(key, 8 * i + j);
                }
            }
        }
        h
    }

    #[test]
    fn tables_match_bitwise_definition() {
        let key: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        let t = ToeplitzHasher::new(&key).unwrap();
        let input: Vec<u8> = (0..36u8)
            .map(|i| i.wrapping_mul(91).wrapping_add(3))
            .collect();
        for n in 0..=36 {
            assert_eq!(
                t.hash_bytes(&input[..n]),
                reference(&key, &input[..n]),
                "n={n}"
            );
        }
    }

    #[test]
    fn window_reads_key_bits() {
        assert_eq!(window(&MS_RSS_KEY, 0), 0x6d5a_56da);
        assert_eq!(window(&MS_RSS_KEY, 8), 0x5a56_da25);
        assert_eq!(window(&MS_RSS_KEY, 4), 0xd5a5_6da2);
        assert_eq!(window(&MS_RSS_KEY, 36 * 8 + 4), 0xeac0_1fa0);
    }

    #[test]
    fn short_key_is_rejected() {
        assert_eq!(
            ToeplitzHasher::new(&[0; 39]).unwrap_err(),
            KeyError { len: 39 }
        );
        assert!(ToeplitzHasher::new(&[0; 52]).is_ok());
    }
}
