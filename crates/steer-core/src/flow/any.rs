//! [`AnyHasher`]: one of steer's flow hashers, chosen at run time (an
//! engine's builder, a command-line flag) behind one type, so a dispatcher
//! built once serves whichever hasher the user picked.
//!
//! Invariant: it hashes exactly as the hasher it wraps; the choice costs
//! one predictable branch per packet (the variant never changes while a
//! dispatcher runs).

use super::{FlowHasher, FlowKey, KeyedHasher, ToeplitzHasher};

/// One of steer's flow hashers: [`KeyedHasher`] (the default) or
/// [`ToeplitzHasher`] (to reproduce a NIC's RSS hash), each with its own
/// symmetric mode.
///
/// ```
/// use std::net::Ipv4Addr;
/// use steer_core::flow::{AnyHasher, FlowAddrs, FlowHasher, FlowKey, Ports, ToeplitzHasher, SYMMETRIC_RSS_KEY};
/// let k = FlowKey {
///     addrs: FlowAddrs::V4 { src: Ipv4Addr::new(66, 9, 149, 187), dst: Ipv4Addr::new(161, 142, 100, 80) },
///     protocol: 6,
///     ports: Some(Ports { src: 2794, dst: 1766 }),
/// };
/// let rss: AnyHasher = ToeplitzHasher::default().into();
/// assert_eq!(rss.hash(&k), 0x51cc_c178); // what the NIC computes
/// assert_eq!(rss.name(), "toeplitz");
/// let sym: AnyHasher = ToeplitzHasher::new(&SYMMETRIC_RSS_KEY).unwrap().into();
/// assert_eq!(sym.hash(&k), sym.hash(&k.reversed()));
/// assert_eq!(AnyHasher::default().name(), "keyed");
/// ```
#[derive(Debug, Clone)]
pub enum AnyHasher {
    /// foldhash with a per-process seed ([`KeyedHasher`]).
    Keyed(KeyedHasher),
    /// The RSS Toeplitz hash with a configurable key ([`ToeplitzHasher`]).
    Toeplitz(ToeplitzHasher),
}

impl Default for AnyHasher {
    /// [`KeyedHasher::random`].
    fn default() -> Self {
        Self::Keyed(KeyedHasher::random())
    }
}

impl AnyHasher {
    /// `keyed` or `toeplitz`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Keyed(_) => "keyed",
            Self::Toeplitz(_) => "toeplitz",
        }
    }

    /// Whether the hasher's own symmetric mode is on (a Toeplitz hasher with
    /// a symmetric key hashes both directions alike without it).
    pub fn is_symmetric(&self) -> bool {
        match self {
            Self::Keyed(h) => h.is_symmetric(),
            Self::Toeplitz(h) => h.is_symmetric(),
        }
    }
}

impl From<KeyedHasher> for AnyHasher {
    fn from(h: KeyedHasher) -> Self {
        Self::Keyed(h)
    }
}

impl From<ToeplitzHasher> for AnyHasher {
    fn from(h: ToeplitzHasher) -> Self {
        Self::Toeplitz(h)
    }
}

impl FlowHasher for AnyHasher {
    #[inline(always)]
    fn hash(&self, key: &FlowKey) -> u32 {
        match self {
            Self::Keyed(h) => h.hash(key),
            Self::Toeplitz(h) => h.hash(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{FlowAddrs, Ports};
    use std::net::Ipv6Addr;

    #[test]
    fn hashes_as_the_wrapped_hasher() {
        let k = FlowKey {
            addrs: FlowAddrs::V6 {
                src: Ipv6Addr::LOCALHOST,
                dst: Ipv6Addr::from_bits(0x2001_0db8 << 96 | 9),
            },
            protocol: 17,
            ports: Some(Ports { src: 4000, dst: 53 }),
        };
        let keyed = KeyedHasher::with_seed(3).symmetric(true);
        let any = AnyHasher::from(keyed.clone());
        assert_eq!(any.hash(&k), keyed.hash(&k));
        assert!(any.is_symmetric());
        let t = ToeplitzHasher::default();
        let any = AnyHasher::from(t.clone());
        assert_eq!(any.hash(&k), t.hash(&k));
        assert!(!any.is_symmetric());
        assert_ne!(AnyHasher::default().hash(&k), t.hash(&k));
    }
}
