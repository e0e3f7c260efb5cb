//! What a network device offers steer, asked of the kernel: the XDP
//! actions and receive metadata its driver supports (the `netdev` netlink
//! family, Linux >= 6.3). The engine checks these at start, so a setting
//! the device cannot honour (a receive hash from a driver without the
//! rx-hash kfunc) is refused in one line instead of silently doing
//! something else.

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
/// let info = xdp_io::nic::xdp_device_info("eth1")?;
/// println!("receive hash for XDP: {}", info.rx_hash());
/// # Ok::<(), xdp_io::XdpError>(())
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
