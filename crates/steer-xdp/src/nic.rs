//! What a network device offers steer and how it is set up, asked of the
//! kernel: the XDP actions and receive metadata its driver supports (the
//! `netdev` netlink family, Linux >= 6.3), its channels (`ethtool -l`), its
//! RSS indirection table (`ethtool -x`) and its queues' interrupts with
//! their CPU affinity (`/proc/interrupts`, `/proc/irq/N/smp_affinity_list`).
//! The engine checks these at start, so a setting the device cannot honour
//! (a receive hash from a driver without the rx-hash kfunc) is refused in
//! one line, and a setup that sends traffic past steer's queues or
//! interrupts to other CPUs is reported.

use std::io;

use steer_core::cpu::CpuSet;

use crate::error::{Result, XdpError};
use crate::sys;

/// `NETDEV_XDP_ACT_XSK_ZEROCOPY`.
const ACT_XSK_ZEROCOPY: u64 = 8;
/// `NETDEV_XDP_RX_METADATA_HASH`.
const RX_METADATA_HASH: u64 = 2;

/// What a device's driver offers XDP programs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpDeviceInfo {
    /// `enum netdev_xdp_act` bits: the XDP actions the driver supports.
    pub actions: u64,
    /// `enum netdev_xdp_rx_metadata` bits: the receive metadata kfuncs.
    pub rx_metadata: u64,
}

impl XdpDeviceInfo {
    /// Whether the driver gives XDP programs its receive (RSS) hash
    /// (`bpf_xdp_metadata_rx_hash`).
    pub fn rx_hash(&self) -> bool {
        self.rx_metadata & RX_METADATA_HASH != 0
    }

    /// Whether AF_XDP sockets can bind in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.actions & ACT_XSK_ZEROCOPY != 0
    }
}

/// What `interface`'s driver offers XDP programs.
///
/// ```no_run
/// let info = steer_xdp::nic::xdp_device_info("eth1")?;
/// println!("receive hash for XDP: {}", info.rx_hash());
/// # Ok::<(), steer_xdp::XdpError>(())
/// ```
pub fn xdp_device_info(interface: &str) -> Result<XdpDeviceInfo> {
    let ifindex = sys::ifindex(interface)?;
    let info = sys::netdev_xdp(ifindex).map_err(|e| {
        XdpError::io(
            "asking the kernel for the device's XDP features (netdev netlink family, Linux >= 6.3)",
            e,
        )
    })?;
    Ok(XdpDeviceInfo {
        actions: info.xdp_features,
        rx_metadata: info.rx_metadata,
    })
}

/// The name of `interface`'s driver, as `ethtool -i` shows it (`veth`,
/// `mlx5_core`, ...).
///
/// ```no_run
/// assert_eq!(steer_xdp::nic::driver("veth0")?, "veth");
/// # Ok::<(), steer_xdp::XdpError>(())
/// ```
pub fn driver(interface: &str) -> Result<String> {
    sys::ethtool_driver(interface)
        .map_err(|e| XdpError::io("asking the device's driver name (ETHTOOL_GDRVINFO)", e))
}

/// Whether frames from `driver` can reach XDP with a partial checksum (the
/// sender left it to the device): veth carries a local sender's frames as
/// it wrote them, and so do tun/tap and virtio-net from a guest. A frame
/// redirected through a cpumap loses the mark that makes the stack trust
/// such a checksum.
pub fn hands_partial_checksums(driver: &str) -> bool {
    matches!(driver, "veth" | "tun" | "virtio_net" | "netkit")
}

/// A device's channels (`ethtool -l`): its queues, current and at most.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Channels {
    /// Rx-only channels now.
    pub rx: u32,
    /// Tx-only channels now.
    pub tx: u32,
    /// Combined (rx and tx) channels now.
    pub combined: u32,
    /// Most rx-only channels the device takes.
    pub max_rx: u32,
    /// Most combined channels the device takes.
    pub max_combined: u32,
}

impl Channels {
    /// Rx queues now (rx-only plus combined channels).
    pub fn rx_queues(&self) -> u32 {
        self.rx + self.combined
    }
}

/// `interface`'s channels; `Ok(None)` when its driver does not report them.
///
/// ```no_run
/// if let Some(ch) = steer_xdp::nic::channels("eth1")? {
///     println!("{} rx queues (ethtool -L eth1 combined N to change)", ch.rx_queues());
/// }
/// # Ok::<(), steer_xdp::XdpError>(())
/// ```
pub fn channels(interface: &str) -> Result<Option<Channels>> {
    sys::ifindex(interface)?;
    match sys::ethtool_channels(interface) {
        Ok(ch) => Ok(Some(Channels {
            max_rx: ch[1],
            max_combined: ch[4],
            rx: ch[5],
            tx: ch[6],
            combined: ch[8],
        })),
        Err(e) if unsupported(&e) => Ok(None),
        Err(e) => Err(XdpError::io(
            "reading the device's channels (ETHTOOL_GCHANNELS)",
            e,
        )),
    }
}

/// `interface`'s RSS indirection table: the rx queue of each entry, which
/// the device picks by the low bits of a packet's RSS hash. `Ok(None)` when
/// the device has none (veth: its driver picks the queue otherwise).
///
/// ```no_run
/// if let Some(table) = steer_xdp::nic::rss_indirection("eth1")? {
///     println!("{} entries over queues {:?}", table.len(), table.iter().max());
/// }
/// # Ok::<(), steer_xdp::XdpError>(())
/// ```
pub fn rss_indirection(interface: &str) -> Result<Option<Vec<u32>>> {
    sys::ifindex(interface)?;
    match sys::ethtool_rxfh_indir(interface) {
        Ok(t) if t.is_empty() => Ok(None),
        Ok(t) => Ok(Some(t)),
        Err(e) if unsupported(&e) => Ok(None),
        Err(e) => Err(XdpError::io(
            "reading the device's RSS indirection table (ETHTOOL_GRXFHINDIR)",
            e,
        )),
    }
}

fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENODEV)
    )
}

/// The interrupt of one of a device's queues and where it may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueIrq {
    /// The IRQ number.
    pub irq: u32,
    /// Its name in `/proc/interrupts` (e.g. `eth1-TxRx-3`).
    pub name: String,
    /// The queue, from the number ending the name.
    pub queue: u32,
    /// The CPUs it may run on (`/proc/irq/N/smp_affinity_list`).
    pub cpus: CpuSet,
}

/// The interrupts of `interface`'s queues, found by name in
/// `/proc/interrupts` (names holding the interface's name and ending in
/// the queue number, as most drivers give them: `eth1-TxRx-3`,
/// `i40e-eth1-TxRx-3`, `eth1-rx-3`), with their affinity. Empty for a
/// virtual device, or a driver naming its interrupts otherwise.
pub fn queue_irqs(interface: &str) -> Vec<QueueIrq> {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    parse_interrupts(&text, interface)
        .into_iter()
        .filter_map(|(irq, name, queue)| {
            let list =
                std::fs::read_to_string(format!("/proc/irq/{irq}/smp_affinity_list")).ok()?;
            let cpus = list.trim().parse().ok()?;
            Some(QueueIrq {
                irq,
                name,
                queue,
                cpus,
            })
        })
        .collect()
}

/// `(irq, name, queue)` of each line of `/proc/interrupts` whose name
/// holds `interface` (as a whole `-`/`@`-separated word) and ends in a
/// queue number.
fn parse_interrupts(text: &str, interface: &str) -> Vec<(u32, String, u32)> {
    text.lines()
        .filter_map(|line| {
            let (irq, rest) = line.trim_start().split_once(':')?;
            let irq: u32 = irq.trim().parse().ok()?;
            let name = rest.split_whitespace().last()?;
            let words: Vec<&str> = name.split(['-', '@']).collect();
            if !words.contains(&interface) {
                return None;
            }
            let digits = name
                .rsplit(|c: char| !c.is_ascii_digit())
                .next()
                .filter(|d| !d.is_empty())?;
            if words.last() == Some(&interface) {
                return None; // "eth1" alone: the device's own interrupt
            }
            Some((irq, name.to_owned(), digits.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_interrupts_are_found_by_name() {
        let text = "           CPU0       CPU1
  0:         17          0   IO-APIC   2-edge      timer
 45:          0        123   PCI-MSI 524288-edge      eth1-TxRx-0
 46:          0        456   PCI-MSI 524289-edge      eth1-TxRx-1
 47:          0          0   PCI-MSI 524290-edge      eth1
 48:          9          0   PCI-MSI 524291-edge      i40e-eth1-TxRx-12
 49:          9          0   PCI-MSI 524292-edge      eth10-TxRx-2
 50:          9          0   PCI-MSI 524293-edge      virtio0-input.0
";
        assert_eq!(
            parse_interrupts(text, "eth1"),
            vec![
                (45, "eth1-TxRx-0".to_owned(), 0),
                (46, "eth1-TxRx-1".to_owned(), 1),
                (48, "i40e-eth1-TxRx-12".to_owned(), 12),
            ]
        );
        assert!(parse_interrupts(text, "eth2").is_empty());
    }

    #[test]
    fn loopback_has_no_rss_table_and_no_queue_interrupts() {
        assert_eq!(rss_indirection("lo").unwrap(), None);
        assert!(queue_irqs("lo").is_empty());
        assert!(matches!(
            channels("nosuchif0"),
            Err(XdpError::UnknownInterface { .. })
        ));
    }
}
