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
//!   above zero. Other flows in the same slot pass too (about
//!   `open flows / 2^20` of a spray).
//! - The gate's hash is keyed with a random seed per gate, so a sender
//!   cannot aim at the slots of admitted flows.
//! - Counters never go below zero (a release without an admit is ignored).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Result, XdpError};
use crate::sys::libxdp::{MapFd, MappedMap};

use super::keys::FlowMapKey;

/// Slots of the gate's tables (`STEER_GATE_SLOTS` in bpf/steer_xdp.h).
pub const GATE_SLOTS: usize = 1 << 20;
/// `SETTING_GATE`: 1 = closed.
const SETTING_GATE: u32 = 4;
/// `SETTING_GATE_SEED`: the hash's key.
const SETTING_GATE_SEED: u32 = 5;

/// murmur3's 32-bit finalizer (`steer_gate_fmix`).
fn fmix(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
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
    seed: u32,
    closed: AtomicBool,
}

impl AdmissionGate {
    /// The gate of a program whose `admitted` map is `admitted` and whose
    /// settings map is `settings`: writes a fresh seed and opens the gate.
    pub(crate) fn new(admitted: MapFd, settings: MapFd) -> Result<Self> {
        let counters = admitted
            .mmap(GATE_SLOTS * 4)
            .map_err(|source| XdpError::Map {
                map: "admitted",
                source,
                hint: "the kernel must support mmapable BPF arrays (Linux 5.5 or later)",
            })?;
        let seed = RandomState::new().hash_one(0x5ee0_u64) as u32;
        let gate = Self {
            counters,
            settings,
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
        self.counters.words()[self.slot(flow)].fetch_add(1, Ordering::Relaxed);
    }

    /// Uncounts `flow` (it closed or was evicted).
    pub fn release(&self, flow: &FlowMapKey) {
        let _ = self.counters.words()[self.slot(flow)].fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |c| c.checked_sub(1),
        );
    }

    /// Flows counted in `flow`'s slot (it and any sharing the slot).
    pub fn admitted_in_slot(&self, flow: &FlowMapKey) -> u32 {
        self.counters.words()[self.slot(flow)].load(Ordering::Relaxed)
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
        // 4096 keys in 2^20 slots: a handful of collisions at most.
        assert!(slots.len() > 4080, "{}", slots.len());
    }

    #[test]
    fn fmix_matches_murmur3() {
        // murmur3's fmix32 of 1, as the C reference gives.
        assert_eq!(fmix(0), 0);
        assert_eq!(fmix(1), 0x514e_28b7);
    }
}
