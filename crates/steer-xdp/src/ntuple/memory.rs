//! An ntuple rule table in memory: an [`EthtoolIoctl`] that keeps the rules
//! a NIC would keep, for tests and what-if runs of the ntuple hook (on a
//! veth, say, which has no ntuple filters of its own).
//!
//! It owns the table (location to rule, as the `struct ethtool_rxnfc` that
//! inserted it) and the list of commands it was given. A handle is cheap to
//! clone and every clone sees the same table, so several hooks (one per rx
//! queue) can share one NIC while the test reads it.
//!
//! Invariants: locations are below the table's size; an insert at
//! `RX_CLS_LOC_ANY` takes the lowest free location and writes it back; a
//! delete or read of an empty location fails with `ENOENT`; a table made
//! with [`MemoryNic::unsupported`] fails every command with `EOPNOTSUPP`
//! (still listing it among the commands seen).

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard};

use steer_core::flow::{FlowAddrs, FlowKey, Ports};
use steer_core::packet::ip_proto;

use super::{
    off, EthtoolIoctl, RxNfc, ETHTOOL_GRXCLSRLCNT, ETHTOOL_GRXCLSRULE, ETHTOOL_SRXCLSRLDEL,
    ETHTOOL_SRXCLSRLINS, RX_CLS_LOC_ANY, TCP_V4_FLOW, TCP_V6_FLOW, UDP_V4_FLOW, UDP_V6_FLOW,
};
use crate::sys::ETHTOOL_RXNFC_LEN;

/// One rule in a [`MemoryNic`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NtupleRule {
    /// Where the rule sits in the table.
    pub location: u32,
    /// The flow it matches, when it matches one whole 5-tuple (the rules
    /// of [`NtupleSteering`](super::NtupleSteering)'s moves); `None` for
    /// any other match (a port-wide rule, say).
    pub flow: Option<FlowKey>,
    /// The rx queue it delivers to (`ring_cookie`).
    pub queue: u64,
}

/// The table and what was asked of it.
#[derive(Debug, Default)]
struct Table {
    supported: bool,
    size: u32,
    rules: BTreeMap<u32, [u8; ETHTOOL_RXNFC_LEN]>,
    commands: Vec<u32>,
}

/// An ntuple rule table in memory, behind the ethtool ioctl seam.
///
/// ```
/// use steer_core::flow::{FlowAddrs, FlowKey, Ports};
/// use steer_core::hook::{FlowMove, SteerHook};
/// use steer_xdp::ntuple::{MemoryNic, NtupleSteering};
///
/// let nic = MemoryNic::new(64);
/// // Rx queue i serves CPU i; at most 16 rules.
/// let mut hook = NtupleSteering::with_ioctl("fake0", nic.clone(), |cpu| Some(cpu as u32), 16)?;
/// let key = FlowKey {
///     addrs: FlowAddrs::V4 { src: [10, 0, 0, 2].into(), dst: [10, 0, 0, 1].into() },
///     protocol: 17,
///     ports: Some(Ports { src: 40000, dst: 53 }),
/// };
/// let mv = FlowMove { rxq: 0, bucket: 0, hash: 1, key: Some(key), from: None, to: 3, filter: None };
/// hook.steer(&mv).unwrap();
/// let rules = nic.rules();
/// assert_eq!((rules[0].flow, rules[0].queue), (Some(key), 3));
/// drop(hook); // its rules go with it
/// assert!(nic.rules().is_empty());
/// # Ok::<(), steer_xdp::XdpError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryNic(Arc<Mutex<Table>>);

impl MemoryNic {
    /// A NIC with ntuple filters and room for `size` rules.
    pub fn new(size: u32) -> Self {
        MemoryNic(Arc::new(Mutex::new(Table {
            supported: true,
            size,
            ..Table::default()
        })))
    }

    /// A device without ntuple filters (every command fails with
    /// `EOPNOTSUPP`, as on a veth).
    pub fn unsupported() -> Self {
        MemoryNic::default()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rules installed now, by location.
    pub fn rules(&self) -> Vec<NtupleRule> {
        self.table()
            .rules
            .iter()
            .map(|(&location, nfc)| {
                let n = RxNfc(*nfc);
                NtupleRule {
                    location,
                    flow: exact_flow(&n),
                    queue: n.get_u64(off::FS_RING_COOKIE),
                }
            })
            .collect()
    }

    /// Every command seen, in order (the ethtool command numbers:
    /// `ETHTOOL_GRXCLSRLCNT` 0x2e, `ETHTOOL_GRXCLSRULE` 0x2f,
    /// `ETHTOOL_SRXCLSRLDEL` 0x31, `ETHTOOL_SRXCLSRLINS` 0x32).
    pub fn commands(&self) -> Vec<u32> {
        self.table().commands.clone()
    }

    /// The `struct ethtool_rxnfc` that installed the rule at `location`.
    #[cfg(test)]
    pub(crate) fn raw(&self, location: u32) -> Option<[u8; ETHTOOL_RXNFC_LEN]> {
        self.table().rules.get(&location).copied()
    }
}

impl EthtoolIoctl for MemoryNic {
    fn rxnfc(&mut self, _interface: &str, nfc: &mut [u8; ETHTOOL_RXNFC_LEN]) -> io::Result<()> {
        let mut t = self.table();
        let n = RxNfc(*nfc);
        let cmd = n.get_u32(off::CMD);
        t.commands.push(cmd);
        if !t.supported {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        let enoent = || io::Error::from_raw_os_error(libc::ENOENT);
        match cmd {
            ETHTOOL_GRXCLSRLCNT => {
                nfc[off::DATA..off::DATA + 8].copy_from_slice(&u64::from(t.size).to_ne_bytes());
                let cnt = t.rules.len() as u32;
                nfc[off::RULE_CNT..off::RULE_CNT + 4].copy_from_slice(&cnt.to_ne_bytes());
            }
            ETHTOOL_GRXCLSRULE => {
                let rule = t
                    .rules
                    .get(&n.get_u32(off::FS_LOCATION))
                    .ok_or_else(enoent)?;
                // The flow spec back, as a driver reports it.
                nfc[off::FS_FLOW_TYPE..off::RULE_CNT]
                    .copy_from_slice(&rule[off::FS_FLOW_TYPE..off::RULE_CNT]);
            }
            ETHTOOL_SRXCLSRLINS => {
                let mut loc = n.get_u32(off::FS_LOCATION);
                if loc == RX_CLS_LOC_ANY {
                    loc = (0..t.size)
                        .find(|l| !t.rules.contains_key(l))
                        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSPC))?;
                    nfc[off::FS_LOCATION..off::FS_LOCATION + 4].copy_from_slice(&loc.to_ne_bytes());
                } else if loc >= t.size {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL));
                }
                t.rules.insert(loc, *nfc);
            }
            ETHTOOL_SRXCLSRLDEL => {
                t.rules
                    .remove(&n.get_u32(off::FS_LOCATION))
                    .ok_or_else(enoent)?;
            }
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
        Ok(())
    }
}

/// The 5-tuple a rule matches, when its masks cover all of it.
fn exact_flow(n: &RxNfc) -> Option<FlowKey> {
    let (protocol, v6) = match n.get_u32(off::FS_FLOW_TYPE) {
        TCP_V4_FLOW => (ip_proto::TCP, false),
        UDP_V4_FLOW => (ip_proto::UDP, false),
        TCP_V6_FLOW => (ip_proto::TCP, true),
        UDP_V6_FLOW => (ip_proto::UDP, true),
        _ => return None,
    };
    let (addr_len, ports_at) = if v6 { (16, 32) } else { (4, 8) };
    let h = &n.0[off::FS_H..off::FS_H + ports_at + 4];
    let m = &n.0[off::FS_M..off::FS_M + ports_at + 4];
    if m.iter().any(|&b| b != 0xff) {
        return None;
    }
    let addrs = if v6 {
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&h[..addr_len]);
        dst.copy_from_slice(&h[addr_len..2 * addr_len]);
        FlowAddrs::V6 {
            src: Ipv6Addr::from(src),
            dst: Ipv6Addr::from(dst),
        }
    } else {
        FlowAddrs::V4 {
            src: Ipv4Addr::new(h[0], h[1], h[2], h[3]),
            dst: Ipv4Addr::new(h[4], h[5], h[6], h[7]),
        }
    };
    Some(FlowKey {
        addrs,
        protocol,
        ports: Some(Ports {
            src: u16::from_be_bytes([h[ports_at], h[ports_at + 1]]),
            dst: u16::from_be_bytes([h[ports_at + 2], h[ports_at + 3]]),
        }),
    })
}
