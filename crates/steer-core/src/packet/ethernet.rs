//! Ethernet II header and VLAN tag views.
//!
//! [`EthernetFrame`]: destination MAC, source MAC, EtherType (14 bytes).
//! [`VlanTag`]: the 4 bytes that follow a TPID of 0x8100 (802.1Q) or 0x88a8
//! (802.1ad, the outer tag of QinQ): the TCI (PCP, DEI, VLAN id) and the
//! encapsulated EtherType. After `check_len` succeeds no accessor panics.

use super::{be16, put_be16, Layer, ParseError};

/// EtherType values used here.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// 802.1Q VLAN tag (customer tag).
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag (outer tag of QinQ).
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;

    /// True for the TPIDs of a VLAN tag.
    #[inline]
    pub const fn is_vlan(t: u16) -> bool {
        t == VLAN || t == QINQ
    }
}

/// Byte ranges of the Ethernet II header.
pub mod field {
    use std::ops::Range;
    /// Destination MAC.
    pub const DST: Range<usize> = 0..6;
    /// Source MAC.
    pub const SRC: Range<usize> = 6..12;
    /// EtherType (or TPID of a VLAN tag).
    pub const ETHERTYPE: usize = 12;
    /// First byte after the header.
    pub const PAYLOAD: usize = 14;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of an Ethernet II frame.
///
/// ```
/// use steer_core::packet::{ethernet::ethertype, EthernetFrame};
/// let mut buf = [0u8; 14];
/// let mut eth = EthernetFrame::new_checked(&mut buf[..]).unwrap();
/// eth.set_dst_addr([1, 2, 3, 4, 5, 6]);
/// eth.set_ethertype(ethertype::IPV6);
/// assert_eq!(eth.ethertype(), 0x86dd);
/// assert!(EthernetFrame::new_checked(&buf[..13]).is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T> {
    buffer: T,
}

view_constructors!(EthernetFrame);

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks the buffer holds a whole header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(ParseError::Truncated(Layer::Ethernet));
        }
        Ok(())
    }

    /// Destination MAC.
    pub fn dst_addr(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// Source MAC.
    pub fn src_addr(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    /// EtherType (a VLAN TPID when tagged).
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a);
    }

    /// Sets the source MAC.
    pub fn set_src_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a);
    }

    /// Swaps source and destination MACs (an echo reply).
    pub fn swap_addrs(&mut self) {
        let (s, d) = (self.src_addr(), self.dst_addr());
        self.set_src_addr(d);
        self.set_dst_addr(s);
    }

    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, t: u16) {
        put_be16(self.buffer.as_mut(), field::ETHERTYPE, t);
    }

    /// Everything after the header, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// Length of a VLAN tag (after its TPID, which sits in the EtherType slot
/// before it).
pub const VLAN_TAG_LEN: usize = 4;

/// A view of the 4 bytes after a VLAN TPID: TCI and inner EtherType.
///
/// ```
/// use steer_core::packet::VlanTag;
/// let tag = VlanTag::new_checked(&[0x20, 0x64, 0x08, 0x00][..]).unwrap();
/// assert_eq!((tag.pcp(), tag.vid(), tag.ethertype()), (1, 100, 0x0800));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct VlanTag<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Wraps `buffer` without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and checks it holds a whole tag.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let t = Self::new_unchecked(buffer);
        t.check_len()?;
        Ok(t)
    }

    /// Checks the buffer holds a whole tag.
    pub fn check_len(&self) -> Result<(), ParseError> {
        if self.buffer.as_ref().len() < VLAN_TAG_LEN {
            return Err(ParseError::Truncated(Layer::Vlan));
        }
        Ok(())
    }

    /// The tag control information word.
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    /// Priority code point (3 bits).
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop eligible indicator.
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN id (12 bits).
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The encapsulated EtherType (another TPID for QinQ).
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the TCI word.
    pub fn set_tci(&mut self, tci: u16) {
        put_be16(self.buffer.as_mut(), 0, tci);
    }

    /// Sets the encapsulated EtherType.
    pub fn set_ethertype(&mut self, t: u16) {
        put_be16(self.buffer.as_mut(), 2, t);
    }
}
