//! The new-flow gate: while a flow budget is full, the XDP program drops the
//! first datagram of every flow the engine has not admitted, before the
//! copy into the UMEM, and lets the same flow's retry through (the layouts
//! and the program's side are in bpf/steer_xdp.h).
//!
//! A spray of new flows from random sources sends one datagram a flow; a
//! client sends its request again when no answer comes. Closing the gate
//! therefore takes the spray off the engine's workers entirely (a map
//! lookup and a store in the kernel's receive path, no frame, no wake-up)
//! and still lets every retrying client reach the engine's admission,
//! which decides as before.
//!
//! [`AdmissionGate`] owns the engine's side: a counter per hash slot of the
//! admitted flows (the `admitted` map, mapped into this process, so
//! counting a flow is one atomic add and no system call), the gate's key,
//! and the open/closed switch.
//!
//! Invariants:
//! - A flow counted with [`AdmissionGate::admit`] is never dropped by the
//!   gate until it is [`AdmissionGate::release`]d: its slot's counter is
//!   above zero (a counter that reaches 255 stays there). Other flows in
//!   the same slot pass too (about `open flows / 2^22` of a spray).
//! - The gate's hash is keyed with a random seed per gate, so a sender
//!   cannot aim at the slots of admitted flows.
//! - Counters never go below zero (a release without an admit is ignored).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Result, XdpError};
use crate::sys::libxdp::{MapFd, MappedMap};

use super::keys::FlowMapKey;

/// Slots of the admitted-flow counters (`STEER_GATE_ADMIT_SLOTS` in
/// bpf/steer_xdp.h): one byte each.
pub const GATE_SLOTS: usize = 1 << 22;
/// `SETTING_GATE`: 1 = closed.
const SETTING_GATE: u32 = 4;
/// `SETTING_GATE_SEED`: the hash's key.
const SETTING_GATE_SEED: u32 = 5;
/// `STAT_GATE_DROPPED` and `STAT_GATE_RETRIES`.
const STAT_GATE_DROPPED: u32 = 7;
const STAT_GATE_RETRIES: u32 = 8;

/// murmur3's 32-bit finalizer (`steer_gate_fmix`).
fn fmix(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// A slot's counter after an admission (`None`: unchanged, it is full
/// for good).
fn counted_up(c: u8) -> Option<u8> {
    c.checked_add(1).filter(|_| c < u8::MAX)
}

/// A slot's counter after a release (`None`: unchanged: zero, or full for
/// good, since a full counter no longer knows how many it holds).
fn counted_down(c: u8) -> Option<u8> {
    if c == u8::MAX {
        None
    } else {
        c.checked_sub(1)
    }
}

/// The gate's hash of a flow key's bytes (`steer_gate_hash`).
fn gate_hash(key: &[u8; 40], seed: u32) -> u32 {
    let h = key.chunks_exact(4).fold(seed, |h, w| {
        let w = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
        (h ^ w).wrapping_mul(0x9e37_79b1).rotate_left(13)
    });
    fmix(h)
}

/// The engine's side of the new-flow gate of one attached program: counts
/// the admitted flows by hash slot and opens or closes the gate. Made by
/// [`SteerProgram::admission_gate`](super::SteerProgram::admission_gate);
/// `Send + Sync`, shared by every thread that admits or closes flows.
///
/// ```no_run
/// use steer_xdp::{FlowMapKey, PortConfig, Proto, XdpPort};
/// let mut port = XdpPort::open(PortConfig::new("veth0").own(Proto::Udp, 7000))?;
/// let gate = port.program().admission_gate()?;
/// let flow = FlowMapKey::new(Proto::Udp, "10.0.0.1:40000".parse()?, "10.0.0.2:7000".parse()?);
/// gate.admit(&flow); // the flow is open: its datagrams always pass
/// gate.set_closed(true)?; // the budget is full: new flows' first datagrams drop in XDP
/// gate.release(&flow); // the flow closed
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AdmissionGate {
    counters: MappedMap,
    settings: MapFd,
    /// The program's per-CPU counters (the gate's are two of them).
    stats: MapFd,
    seed: u32,
    closed: AtomicBool,
}

/// What the gate did, as the program counted it (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateCounts {
    /// First datagrams of unadmitted flows dropped at the closed gate.
    pub dropped: u64,
    /// Retries of dropped flows let through.
    pub retries: u64,
}

impl AdmissionGate {
    /// The gate of a program whose `admitted`, `settings` and `stats` maps
    /// these are: writes a fresh seed and opens the gate.
    pub(crate) fn new(admitted: MapFd, settings: MapFd, stats: MapFd) -> Result<Self> {
        let counters = admitted.mmap(GATE_SLOTS).map_err(|source| XdpError::Map {
            map: "admitted",
            source,
            hint: "the kernel must support mmapable BPF arrays (Linux 5.5 or later)",
        })?;
        let seed = RandomState::new().hash_one(0x5ee0_u64) as u32;
        let gate = Self {
            counters,
            settings,
            stats,
            seed,
            closed: AtomicBool::new(true),
        };
        gate.write(SETTING_GATE_SEED, seed)?;
        gate.set_closed(false)?;
        Ok(gate)
    }

    fn write(&self, setting: u32, value: u32) -> Result<()> {
        self.settings
            .update(&setting.to_ne_bytes(), &value.to_ne_bytes(), 0)
            .map_err(|source| XdpError::Map {
                map: "settings",
                source,
                hint: "check `bpftool map`",
            })
    }

    /// The slot of `flow` in the gate's tables.
    pub fn slot(&self, flow: &FlowMapKey) -> usize {
        gate_hash(&flow.to_bytes(), self.seed) as usize & (GATE_SLOTS - 1)
    }

    /// Counts `flow` as admitted: its datagrams pass the closed gate.
    pub fn admit(&self, flow: &FlowMapKey) {
        let _ = self.counters.bytes()[self.slot(flow)].fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            counted_up,
        );
    }

    /// Uncounts `flow` (it closed or was evicted).
    pub fn release(&self, flow: &FlowMapKey) {
        let _ = self.counters.bytes()[self.slot(flow)].fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            counted_down,
        );
    }

    /// Flows counted in `flow`'s slot (it and any sharing the slot; 255:
    /// that many or more, for good).
    pub fn admitted_in_slot(&self, flow: &FlowMapKey) -> u8 {
        self.counters.bytes()[self.slot(flow)].load(Ordering::Relaxed)
    }

    /// Closes (`true`) or opens the gate; a system call only on a change.
    pub fn set_closed(&self, closed: bool) -> Result<()> {
        if self.closed.swap(closed, Ordering::AcqRel) == closed {
            return Ok(());
        }
        let written = self.write(SETTING_GATE, u32::from(closed));
        if written.is_err() {
            self.closed.store(!closed, Ordering::Release);
        }
        written
    }

    /// Whether the gate is closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The program's counts of what the gate dropped and let through
    /// (zeros when the counters cannot be read).
    pub fn counts(&self) -> GateCounts {
        let sum = |stat: u32| -> u64 {
            self.stats
                .lookup_per_cpu(&stat.to_ne_bytes())
                .map_or(0, |v| v.iter().sum())
        };
        GateCounts {
            dropped: sum(STAT_GATE_DROPPED),
            retries: sum(STAT_GATE_RETRIES),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_keyed_and_spreads_neighbouring_ports() {
        let key = |sport: u16| {
            FlowMapKey::new(
                crate::Proto::Udp,
                std::net::SocketAddr::from(([10, 0, 0, 1], sport)),
                std::net::SocketAddr::from(([10, 0, 0, 2], 7000)),
            )
            .to_bytes()
        };
        assert_ne!(gate_hash(&key(1), 1), gate_hash(&key(1), 2));
        let slots: std::collections::HashSet<usize> = (0..4096)
            .map(|p| gate_hash(&key(p), 7) as usize & (GATE_SLOTS - 1))
            .collect();
        // 4096 keys in 2^22 slots: a handful of collisions at most.
        assert!(slots.len() > 4080, "{}", slots.len());
    }

    #[test]
    fn a_slot_never_goes_below_zero_and_a_full_one_stays_full() {
        assert_eq!(counted_down(0), None);
        assert_eq!(counted_up(0), Some(1));
        assert_eq!(counted_down(1), Some(0));
        assert_eq!(counted_up(254), Some(255));
        assert_eq!(counted_up(255), None);
        assert_eq!(counted_down(255), None);
    }

    #[test]
    fn fmix_matches_murmur3() {
        // murmur3's fmix32 of 1, as the C reference gives.
        assert_eq!(fmix(0), 0);
        assert_eq!(fmix(1), 0x514e_28b7);
    }
}
