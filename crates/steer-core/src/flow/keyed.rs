//! The default flow hash: foldhash keyed with a random seed per process
//! (hash-flooding resistance: a sender cannot aim flows at one bucket
//! without knowing the seed), or a fixed seed for deterministic tests.
//!
//! Invariant: every [`KeyedHasher::random`] of one process hashes alike
//! (the seed is drawn once per process), because dispatchers and the
//! application threads that record flows must agree on a flow's hash.
//!
//! The key is fed as a few words, not through `#[derive(Hash)]`, to keep
//! it short: one 128-bit block for IPv4 (both addresses, then protocol,
//! ports: a single folded multiply) and three for IPv6. No family tag is
//! needed: the two families feed different numbers of words, so no IPv4
//! key's input equals an IPv6 key's.
//! Addresses and ports enter in **wire order**: each word is the
//! little-endian reading of the header bytes, so the fast path of
//! [`FlowClassifier`](super::FlowClassifier) feeds plain loads from the
//! frame, with no byte swaps (on little-endian hosts). In
//! symmetric mode the words are put in [`FlowKey::canonical`] order first
//! (so the symmetric hash of a key is the plain hash of its canonical form).

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use foldhash::fast::SeedableRandomState;
use foldhash::SharedSeed;

use super::{nonzero, FlowAddrs, FlowHasher, FlowKey};

static FIXED_SHARED_SEED: SharedSeed = SharedSeed::from_u64(0x5eed_f10e_4a54_0001);

/// The per-process random per-hasher seed (drawn once).
fn process_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| foldhash::fast::RandomState::default().hash_one(0x5eed_u64))
}

/// foldhash over the flow key.
///
/// ```
/// use std::net::Ipv4Addr;
/// use steer_core::flow::{FlowAddrs, FlowHasher, FlowKey, KeyedHasher, Ports};
/// let k = FlowKey {
///     addrs: FlowAddrs::V4 { src: Ipv4Addr::new(1, 1, 1, 1), dst: Ipv4Addr::new(2, 2, 2, 2) },
///     protocol: 6,
///     ports: Some(Ports { src: 1, dst: 2 }),
/// };
/// // Same seed, same hash; the symmetric mode ignores the direction.
/// assert_eq!(KeyedHasher::with_seed(3).hash(&k), KeyedHasher::with_seed(3).hash(&k));
/// let s = KeyedHasher::with_seed(3).symmetric(true);
/// assert_eq!(s.hash(&k), s.hash(&k.reversed()));
/// ```
#[derive(Debug, Clone)]
pub struct KeyedHasher {
    state: SeedableRandomState,
    symmetric: bool,
}

impl Default for KeyedHasher {
    /// [`KeyedHasher::random`].
    fn default() -> Self {
        Self::random()
    }
}

impl KeyedHasher {
    /// A hasher with the process's random seed (the same for every call in
    /// this process, different across processes).
    pub fn random() -> Self {
        Self {
            state: SeedableRandomState::with_seed(process_seed(), SharedSeed::global_random()),
            symmetric: false,
        }
    }

    /// A hasher with a fixed seed (deterministic across runs).
    pub fn with_seed(seed: u64) -> Self {
        Self {
            state: SeedableRandomState::with_seed(seed, &FIXED_SHARED_SEED),
            symmetric: false,
        }
    }

    /// Sets the symmetric mode (both directions of a flow hash alike).
    #[must_use]
    pub fn symmetric(mut self, yes: bool) -> Self {
        self.symmetric = yes;
        self
    }

    /// Whether the symmetric mode is on.
    pub fn is_symmetric(&self) -> bool {
        self.symmetric
    }

    /// The hash of `k` (of its canonical form in symmetric mode), before
    /// [`nonzero`]. The words are built in wire order first; the symmetric
    /// mode then swaps the two endpoints' words in place when the key is
    /// not canonical (the order of [`FlowKey::canonical`]: addresses
    /// compare as big-endian integers, then ports), so both modes share
    /// one hashing tail and the plain mode pays one predictable branch.
    #[inline(always)]
    fn raw(&self, k: &FlowKey) -> u32 {
        let mut h = self.state.build_hasher();
        // `swap_bytes` of a big-endian value is its bytes as a
        // little-endian load reads them.
        let (sp, dp) = (k.src_port(), k.dst_port());
        let mut ports = ((u32::from(sp) << 16) | u32::from(dp)).swap_bytes();
        let tail = |ports: u32| (u64::from(k.protocol) << 32) | u64::from(ports);
        // Each arm writes its own words: the hasher's buffer state stays a
        // compile-time constant, so every write folds to plain arithmetic.
        match k.addrs {
            FlowAddrs::V4 { src, dst } => {
                let (s, d) = (src.to_bits(), dst.to_bits());
                let mut addrs = u64::from(s.swap_bytes()) | (u64::from(d.swap_bytes()) << 32);
                if self.symmetric && (s, sp) > (d, dp) {
                    addrs = addrs.rotate_left(32);
                    ports = ports.rotate_left(16);
                }
                h.write_u64(addrs);
                h.write_u64(tail(ports));
            }
            FlowAddrs::V6 { src, dst } => {
                let (s, d) = (src.to_bits(), dst.to_bits());
                let (mut first, mut second) = (s.swap_bytes(), d.swap_bytes());
                if self.symmetric && (s, sp) > (d, dp) {
                    (first, second) = (second, first);
                    ports = ports.rotate_left(16);
                }
                h.write_u128(first);
                h.write_u128(second);
                h.write_u64(tail(ports));
            }
        }
        // The low half as is: foldhash already ends in a folded multiply
        // (the product's halves xor-ed), so the low bits (the table index)
        // and those above them (the tag the tables keep) are mixed.
        h.finish() as u32
    }
}

impl FlowHasher for KeyedHasher {
    #[inline(always)]
    fn hash(&self, key: &FlowKey) -> u32 {
        nonzero(self.raw(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Ports;
    use std::collections::HashSet;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn key(i: u32) -> FlowKey {
        FlowKey {
            addrs: FlowAddrs::V4 {
                src: Ipv4Addr::from_bits(0x0a00_0000 | i),
                dst: Ipv4Addr::new(10, 255, 0, 1),
            },
            protocol: 17,
            ports: Some(Ports {
                src: (i % 60000) as u16,
                dst: 53,
            }),
        }
    }

    #[test]
    fn seeds_change_the_hash() {
        let k = key(1);
        let a = KeyedHasher::with_seed(1).hash(&k);
        let b = KeyedHasher::with_seed(2).hash(&k);
        assert_ne!(a, b);
        // One seed per process: every random hasher agrees.
        assert_eq!(
            KeyedHasher::random().hash(&k),
            KeyedHasher::random().hash(&k)
        );
        assert_ne!(KeyedHasher::random().hash(&k), a);
    }

    #[test]
    fn spreads_over_low_bits() {
        // 4096 flows over 256 buckets: every bucket used, none overloaded.
        let h = KeyedHasher::with_seed(9);
        let mut buckets = [0u32; 256];
        for i in 0..4096 {
            buckets[(h.hash(&key(i)) & 255) as usize] += 1;
        }
        assert!(buckets.iter().all(|&n| n > 0 && n < 48), "{buckets:?}");
    }

    #[test]
    fn distinct_fields_distinct_hashes() {
        let h = KeyedHasher::with_seed(5);
        let k = key(3);
        let mut seen = HashSet::new();
        seen.insert(h.hash(&k));
        seen.insert(h.hash(&FlowKey { protocol: 6, ..k }));
        seen.insert(h.hash(&FlowKey { ports: None, ..k }));
        seen.insert(h.hash(&k.reversed()));
        assert_eq!(seen.len(), 4);
    }

    #[test]
    fn symmetric_is_the_hash_of_the_canonical_key() {
        let (asym, sym) = (
            KeyedHasher::with_seed(5),
            KeyedHasher::with_seed(5).symmetric(true),
        );
        let v6 = |i: u32| FlowKey {
            addrs: FlowAddrs::V6 {
                src: Ipv6Addr::from_bits(u128::from(i) << 100 | 7),
                dst: Ipv6Addr::from_bits(u128::from(i % 3) << 100 | 7),
            },
            ..key(i)
        };
        for i in 0..512 {
            for k in [key(i), key(i).reversed(), v6(i), v6(i).reversed()] {
                for k in [
                    k,
                    FlowKey { ports: None, ..k },
                    FlowKey {
                        ports: Some(Ports { src: 9, dst: 9 }),
                        ..k
                    },
                ] {
                    assert_eq!(sym.hash(&k), asym.hash(&k.canonical()));
                    assert_eq!(sym.hash(&k), sym.hash(&k.reversed()));
                }
            }
        }
    }
}
