//! The ethtool ntuple steering backend: a [`SteerHook`](steer_core::hook::SteerHook) that asks the NIC to
//! deliver a moved flow (its exact 5-tuple) to the rx queue serving the
//! flow's new CPU, with `SIOCETHTOOL` `ETHTOOL_SRXCLSRLINS` /
//! `ETHTOOL_SRXCLSRLDEL` (what the kernel's ARFS asks a driver for through
//! `ndo_rx_flow_steer`, requested from userspace).
//!
//! The ioctl goes through an [`EthtoolIoctl`](crate::ntuple::EthtoolIoctl) (the system call, or a fake in
//! tests). [`NtupleSteering::new`](crate::ntuple::NtupleSteering::new) probes the device (`ETHTOOL_GRXCLSRLCNT`)
//! and refuses devices without ntuple filters (veth, most virtual NICs) with
//! a one-line error. Rules are bounded by a budget (a NIC holds a few
//! thousand); a move beyond it fails with [`HookError::Full`](steer_core::hook::HookError::Full) and the flow is
//! steered in software only. A rule is updated in place when its flow moves
//! again, and deleted when the rx table's sweep expires the flow
//! ([`SteerHook::remove`](steer_core::hook::SteerHook::remove)).
//!
//! Stop and takeover: a hook's drop deletes its rules, so a stopped engine
//! leaves the NIC's table as it found it. A process killed with `-9` never
//! drops its hooks, so each hook also records where its rules sit, in a
//! small file next to the interface's owner lock (module `record`). A new
//! hook on the interface takes (or, inside an engine, shares) that owner
//! lock; holding it, it knows the writers of the other records are gone,
//! and before it installs anything it deletes each recorded rule that is
//! still on the NIC and still matches the recorded flow, through the same
//! ioctl seam, logging the count once. Records never make a start fail: a
//! record that cannot be written, read or parsed is logged and the hook
//! steers on. Port-wide rules ([`NtupleSteering::insert_port`](crate::ntuple::NtupleSteering::insert_port)) are their
//! caller's, not recorded.
//!
//! [`MemoryNic`](crate::ntuple::MemoryNic) is a rule table in memory behind
//! the same seam, for tests and what-if runs.
//!
//! Invariants: every rule this backend inserted and has not deleted is in
//! its `rules` set (at most `budget` of them) and, when it has a record, in
//! its record; a failed insert leaves no rule behind; the struct layout
//! written is `struct ethtool_rxnfc` of x86_64 and aarch64 (192 bytes).

mod memory;
mod record;

use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

pub use memory::{MemoryNic, NtupleRule};
use record::{RecordPlace, RuleRecord};

use steer_core::cpu::CpuId;
use steer_core::flow::{FlowAddrs, FlowKey};
use steer_core::hook::{FilterId, FlowMove, HookError, SteerHook};
use steer_core::packet::ip_proto;

use crate::{
    config::Proto,
    error::{Result, XdpError},
    owner_lock::InterfaceLock,
    sys::ETHTOOL_RXNFC_LEN,
};

const ETHTOOL_GRXCLSRLCNT: u32 = 0x2e;
const ETHTOOL_GRXCLSRULE: u32 = 0x2f;
const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
const ETHTOOL_SRXCLSRLINS: u32 = 0x32;
const TCP_V4_FLOW: u32 = 0x01;
const UDP_V4_FLOW: u32 = 0x02;
const TCP_V6_FLOW: u32 = 0x05;
const UDP_V6_FLOW: u32 = 0x06;
const RX_CLS_LOC_ANY: u32 = 0xffff_ffff;

/// The `SIOCETHTOOL` ioctl with a `struct ethtool_rxnfc`: the seam between
/// the backend's logic and the system call.
pub trait EthtoolIoctl: Send {
    /// Runs the command in `nfc` (its first u32) on `interface`; the kernel
    /// reads and writes `nfc` in place.
    fn rxnfc(&mut self, interface: &str, nfc: &mut [u8; ETHTOOL_RXNFC_LEN]) -> io::Result<()>;
}

/// The real ioctl.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemEthtool;

impl EthtoolIoctl for SystemEthtool {
    fn rxnfc(&mut self, interface: &str, nfc: &mut [u8; ETHTOOL_RXNFC_LEN]) -> io::Result<()> {
        crate::sys::ethtool_rxnfc(interface, nfc)
    }
}

/// `struct ethtool_rxnfc` (192 bytes with its `ethtool_rx_flow_spec`), built
/// and read by byte offset.
struct RxNfc([u8; ETHTOOL_RXNFC_LEN]);

impl RxNfc {
    fn command(cmd: u32) -> Self {
        let mut n = RxNfc([0; ETHTOOL_RXNFC_LEN]);
        n.put(off::CMD, &cmd.to_ne_bytes());
        n
    }
    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }
    fn get_u32(&self, at: usize) -> u32 {
        u32::from_ne_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }
    fn get_u64(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[at..at + 8]);
        u64::from_ne_bytes(b)
    }
}

/// Offsets inside `struct ethtool_rxnfc` (x86_64 and aarch64 layout):
/// `cmd`, `flow_type`, `data`, then `fs` (`ethtool_rx_flow_spec`) at 16:
/// its `flow_type`, the header union `h_u` at 20, the mask union `m_u` at
/// 92, `ring_cookie` at 168, `location` at 176; `rule_cnt` at 184.
mod off {
    pub const CMD: usize = 0;
    pub const DATA: usize = 8;
    pub const FS_FLOW_TYPE: usize = 16;
    pub const FS_H: usize = 20;
    pub const FS_M: usize = 92;
    pub const FS_RING_COOKIE: usize = 168;
    pub const FS_LOCATION: usize = 176;
    pub const RULE_CNT: usize = 184;
}

/// Fills the 5-tuple match of `key` into the header (`h`) and mask (`m`)
/// unions: `ethtool_tcpip4_spec` (ip4src 0, ip4dst 4, psrc 8, pdst 10) or
/// `ethtool_tcpip6_spec` (ip6src 0, ip6dst 16, psrc 32, pdst 34). None
/// when the key is not TCP or UDP with ports.
fn put_tuple(nfc: &mut RxNfc, key: &FlowKey) -> Option<()> {
    let ports = key.ports?;
    let v6 = matches!(key.addrs, FlowAddrs::V6 { .. });
    let flow_type = match (key.protocol, v6) {
        (ip_proto::TCP, false) => TCP_V4_FLOW,
        (ip_proto::UDP, false) => UDP_V4_FLOW,
        (ip_proto::TCP, true) => TCP_V6_FLOW,
        (ip_proto::UDP, true) => UDP_V6_FLOW,
        _ => return None,
    };
    nfc.put(off::FS_FLOW_TYPE, &flow_type.to_ne_bytes());
    let (ports_at, addrs): (usize, Vec<u8>) = match key.addrs {
        FlowAddrs::V4 { src, dst } => (8, [src.octets(), dst.octets()].concat()),
        FlowAddrs::V6 { src, dst } => (32, [src.octets(), dst.octets()].concat()),
    };
    nfc.put(off::FS_H, &addrs);
    nfc.put(off::FS_M, &vec![0xff; addrs.len()]);
    nfc.put(off::FS_H + ports_at, &ports.src.to_be_bytes());
    nfc.put(off::FS_H + ports_at + 2, &ports.dst.to_be_bytes());
    nfc.put(off::FS_M + ports_at, &[0xff; 4]);
    Some(())
}

/// What identifies a rule's match across a crash: its flow type (without
/// the extension flags) and the addresses and ports it matches (FNV-1a).
/// Drivers report these back as they were given.
fn fingerprint(nfc: &RxNfc) -> u64 {
    let flow_type = nfc.get_u32(off::FS_FLOW_TYPE) & 0xff;
    let tuple = match flow_type {
        TCP_V6_FLOW | UDP_V6_FLOW => 36,
        _ => 12,
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in flow_type
        .to_le_bytes()
        .iter()
        .chain(&nfc.0[off::FS_H..off::FS_H + tuple])
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Ntuple rules on one interface, as a steering hook.
///
/// ```no_run
/// use steer_xdp::ntuple::NtupleSteering;
/// // Rx queue i is served by CPU i; at most 1024 rules.
/// let hook = NtupleSteering::new("eth1", |cpu| Some(cpu as u32), 1024)?;
/// # Ok::<(), steer_xdp::XdpError>(())
/// ```
#[doc(alias = "ETHTOOL_SRXCLSRLINS")]
#[doc(alias = "ntuple")]
#[doc(alias = "ndo_rx_flow_steer")]
pub struct NtupleSteering<I: EthtoolIoctl = SystemEthtool> {
    interface: String,
    ioctl: I,
    queue_of: Box<dyn Fn(CpuId) -> Option<u32> + Send>,
    budget: usize,
    rules: BTreeSet<u32>,
    steering_calls: u64,
    errors: u64,
    /// Where the rules are recorded for the next owner (none: unrecorded).
    record: Option<RuleRecord>,
    /// Rules a dead owner left, removed at start.
    removed_at_start: usize,
    /// The interface's owner lock, while the record is kept.
    _owner: Option<Arc<InterfaceLock>>,
}

impl<I: EthtoolIoctl> std::fmt::Debug for NtupleSteering<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NtupleSteering")
            .field("interface", &self.interface)
            .field("budget", &self.budget)
            .field("rules", &self.rules.len())
            .field("steering_calls", &self.steering_calls)
            .finish_non_exhaustive()
    }
}

impl NtupleSteering<SystemEthtool> {
    /// The backend for `interface`: a moved flow goes to rx queue
    /// `queue_of(cpu)` of its new CPU (no queue: software steering only); at
    /// most `budget` rules (also at most what the NIC's rule table holds).
    /// Fails with a one-line error on a device without ntuple filters.
    pub fn new(
        interface: &str,
        queue_of: impl Fn(CpuId) -> Option<u32> + Send + 'static,
        budget: usize,
    ) -> Result<Self> {
        crate::sys::ifindex(interface)?;
        Self::with_ioctl(interface, SystemEthtool, queue_of, budget)
    }
}

impl<I: EthtoolIoctl> NtupleSteering<I> {
    /// [`NtupleSteering::new`] over any ioctl layer (a fake such as
    /// [`MemoryNic`], in tests).
    ///
    /// When `interface` exists, the hook takes its owner lock (shared with
    /// an engine of this process that holds it; refused while another
    /// process holds it, and then the hook's rules are not recorded),
    /// removes the rules a dead owner recorded, and records its own.
    pub fn with_ioctl(
        interface: &str,
        ioctl: I,
        queue_of: impl Fn(CpuId) -> Option<u32> + Send + 'static,
        budget: usize,
    ) -> Result<Self> {
        Self::build(interface, ioctl, Box::new(queue_of), budget, Owner::Lock)
    }

    fn build(
        interface: &str,
        mut ioctl: I,
        queue_of: Box<dyn Fn(CpuId) -> Option<u32> + Send>,
        budget: usize,
        owner: Owner,
    ) -> Result<Self> {
        let mut count = RxNfc::command(ETHTOOL_GRXCLSRLCNT);
        ioctl
            .rxnfc(interface, &mut count.0)
            .map_err(|e| map_err(interface, e, "reading the ntuple rule table"))?;
        let (lock, place) = owner.place(interface);
        let removed = match &place {
            Some(place) => remove_stale(interface, &mut ioctl, place),
            None => 0,
        };
        let record = place.and_then(|place| match RuleRecord::create(&place) {
            Ok(record) => Some(record),
            Err(e) => {
                tracing::warn!(interface, dir = %place.dir.display(), error = %e, "cannot record the ntuple rules: after a crash the next owner will not find them");
                None
            }
        });
        // `data` is the table's size when the driver says (0: unknown).
        let table = usize::try_from(count.get_u64(off::DATA)).unwrap_or(usize::MAX);
        let used = (count.get_u32(off::RULE_CNT) as usize).saturating_sub(removed);
        let room = if table == 0 {
            budget
        } else {
            table.saturating_sub(used)
        };
        Ok(NtupleSteering {
            interface: interface.into(),
            ioctl,
            queue_of,
            budget: budget.min(room),
            rules: BTreeSet::new(),
            steering_calls: 0,
            errors: 0,
            _owner: record.as_ref().and(lock),
            record,
            removed_at_start: removed,
        })
    }

    /// Rules a dead owner of the interface left on the NIC that this hook
    /// removed when it was made.
    pub fn removed_at_start(&self) -> usize {
        self.removed_at_start
    }

    /// Ends the hook as a killed process would: its rules stay on the NIC
    /// and in its record, and the next hook made on the interface (in this
    /// process or another, holding the owner lock) removes them. For tests
    /// and what-if runs of a takeover.
    pub fn abandon(mut self) {
        self.rules.clear();
        if let Some(record) = self.record.take() {
            record.abandon();
        }
    }

    /// The most rules this backend will hold.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Rules installed now.
    pub fn rules(&self) -> usize {
        self.rules.len()
    }

    /// Inserts and deletes attempted (steering-hook calls that reached the
    /// device).
    pub fn steering_calls(&self) -> u64 {
        self.steering_calls
    }

    /// Calls that failed.
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// Installs (or, at `location`, replaces) the rule sending `key` to
    /// `queue`; returns the rule's location.
    fn insert(&mut self, key: &FlowKey, queue: u32, location: Option<u32>) -> Result<u32> {
        let mut nfc = RxNfc::command(ETHTOOL_SRXCLSRLINS);
        put_tuple(&mut nfc, key).ok_or_else(|| {
            XdpError::Config("ntuple rules match TCP or UDP flows with ports".into())
        })?;
        nfc.put(off::FS_RING_COOKIE, &u64::from(queue).to_ne_bytes());
        nfc.put(
            off::FS_LOCATION,
            &location.unwrap_or(RX_CLS_LOC_ANY).to_ne_bytes(),
        );
        self.steering_calls += 1;
        self.ioctl
            .rxnfc(&self.interface, &mut nfc.0)
            .map_err(|e| map_err(&self.interface, e, "ethtool ntuple rule insertion"))?;
        let location = nfc.get_u32(off::FS_LOCATION);
        if let Some(record) = &mut self.record {
            record.record(location, fingerprint(&nfc));
        }
        Ok(location)
    }

    /// Removes the rule at `location`.
    fn delete(&mut self, location: u32) -> Result<()> {
        self.steering_calls += 1;
        delete_rule(&self.interface, &mut self.ioctl, location)
            .map_err(|e| map_err(&self.interface, e, "ethtool ntuple rule deletion"))?;
        if let Some(record) = &mut self.record {
            record.forget(location);
        }
        Ok(())
    }

    /// Steers IPv4 `proto` traffic to destination `port` onto rx `queue`
    /// (a port-wide rule, outside the hook's budget); returns the rule's
    /// location, for [`Self::remove_rule`].
    pub fn insert_port(&mut self, proto: Proto, port: u16, queue: u32) -> Result<u32> {
        let mut nfc = RxNfc::command(ETHTOOL_SRXCLSRLINS);
        let flow = if proto == Proto::Udp {
            UDP_V4_FLOW
        } else {
            TCP_V4_FLOW
        };
        nfc.put(off::FS_FLOW_TYPE, &flow.to_ne_bytes());
        nfc.put(off::FS_H + 10, &port.to_be_bytes());
        nfc.put(off::FS_M + 10, &[0xff, 0xff]);
        nfc.put(off::FS_RING_COOKIE, &u64::from(queue).to_ne_bytes());
        nfc.put(off::FS_LOCATION, &RX_CLS_LOC_ANY.to_ne_bytes());
        self.steering_calls += 1;
        self.ioctl
            .rxnfc(&self.interface, &mut nfc.0)
            .map_err(|e| map_err(&self.interface, e, "ethtool ntuple rule insertion"))?;
        Ok(nfc.get_u32(off::FS_LOCATION))
    }

    /// Removes the rule at `location` (one [`Self::insert_port`] made).
    pub fn remove_rule(&mut self, location: u32) -> Result<()> {
        self.steering_calls += 1;
        delete_rule(&self.interface, &mut self.ioctl, location)
            .map_err(|e| map_err(&self.interface, e, "ethtool ntuple rule deletion"))
    }
}

/// `ETHTOOL_SRXCLSRLDEL` of the rule at `location`.
fn delete_rule<I: EthtoolIoctl>(interface: &str, ioctl: &mut I, location: u32) -> io::Result<()> {
    let mut nfc = RxNfc::command(ETHTOOL_SRXCLSRLDEL);
    nfc.put(off::FS_LOCATION, &location.to_ne_bytes());
    ioctl.rxnfc(interface, &mut nfc.0)
}

/// Whose records a new hook reads and where it writes its own.
enum Owner {
    /// Next to the interface's owner lock, taken or shared.
    Lock,
    /// Under a given place, as if its lock were held (unit tests).
    #[cfg(test)]
    At(RecordPlace),
}

impl Owner {
    /// The lock held (if taken here) and where the records go; none when
    /// the lock is not this process's to take (the hook is unrecorded).
    fn place(self, interface: &str) -> (Option<Arc<InterfaceLock>>, Option<RecordPlace>) {
        match self {
            Owner::Lock => match InterfaceLock::acquire_noting(interface) {
                Ok((lock, _)) => {
                    let place = place_of(lock.path());
                    (Some(lock), place)
                }
                Err(e @ XdpError::UnknownInterface { .. }) => {
                    tracing::debug!(interface, error = %e, "ntuple rules unrecorded");
                    (None, None)
                }
                Err(e) => {
                    tracing::warn!(interface, error = %e, "ntuple rules unrecorded: after a crash the next owner will not find them");
                    (None, None)
                }
            },
            #[cfg(test)]
            Owner::At(place) => (None, Some(place)),
        }
    }
}

/// The record place of the owner lock at `lock`: its directory, and its
/// file name without `.lock`.
fn place_of(lock: &Path) -> Option<RecordPlace> {
    let name = lock.file_name()?.to_str()?;
    Some(RecordPlace {
        dir: lock.parent()?.to_path_buf(),
        stem: name.strip_suffix(".lock").unwrap_or(name).to_owned(),
    })
}

/// One hook at a time reads and clears the records of a dead owner.
static TAKEOVER: Mutex<()> = Mutex::new(());

/// Deletes the rules the records under `place` list (those not held by a
/// live hook of this process) that are still on the NIC and still match
/// the recorded flow, and removes the records; returns how many rules it
/// deleted. A rule whose location now holds another match is someone
/// else's and stays; a driver that cannot read a rule back gets the
/// delete anyway (the location was the dead owner's).
fn remove_stale<I: EthtoolIoctl>(interface: &str, ioctl: &mut I, place: &RecordPlace) -> usize {
    let _one = TAKEOVER.lock().unwrap_or_else(|e| e.into_inner());
    let (mut removed, mut foreign, mut failed) = (0usize, 0usize, 0usize);
    for stale in place.stale() {
        let mut left = false;
        for &(location, print) in &stale.rules {
            let mut get = RxNfc::command(ETHTOOL_GRXCLSRULE);
            get.put(off::FS_LOCATION, &location.to_ne_bytes());
            match ioctl.rxnfc(interface, &mut get.0) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Ok(()) if fingerprint(&get) != print => {
                    foreign += 1;
                    continue;
                }
                _ => {}
            }
            match delete_rule(interface, ioctl, location) {
                Ok(()) => removed += 1,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    failed += 1;
                    left = true;
                    tracing::warn!(interface, location, error = %e, "deleting an ntuple rule a dead owner left failed");
                }
            }
        }
        if !left {
            let _ = std::fs::remove_file(&stale.path);
        }
    }
    if removed + foreign + failed > 0 {
        tracing::info!(
            interface,
            removed,
            left_foreign = foreign,
            failed,
            "ntuple rules a dead owner left on the NIC removed"
        );
    }
    removed
}

fn map_err(interface: &str, e: io::Error, what: &'static str) -> XdpError {
    if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) {
        XdpError::NotSupported {
            what,
            interface: interface.to_owned(),
            source: e,
            hint: "the device has no ntuple filters (virtual devices such as veth never do; on a \
                   NIC try `ethtool -K <if> ntuple on`); steer still steers in software",
        }
    } else {
        XdpError::io("SIOCETHTOOL", e)
    }
}

impl<I: EthtoolIoctl> SteerHook for NtupleSteering<I> {
    /// Sends `mv.key` to the rx queue of `mv.to`: a new rule, or the
    /// bucket's rule (`mv.filter`) rewritten in place.
    fn steer(&mut self, mv: &FlowMove) -> std::result::Result<Option<FilterId>, HookError> {
        let key = mv.key.ok_or(HookError::Unsupported)?;
        let queue = (self.queue_of)(mv.to).ok_or(HookError::Unsupported)?;
        let existing = mv.filter.map(|f| f.0).filter(|l| self.rules.contains(l));
        if existing.is_none() && self.rules.len() >= self.budget {
            self.errors += 1;
            return Err(HookError::Full);
        }
        match self.insert(&key, queue, existing) {
            Ok(location) => {
                if let Some(old) = existing.filter(|&old| old != location) {
                    self.rules.remove(&old);
                }
                self.rules.insert(location);
                Ok(Some(FilterId(location)))
            }
            Err(e) => {
                self.errors += 1;
                Err(match e {
                    XdpError::NotSupported { .. } => HookError::Unsupported,
                    XdpError::Io { source, .. } => match source.raw_os_error() {
                        Some(libc::ENOSPC) => HookError::Full,
                        errno => HookError::Os(errno.unwrap_or(0)),
                    },
                    _ => HookError::Unsupported,
                })
            }
        }
    }

    /// Deletes the rule of an expired flow.
    fn remove(&mut self, _rxq: u32, _bucket: usize, filter: FilterId) {
        if self.rules.remove(&filter.0) {
            if let Err(e) = self.delete(filter.0) {
                self.errors += 1;
                tracing::warn!(interface = %self.interface, error = %e, "deleting an ntuple rule failed");
            }
        }
    }
}

impl<I: EthtoolIoctl> NtupleSteering<I> {
    /// Forgets the installed rules, so that the drop leaves them on the NIC
    /// (for a test that reads them afterwards).
    #[cfg(test)]
    fn leave_rules(mut self) {
        self.rules.clear();
    }
}

impl<I: EthtoolIoctl> Drop for NtupleSteering<I> {
    /// Deletes the rules still installed: a stopped engine leaves the NIC's
    /// table as it found it. The record goes too, unless a delete failed
    /// (the next owner tries again).
    fn drop(&mut self) {
        let mut left = false;
        for location in std::mem::take(&mut self.rules) {
            if let Err(e) = self.delete(location) {
                left = true;
                tracing::warn!(interface = %self.interface, location, error = %e, "deleting an ntuple rule at stop failed");
            }
        }
        if let Some(record) = self.record.take() {
            record.close(left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use steer_core::flow::Ports;

    /// A name no test machine's interface has: the hooks in these tests
    /// take no owner lock and keep no record, unless a test gives one.
    const FAKE_IF: &str = "nosuch-eth1";

    fn tcp4(sport: u16) -> FlowKey {
        FlowKey {
            addrs: FlowAddrs::V4 {
                src: Ipv4Addr::new(10, 0, 0, 2),
                dst: Ipv4Addr::new(10, 0, 0, 1),
            },
            protocol: ip_proto::TCP,
            ports: Some(Ports {
                src: sport,
                dst: 443,
            }),
        }
    }

    fn mv(key: FlowKey, to: CpuId, filter: Option<FilterId>) -> FlowMove {
        FlowMove {
            rxq: 0,
            bucket: 0,
            hash: 1,
            key: Some(key),
            from: None,
            to,
            filter,
        }
    }

    #[test]
    fn the_rules_go_with_the_hook() {
        let nic = MemoryNic::new(16);
        {
            let mut hook =
                NtupleSteering::with_ioctl(FAKE_IF, nic.clone(), |c| Some(c as u32), 8).unwrap();
            hook.steer(&mv(tcp4(40000), 1, None)).unwrap().unwrap();
            hook.steer(&mv(tcp4(40001), 0, None)).unwrap().unwrap();
            assert_eq!(hook.rules(), 2);
        }
        assert!(nic.rules().is_empty(), "rules left on the NIC at stop");
    }

    #[test]
    fn devices_without_ntuple_filters_are_refused_at_start() {
        let nic = MemoryNic::unsupported();
        let err =
            NtupleSteering::with_ioctl("veth0", nic.clone(), |c| Some(c as u32), 8).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("no ntuple filters") && msg.contains("veth0"),
            "{msg}"
        );
    }

    #[test]
    fn a_moved_flow_gets_an_exact_rule_updated_in_place_and_removed_on_expiry() {
        let nic = MemoryNic::new(16);
        {
            let mut hook =
                NtupleSteering::with_ioctl(FAKE_IF, nic.clone(), |c| Some(c as u32 * 2), 8)
                    .unwrap();
            let f = hook.steer(&mv(tcp4(40000), 1, None)).unwrap().unwrap();
            // Moved again: the same rule, rewritten.
            assert_eq!(hook.steer(&mv(tcp4(40000), 3, Some(f))), Ok(Some(f)));
            assert_eq!(hook.rules(), 1);
            hook.remove(0, 0, f);
            assert_eq!((hook.rules(), hook.steering_calls()), (0, 3));
        }
        assert!(nic.rules().is_empty());
        assert_eq!(
            nic.commands(),
            [
                ETHTOOL_GRXCLSRLCNT,
                ETHTOOL_SRXCLSRLINS,
                ETHTOOL_SRXCLSRLINS,
                ETHTOOL_SRXCLSRLDEL
            ]
        );
    }

    #[test]
    fn rules_match_the_whole_tuple_and_name_the_new_cpus_queue() {
        let nic = MemoryNic::new(16);
        let v6 = FlowKey {
            addrs: FlowAddrs::V6 {
                src: "2001:db8::2".parse::<Ipv6Addr>().unwrap(),
                dst: "2001:db8::1".parse::<Ipv6Addr>().unwrap(),
            },
            protocol: ip_proto::UDP,
            ports: Some(Ports { src: 5000, dst: 53 }),
        };
        {
            let mut hook =
                NtupleSteering::with_ioctl(FAKE_IF, nic.clone(), |c| Some(c as u32 + 10), 8)
                    .unwrap();
            hook.steer(&mv(tcp4(40000), 1, None)).unwrap();
            hook.steer(&mv(v6, 2, None)).unwrap();
            // Their rules are read below, after the hook is gone.
            hook.leave_rules();
        }
        let r4 = RxNfc(nic.raw(0).unwrap());
        assert_eq!(r4.get_u32(off::FS_FLOW_TYPE), TCP_V4_FLOW);
        assert_eq!(r4.0[off::FS_H..off::FS_H + 8], [10, 0, 0, 2, 10, 0, 0, 1]);
        assert_eq!(
            r4.0[off::FS_H + 8..off::FS_H + 12],
            [0x9c, 0x40, 0x01, 0xbb]
        );
        assert_eq!(r4.0[off::FS_M..off::FS_M + 12], [0xff; 12]);
        assert_eq!(r4.get_u64(off::FS_RING_COOKIE), 11);
        let r6 = RxNfc(nic.raw(1).unwrap());
        assert_eq!(r6.get_u32(off::FS_FLOW_TYPE), UDP_V6_FLOW);
        assert_eq!(r6.0[off::FS_H + 15], 2);
        assert_eq!(r6.0[off::FS_H + 31], 1);
        assert_eq!(r6.0[off::FS_H + 32..off::FS_H + 36], [0x13, 0x88, 0, 53]);
        assert_eq!(r6.0[off::FS_M..off::FS_M + 36], [0xff; 36]);
        assert_eq!(r6.get_u64(off::FS_RING_COOKIE), 12);
    }

    #[test]
    fn the_budget_and_the_table_bound_the_rules() {
        let nic = MemoryNic::new(3);
        let mut hook =
            NtupleSteering::with_ioctl(FAKE_IF, nic.clone(), |c| Some(c as u32), 100).unwrap();
        assert_eq!(hook.budget(), 3, "the NIC's table is smaller");
        for port in 0..3 {
            hook.steer(&mv(tcp4(port), 0, None)).unwrap();
        }
        assert_eq!(hook.steer(&mv(tcp4(9), 0, None)), Err(HookError::Full));
        assert_eq!(hook.errors(), 1);
        // No key, or no queue for the CPU: software steering only.
        let keyless = FlowMove {
            key: None,
            ..mv(tcp4(1), 0, None)
        };
        assert_eq!(hook.steer(&keyless), Err(HookError::Unsupported));
        let other = MemoryNic::new(4);
        let mut unmapped = NtupleSteering::with_ioctl(FAKE_IF, other.clone(), |_| None, 4).unwrap();
        assert_eq!(
            unmapped.steer(&mv(tcp4(1), 0, None)),
            Err(HookError::Unsupported)
        );
    }

    fn place(tag: &str) -> RecordPlace {
        let dir =
            std::env::temp_dir().join(format!("steer-ntuple-hook-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        RecordPlace {
            dir,
            stem: "net1-if7".into(),
        }
    }

    fn recorded(nic: &MemoryNic, place: &RecordPlace) -> NtupleSteering<MemoryNic> {
        NtupleSteering::build(
            FAKE_IF,
            nic.clone(),
            Box::new(|c| Some(c as u32)),
            8,
            Owner::At(place.clone()),
        )
        .unwrap()
    }

    fn files(place: &RecordPlace) -> usize {
        std::fs::read_dir(&place.dir).unwrap().count()
    }

    #[test]
    fn a_stopped_hook_leaves_no_rule_and_no_record() {
        let (nic, p) = (MemoryNic::new(16), place("stop"));
        let mut hook = recorded(&nic, &p);
        let f = hook.steer(&mv(tcp4(1), 1, None)).unwrap().unwrap();
        hook.steer(&mv(tcp4(2), 0, None)).unwrap();
        hook.remove(0, 0, f);
        assert_eq!(files(&p), 1);
        drop(hook);
        assert!(nic.rules().is_empty());
        assert_eq!(files(&p), 0, "the record goes with a clean stop");
        let _ = std::fs::remove_dir_all(&p.dir);
    }

    #[test]
    fn a_crashed_hooks_rules_are_removed_by_the_next_hook_before_it_installs_anything() {
        let (nic, p) = (MemoryNic::new(16), place("crash"));
        let mut dead = recorded(&nic, &p);
        for port in 0..3 {
            dead.steer(&mv(tcp4(port), 1, None)).unwrap();
        }
        // Expired before the crash: deleted and forgotten.
        let f = dead.steer(&mv(tcp4(9), 1, None)).unwrap().unwrap();
        dead.remove(0, 0, f);
        dead.abandon();
        assert_eq!(nic.rules().len(), 3, "a killed process leaves its rules");
        assert_eq!(files(&p), 1);
        let before = nic.commands().len();
        let mut next = recorded(&nic, &p);
        assert_eq!(next.removed_at_start(), 3);
        assert!(nic.rules().is_empty());
        assert_eq!(
            nic.commands()[before..],
            [
                ETHTOOL_GRXCLSRLCNT,
                ETHTOOL_GRXCLSRULE,
                ETHTOOL_SRXCLSRLDEL,
                ETHTOOL_GRXCLSRULE,
                ETHTOOL_SRXCLSRLDEL,
                ETHTOOL_GRXCLSRULE,
                ETHTOOL_SRXCLSRLDEL
            ]
        );
        // The dead record is gone; the new hook's own is the one left.
        assert_eq!(files(&p), 1);
        assert_eq!(next.budget(), 8, "the freed rules count as room");
        next.steer(&mv(tcp4(5), 0, None)).unwrap();
        // A third hook leaves the live one's rules alone.
        let third = recorded(&nic, &p);
        assert_eq!((third.removed_at_start(), nic.rules().len()), (0, 1));
        drop((third, next));
        assert!(nic.rules().is_empty());
        assert_eq!(files(&p), 0);
        let _ = std::fs::remove_dir_all(&p.dir);
    }

    #[test]
    fn a_location_that_now_holds_another_flow_or_nothing_is_left_alone() {
        let (nic, p) = (MemoryNic::new(16), place("foreign"));
        let mut dead = recorded(&nic, &p);
        let f0 = dead.steer(&mv(tcp4(1), 1, None)).unwrap().unwrap();
        let f1 = dead.steer(&mv(tcp4(2), 1, None)).unwrap().unwrap();
        dead.steer(&mv(tcp4(3), 1, None)).unwrap();
        // The NIC lost rule 1 and someone else put a rule at 0.
        let mut other =
            NtupleSteering::with_ioctl(FAKE_IF, nic.clone(), |c| Some(c as u32), 8).unwrap();
        delete_rule(FAKE_IF, &mut other.ioctl, f0.0).unwrap();
        delete_rule(FAKE_IF, &mut other.ioctl, f1.0).unwrap();
        assert_eq!(other.steer(&mv(tcp4(100), 0, None)), Ok(Some(f0)));
        other.leave_rules();
        dead.abandon();
        let next = recorded(&nic, &p);
        assert_eq!(next.removed_at_start(), 1);
        let left = nic.rules();
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].location, left[0].flow), (f0.0, Some(tcp4(100))));
        drop(next);
        let _ = std::fs::remove_dir_all(&p.dir);
    }

    #[test]
    fn a_corrupt_record_is_ignored_and_the_hook_starts() {
        let (nic, p) = (MemoryNic::new(16), place("corrupt"));
        std::fs::write(p.dir.join("net1-if7.ntuple.1.0"), b"not a record").unwrap();
        let mut hook = recorded(&nic, &p);
        assert_eq!(hook.removed_at_start(), 0);
        hook.steer(&mv(tcp4(1), 1, None)).unwrap();
        assert_eq!(
            files(&p),
            1,
            "the corrupt file is gone, the hook's own is there"
        );
        drop(hook);
        // An unwritable place: the hook steers, unrecorded.
        let gone = RecordPlace {
            dir: p.dir.join("missing"),
            stem: p.stem.clone(),
        };
        let mut hook = recorded(&nic, &gone);
        assert!(hook.record.is_none());
        hook.steer(&mv(tcp4(1), 1, None)).unwrap();
        drop(hook);
        assert!(nic.rules().is_empty());
        let _ = std::fs::remove_dir_all(&p.dir);
    }

    #[test]
    fn memory_nic_rules_read_back_as_flows_and_queues() {
        let nic = MemoryNic::new(4);
        let mut hook =
            NtupleSteering::with_ioctl(FAKE_IF, nic.clone(), |c| Some(c as u32 + 1), 8).unwrap();
        hook.steer(&mv(tcp4(7), 2, None)).unwrap();
        let port_rule = hook.insert_port(Proto::Udp, 53, 0).unwrap();
        assert_eq!(
            nic.rules(),
            [
                NtupleRule {
                    location: 0,
                    flow: Some(tcp4(7)),
                    queue: 3
                },
                NtupleRule {
                    location: port_rule,
                    flow: None,
                    queue: 0
                }
            ]
        );
        hook.remove_rule(port_rule).unwrap();
    }
}
