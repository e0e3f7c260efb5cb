//! The ethtool ntuple steering backend: asks the NIC to put a flow (protocol
//! and destination port) on a chosen rx queue with `SIOCETHTOOL`
//! `ETHTOOL_SRXCLSRLINS` / `ETHTOOL_SRXCLSRLDEL`. Devices without ntuple
//! filters (veth, most virtual NICs) answer EOPNOTSUPP, reported as
//! [`XdpError::NotSupported`]. Each insert or delete is a steering-hook call.

use std::io;

use crate::{
    config::Proto,
    error::{Result, XdpError},
    sys::ETHTOOL_RXNFC_LEN,
};

const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
const ETHTOOL_SRXCLSRLINS: u32 = 0x32;
const TCP_V4_FLOW: u32 = 0x01;
const UDP_V4_FLOW: u32 = 0x02;
const RX_CLS_LOC_ANY: u32 = 0xffff_ffff;

/// `struct ethtool_rxnfc` (192 bytes with its `ethtool_rx_flow_spec`), built
/// by byte offset.
struct RxNfc([u8; ETHTOOL_RXNFC_LEN]);

impl RxNfc {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }
    fn get_u32(&self, at: usize) -> u32 {
        u32::from_ne_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }
}

/// Offsets inside `struct ethtool_rxnfc` (x86_64 and aarch64 layout).
mod off {
    pub const CMD: usize = 0;
    pub const FS_FLOW_TYPE: usize = 16;
    pub const FS_H_PDST: usize = 20 + 10;
    pub const FS_M_PDST: usize = 92 + 10;
    pub const FS_RING_COOKIE: usize = 168;
    pub const FS_LOCATION: usize = 176;
}

/// Ntuple rules on one interface.
#[derive(Debug)]
#[doc(alias = "ETHTOOL_SRXCLSRLINS")]
#[doc(alias = "ntuple")]
pub struct NtupleSteering {
    interface: String,
    steering_calls: u64,
}

impl NtupleSteering {
    /// Opens the backend for `interface` (no device access yet).
    pub fn new(interface: &str) -> Result<Self> {
        crate::sys::ifindex(interface)?;
        Ok(NtupleSteering {
            interface: interface.into(),
            steering_calls: 0,
        })
    }

    fn ioctl(&self, nfc: &mut RxNfc) -> io::Result<()> {
        crate::sys::ethtool_rxnfc(&self.interface, &mut nfc.0)
    }

    fn map_err(&self, e: io::Error, what: &'static str) -> XdpError {
        if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) {
            XdpError::NotSupported {
                what,
                interface: self.interface.clone(),
                source: e,
                hint:
                    "the device has no ntuple filters (on a NIC try `ethtool -K <if> ntuple on`); \
                       use the in-XDP flow map (SteerProgram::steer_flow) instead",
            }
        } else {
            XdpError::io("SIOCETHTOOL", e)
        }
    }

    /// Steers IPv4 `proto` traffic to destination `port` onto rx `queue`:
    /// the filter the kernel's ARFS hook `ndo_rx_flow_steer` asks a NIC
    /// driver for, requested from userspace. Returns the rule's location,
    /// for [`Self::remove`].
    #[doc(alias = "ndo_rx_flow_steer")]
    #[doc(alias = "ETHTOOL_SRXCLSRLINS")]
    pub fn insert(&mut self, proto: Proto, port: u16, queue: u32) -> Result<u32> {
        self.steering_calls += 1;
        let mut nfc = RxNfc([0; ETHTOOL_RXNFC_LEN]);
        nfc.put(off::CMD, &ETHTOOL_SRXCLSRLINS.to_ne_bytes());
        let flow = if proto == Proto::Udp {
            UDP_V4_FLOW
        } else {
            TCP_V4_FLOW
        };
        nfc.put(off::FS_FLOW_TYPE, &flow.to_ne_bytes());
        nfc.put(off::FS_H_PDST, &port.to_be_bytes());
        nfc.put(off::FS_M_PDST, &[0xff, 0xff]);
        nfc.put(off::FS_RING_COOKIE, &u64::from(queue).to_ne_bytes());
        nfc.put(off::FS_LOCATION, &RX_CLS_LOC_ANY.to_ne_bytes());
        self.ioctl(&mut nfc)
            .map_err(|e| self.map_err(e, "ethtool ntuple rule insertion"))?;
        Ok(nfc.get_u32(off::FS_LOCATION))
    }

    /// Removes the rule at `location`.
    #[doc(alias = "ETHTOOL_SRXCLSRLDEL")]
    pub fn remove(&mut self, location: u32) -> Result<()> {
        self.steering_calls += 1;
        let mut nfc = RxNfc([0; ETHTOOL_RXNFC_LEN]);
        nfc.put(off::CMD, &ETHTOOL_SRXCLSRLDEL.to_ne_bytes());
        nfc.put(off::FS_LOCATION, &location.to_ne_bytes());
        self.ioctl(&mut nfc)
            .map_err(|e| self.map_err(e, "ethtool ntuple rule deletion"))
    }

    /// Inserts and removals attempted (steering-hook calls).
    pub fn steering_calls(&self) -> u64 {
        self.steering_calls
    }
}
