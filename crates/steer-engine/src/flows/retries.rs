//! Which new flows were refused a moment ago: a retry is told from a first
//! try, so the budget can give its paced evictions to retries first.
//!
//! A spray of new flows sends one datagram from each of many sources and
//! ports and never sends it again; a client that was refused sends the
//! same 5-tuple again when its request times out. [`Refused`] remembers
//! the flows it was told of in a fixed table (direct-mapped: a slot per
//! hash, a newer refusal takes the slot over), so at 20,000 refusals a
//! second a refused flow is remembered for about six seconds, and the
//! memory never grows.
//!
//! Invariants: a key never remembered is taken for a retry only on a
//! fingerprint collision (32 bits, within its slot): about one in four
//! billion; a remembered key is forgotten only when a later refusal takes
//! its slot. The hash is keyed per table (a sender cannot aim at slots).

use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hash, Hasher};

use steer_core::flow::FlowKey;

/// Slots of the table (512 KiB of fingerprints).
pub(crate) const REFUSED_SLOTS: usize = 1 << 17;

/// Recently refused flows, by fingerprint.
pub(crate) struct Refused {
    slots: Box<[u32]>,
    /// The hash's key: random per table, fixed in tests (so a test's
    /// slot collisions are the same on every run).
    seed: u64,
}

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refused")
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl Default for Refused {
    fn default() -> Self {
        let seed = if cfg!(test) {
            0x5eed
        } else {
            RandomState::new().hash_one(0u64)
        };
        Self {
            slots: vec![0; REFUSED_SLOTS].into_boxed_slice(),
            seed,
        }
    }
}

impl Refused {
    /// The slot and the fingerprint (never 0, the empty slot) of `key`.
    fn place(&self, key: &FlowKey) -> (usize, u32) {
        let mut hasher = DefaultHasher::new();
        hasher.write_u64(self.seed);
        key.hash(&mut hasher);
        let h = hasher.finish();
        let slot = (h as usize) & (self.slots.len() - 1);
        (slot, ((h >> 32) as u32) | 1)
    }

    /// Remembers that a flow of `key` was refused.
    pub(crate) fn remember(&mut self, key: &FlowKey) {
        let (slot, print) = self.place(key);
        self.slots[slot] = print;
    }

    /// Whether a flow of `key` was refused a moment ago (kept).
    pub(crate) fn contains(&self, key: &FlowKey) -> bool {
        let (slot, print) = self.place(key);
        self.slots[slot] == print
    }

    /// Whether a flow of `key` was refused a moment ago (and forgets it:
    /// one retry is one retry).
    pub(crate) fn take(&mut self, key: &FlowKey) -> bool {
        let (slot, print) = self.place(key);
        let hit = self.slots[slot] == print;
        if hit {
            self.slots[slot] = 0;
        }
        hit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steer_core::flow::{FlowAddrs, Ports};

    fn key(sport: u16) -> FlowKey {
        FlowKey {
            addrs: FlowAddrs::V4 {
                src: [198, 19, 0, 1].into(),
                dst: [192, 0, 2, 1].into(),
            },
            protocol: 17,
            ports: Some(Ports {
                src: sport,
                dst: 7000,
            }),
        }
    }

    #[test]
    fn a_refused_flow_is_known_again_once_and_others_are_not() {
        let mut r = Refused::default();
        assert!(!r.take(&key(1000)), "never refused");
        r.remember(&key(1000));
        assert!(!r.take(&key(1001)), "another port is another flow");
        assert!(r.contains(&key(1000)) && r.contains(&key(1000)), "kept");
        assert!(r.take(&key(1000)), "its retry");
        assert!(!r.take(&key(1000)), "one retry is one retry");
    }

    #[test]
    fn a_spray_forgets_old_refusals_without_growing() {
        let mut r = Refused::default();
        r.remember(&key(1));
        // A spray of more distinct flows than slots: the first is most
        // likely overwritten, and never misread for another.
        let mut false_hits = 0;
        for i in 0..(REFUSED_SLOTS as u32) {
            let mut k = key((i % 60_000) as u16 + 2);
            k.addrs = FlowAddrs::V4 {
                src: std::net::Ipv4Addr::from(0xc613_0000 | (i >> 8)),
                dst: [192, 0, 2, 1].into(),
            };
            false_hits += u32::from(r.take(&k));
            r.remember(&k);
        }
        assert_eq!(false_hits, 0);
        assert_eq!(r.slots.len(), REFUSED_SLOTS);
    }
}
