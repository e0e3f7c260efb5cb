//! Builds well-formed frames (for tests, benches, fuzz seeds and examples):
//! Ethernet, optional VLAN tags, IPv4 (with options) or IPv6 (with extension
//! headers), fragments, and UDP/TCP with correct checksums. Not for the hot
//! path: it allocates.

use std::net::IpAddr;

use super::ethernet::{ethertype, HEADER_LEN as ETH_LEN};
use super::{ip_proto, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket};

/// The MACs every built frame carries (destination, source).
pub const MACS: ([u8; 6], [u8; 6]) = (
    [0x02, 0x00, 0x00, 0x00, 0x00, 0x02],
    [0x02, 0x00, 0x00, 0x00, 0x00, 0x01],
);

/// A frame under construction.
///
/// ```
/// use std::net::Ipv6Addr;
/// use steer_core::packet::{build::FrameBuilder, ethernet::ethertype, ip_proto, parse, Fragment};
/// let a: std::net::IpAddr = "2001:db8::1".parse::<Ipv6Addr>().unwrap().into();
/// let b: std::net::IpAddr = "2001:db8::2".parse::<Ipv6Addr>().unwrap().into();
/// let f = FrameBuilder::tcp(a, b, 40000, 443)
///     .vlan(ethertype::VLAN, 7)
///     .ipv6_ext(ip_proto::IPV6_DEST_OPTS, 0)
///     .fragment(0, true)
///     .build();
/// let l = parse(&f).unwrap().unwrap();
/// assert_eq!((l.vlan_tags, l.protocol, l.fragment), (1, ip_proto::TCP, Some(Fragment::First)));
/// ```
#[derive(Debug, Clone)]
pub struct FrameBuilder {
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    ports: (u16, u16),
    vlans: Vec<(u16, u16)>,
    payload: Vec<u8>,
    ipv4_options: Vec<u8>,
    ipv6_ext: Vec<(u8, u8)>,
    fragment: Option<(u16, bool)>,
}

impl FrameBuilder {
    /// A UDP datagram from `src:sport` to `dst:dport` (same address family).
    pub fn udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16) -> Self {
        Self::new(src, dst, ip_proto::UDP, (sport, dport))
    }

    /// A TCP segment (20-byte header, ACK set) from `src:sport` to
    /// `dst:dport`.
    pub fn tcp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16) -> Self {
        Self::new(src, dst, ip_proto::TCP, (sport, dport))
    }

    /// A datagram of another protocol: the payload follows the IP layer
    /// directly.
    pub fn proto(src: IpAddr, dst: IpAddr, protocol: u8) -> Self {
        Self::new(src, dst, protocol, (0, 0))
    }

    fn new(src: IpAddr, dst: IpAddr, protocol: u8, ports: (u16, u16)) -> Self {
        Self {
            src,
            dst,
            protocol,
            ports,
            vlans: Vec::new(),
            payload: Vec::new(),
            ipv4_options: Vec::new(),
            ipv6_ext: Vec::new(),
            fragment: None,
        }
    }

    /// Adds a VLAN tag (outer first) with this TPID and VLAN id.
    #[must_use]
    pub fn vlan(mut self, tpid: u16, vid: u16) -> Self {
        self.vlans.push((tpid, vid));
        self
    }

    /// The L4 payload.
    #[must_use]
    pub fn payload(mut self, p: &[u8]) -> Self {
        self.payload = p.to_vec();
        self
    }

    /// IPv4 options (padded with zeros to a multiple of 4, at most 40).
    #[must_use]
    pub fn ipv4_options(mut self, o: &[u8]) -> Self {
        self.ipv4_options = o.to_vec();
        self
    }

    /// Adds an IPv6 extension header of `kind` (hop-by-hop, routing or
    /// destination options) of `(len_units + 1) * 8` bytes.
    #[must_use]
    pub fn ipv6_ext(mut self, kind: u8, len_units: u8) -> Self {
        self.ipv6_ext.push((kind, len_units));
        self
    }

    /// Makes it a fragment at `offset_units` × 8 bytes with the MF flag
    /// `more`. A later fragment (offset > 0) carries the payload only, no L4
    /// header. IPv6 gets a fragment header after the other extensions.
    #[must_use]
    pub fn fragment(mut self, offset_units: u16, more: bool) -> Self {
        self.fragment = Some((offset_units, more));
        self
    }

    fn l4(&self) -> Vec<u8> {
        let later = matches!(self.fragment, Some((o, _)) if o > 0);
        if later {
            return self.payload.clone();
        }
        let hl = match self.protocol {
            ip_proto::UDP => super::udp::HEADER_LEN,
            ip_proto::TCP => super::tcp::MIN_HEADER_LEN,
            _ => return self.payload.clone(),
        };
        let mut seg = vec![0u8; hl];
        seg.extend_from_slice(&self.payload);
        let len = seg.len();
        match self.protocol {
            ip_proto::UDP => {
                let mut u = UdpPacket::new_unchecked(&mut seg[..]);
                u.set_src_port(self.ports.0);
                u.set_dst_port(self.ports.1);
                u.set_len(len as u16);
                match (self.src, self.dst) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => u.fill_checksum_v4(s, d),
                    (IpAddr::V6(s), IpAddr::V6(d)) => u.fill_checksum_v6(s, d),
                    _ => {}
                }
            }
            _ => {
                let mut t = TcpPacket::new_unchecked(&mut seg[..]);
                t.set_src_port(self.ports.0);
                t.set_dst_port(self.ports.1);
                t.set_header_len(hl);
                t.set_flags(0x10);
                match (self.src, self.dst) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => t.fill_checksum_v4(s, d),
                    (IpAddr::V6(s), IpAddr::V6(d)) => t.fill_checksum_v6(s, d),
                    _ => {}
                }
            }
        }
        seg
    }

    /// The frame's bytes. Mixed address families give an IPv4 frame with
    /// zero addresses for the mismatched side.
    pub fn build(&self) -> Vec<u8> {
        let mut f = Vec::with_capacity(128 + self.payload.len());
        f.extend_from_slice(&MACS.0);
        f.extend_from_slice(&MACS.1);
        for &(tpid, vid) in &self.vlans {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&(vid & 0x0fff).to_be_bytes());
        }
        let l3_ethertype = match self.src {
            IpAddr::V4(_) => ethertype::IPV4,
            IpAddr::V6(_) => ethertype::IPV6,
        };
        f.extend_from_slice(&l3_ethertype.to_be_bytes());
        debug_assert!(f.len() >= ETH_LEN);
        let l3 = f.len();
        let l4 = self.l4();
        match self.src {
            IpAddr::V4(s) => {
                let mut opts = self.ipv4_options.clone();
                opts.resize(opts.len().div_ceil(4) * 4, 0);
                opts.truncate(40);
                let hl = 20 + opts.len();
                f.resize(l3 + 20, 0);
                f.extend_from_slice(&opts);
                f.extend_from_slice(&l4);
                let d = match self.dst {
                    IpAddr::V4(d) => d,
                    IpAddr::V6(_) => std::net::Ipv4Addr::UNSPECIFIED,
                };
                let mut ip = Ipv4Packet::new_unchecked(&mut f[l3..]);
                ip.set_header_len(hl);
                ip.set_total_len((hl + l4.len()) as u16);
                ip.set_ident(0x1234);
                let (off, more) = self.fragment.unwrap_or((0, false));
                ip.set_fragment(self.fragment.is_none(), more, off << 3);
                ip.set_ttl(64);
                ip.set_protocol(self.protocol);
                ip.set_src_addr(s);
                ip.set_dst_addr(d);
                ip.fill_checksum();
            }
            IpAddr::V6(s) => {
                f.resize(l3 + 40, 0);
                let mut kinds: Vec<(u8, usize)> = self
                    .ipv6_ext
                    .iter()
                    .map(|&(k, u)| (k, (usize::from(u) + 1) * 8))
                    .collect();
                if self.fragment.is_some() {
                    kinds.push((ip_proto::IPV6_FRAGMENT, 8));
                }
                for (i, &(_, len)) in kinds.iter().enumerate() {
                    let next = kinds.get(i + 1).map_or(self.protocol, |k| k.0);
                    let at = f.len();
                    f.resize(at + len, 0);
                    f[at] = next;
                    if kinds[i].0 == ip_proto::IPV6_FRAGMENT {
                        let (off, more) = self.fragment.unwrap_or((0, false));
                        let w = (off << 3) | u16::from(more);
                        f[at + 2..at + 4].copy_from_slice(&w.to_be_bytes());
                        f[at + 4..at + 8].copy_from_slice(&0x1234u32.to_be_bytes());
                    } else {
                        f[at + 1] = (len / 8 - 1) as u8;
                        if len > 2 {
                            // A PadN option filling the header.
                            f[at + 2] = 1;
                            f[at + 3] = (len - 4) as u8;
                        }
                    }
                }
                let first = kinds.first().map_or(self.protocol, |k| k.0);
                f.extend_from_slice(&l4);
                let d = match self.dst {
                    IpAddr::V6(d) => d,
                    IpAddr::V4(_) => std::net::Ipv6Addr::UNSPECIFIED,
                };
                let plen = f.len() - l3 - 40;
                let mut ip = Ipv6Packet::new_unchecked(&mut f[l3..]);
                ip.set_version_flow(0x12345);
                ip.set_payload_len(plen as u16);
                ip.set_next_header(first);
                ip.set_hop_limit(64);
                ip.set_src_addr(s);
                ip.set_dst_addr(d);
            }
        }
        f
    }
}
