//! The keys of the steer program's maps, written byte by byte in the layouts
//! of bpf/steer_xdp.h: [`PortKey`] (`owned_ports`) and [`FlowMapKey`]
//! (`flow_socks`), which also bridges from steer-core's `FlowKey`.

use std::net::{IpAddr, SocketAddr};

use steer_core::{
    flow::{FlowAddrs, FlowKey},
    packet::ip_proto,
};

use crate::config::Proto;

/// Mirrors `struct steer_port_key` in bpf/steer_xdp.h.
#[derive(Clone, Copy)]
pub(crate) struct PortKey {
    pub(crate) proto: u8,
    pub(crate) port: u16,
}

impl PortKey {
    /// The key's bytes as the map stores them (`proto`, `pad`, `port` in
    /// network byte order).
    pub(crate) fn to_bytes(self) -> [u8; 4] {
        let [hi, lo] = self.port.to_be_bytes();
        [self.proto, 0, hi, lo]
    }
}

/// The key of the program's flow-steering map (`flow_socks`, mirrors `struct
/// steer_flow_key`): a flow as the XDP program sees it, the 5-tuple of a
/// UDP or TCP packet. Not to be confused with `steer_core::flow::FlowKey`,
/// the flow identity the dispatcher hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[doc(alias = "steer_flow_key")]
pub struct FlowMapKey {
    saddr: [u8; 16],
    daddr: [u8; 16],
    sport: u16,
    dport: u16,
    proto: u8,
    family: u8,
}

impl FlowMapKey {
    /// The entry the program looks up for the packets of `flow`; `None` when
    /// it looks none up (not UDP or TCP, or no ports: fragments go to the
    /// kernel).
    ///
    /// ```
    /// use steer_core::{flow::flow_key, packet::build::FrameBuilder};
    /// use steer_xdp::{FlowMapKey, Proto};
    /// let frame = FrameBuilder::udp([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 40000, 9000).build();
    /// let key = flow_key(&frame).unwrap().unwrap();
    /// assert_eq!(
    ///     FlowMapKey::from_flow(&key),
    ///     Some(FlowMapKey::new(Proto::Udp, "10.0.0.1:40000".parse().unwrap(), "10.0.0.2:9000".parse().unwrap()))
    /// );
    /// ```
    pub fn from_flow(flow: &FlowKey) -> Option<Self> {
        let proto = match flow.protocol {
            ip_proto::UDP => Proto::Udp,
            ip_proto::TCP => Proto::Tcp,
            _ => return None,
        };
        let ports = flow.ports?;
        let (src, dst): (IpAddr, IpAddr) = match flow.addrs {
            FlowAddrs::V4 { src, dst } => (src.into(), dst.into()),
            FlowAddrs::V6 { src, dst } => (src.into(), dst.into()),
        };
        Some(Self::new(
            proto,
            SocketAddr::new(src, ports.src),
            SocketAddr::new(dst, ports.dst),
        ))
    }

    /// The flow `src:sport -> dst:dport` of `proto` as the receiver sees it.
    pub fn new(proto: Proto, src: std::net::SocketAddr, dst: std::net::SocketAddr) -> Self {
        let mut key = FlowMapKey {
            saddr: [0; 16],
            daddr: [0; 16],
            sport: src.port(),
            dport: dst.port(),
            proto: proto.number(),
            family: 4,
        };
        match (src.ip(), dst.ip()) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                key.saddr[..4].copy_from_slice(&s.octets());
                key.daddr[..4].copy_from_slice(&d.octets());
            }
            (s, d) => {
                key.family = 6;
                key.saddr = to_v6(s).octets();
                key.daddr = to_v6(d).octets();
            }
        }
        key
    }

    /// The key's bytes in the layout of `struct steer_flow_key` (ports in
    /// network byte order).
    pub(crate) fn to_bytes(self) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[..16].copy_from_slice(&self.saddr);
        b[16..32].copy_from_slice(&self.daddr);
        b[32..34].copy_from_slice(&self.sport.to_be_bytes());
        b[34..36].copy_from_slice(&self.dport.to_be_bytes());
        b[36] = self.proto;
        b[37] = self.family;
        b
    }
}

impl FlowMapKey {
    /// The key of `struct steer_flow_key` bytes (as a map walk yields them);
    /// `None` when they are not 40 bytes.
    pub(crate) fn from_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; 40] = b.try_into().ok()?;
        let mut k = FlowMapKey {
            saddr: [0; 16],
            daddr: [0; 16],
            sport: u16::from_be_bytes([b[32], b[33]]),
            dport: u16::from_be_bytes([b[34], b[35]]),
            proto: b[36],
            family: b[37],
        };
        k.saddr.copy_from_slice(&b[..16]);
        k.daddr.copy_from_slice(&b[16..32]);
        Some(k)
    }
}

fn to_v6(ip: std::net::IpAddr) -> std::net::Ipv6Addr {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_keys_come_back_from_their_bytes() {
        for (src, dst) in [
            ("10.0.0.1:40000", "10.0.0.2:9000"),
            ("[fd00::1]:5", "[fd00::2]:6"),
        ] {
            let k = FlowMapKey::new(Proto::Tcp, src.parse().unwrap(), dst.parse().unwrap());
            assert_eq!(FlowMapKey::from_bytes(&k.to_bytes()), Some(k));
        }
        assert_eq!(FlowMapKey::from_bytes(&[0u8; 39]), None);
    }

    #[test]
    fn port_key_bytes_follow_steer_port_key() {
        let key = PortKey {
            proto: Proto::Udp.number(),
            port: 9000,
        };
        assert_eq!(key.to_bytes(), [17, 0, 0x23, 0x28]);
    }

    #[test]
    fn map_keys_from_steer_core_flow_keys() {
        use steer_core::{flow::flow_key, packet::build::FrameBuilder};
        let key = |f: &[u8]| flow_key(f).unwrap().unwrap();
        let a: std::net::Ipv6Addr = "2001:db8::2".parse().unwrap();
        let b: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
        let tcp6 = FrameBuilder::tcp(a.into(), b.into(), 40000, 443).build();
        assert_eq!(
            FlowMapKey::from_flow(&key(&tcp6)),
            Some(FlowMapKey::new(
                Proto::Tcp,
                SocketAddr::new(a.into(), 40000),
                SocketAddr::new(b.into(), 443)
            ))
        );
        let (c, d) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let icmp = FrameBuilder::proto(c, d, ip_proto::ICMP).build();
        assert_eq!(FlowMapKey::from_flow(&key(&icmp)), None);
        let fragment = FrameBuilder::udp(c, d, 1, 2).fragment(0, true).build();
        assert_eq!(FlowMapKey::from_flow(&key(&fragment)), None);
    }

    #[test]
    fn flow_key_bytes_follow_steer_flow_key() {
        let v4 = FlowMapKey::new(
            Proto::Udp,
            "192.0.2.2:40000".parse().unwrap(),
            "192.0.2.1:9000".parse().unwrap(),
        )
        .to_bytes();
        let mut want = [0u8; 40];
        want[..4].copy_from_slice(&[192, 0, 2, 2]);
        want[16..20].copy_from_slice(&[192, 0, 2, 1]);
        want[32..34].copy_from_slice(&40000u16.to_be_bytes());
        want[34..36].copy_from_slice(&9000u16.to_be_bytes());
        want[36] = 17;
        want[37] = 4;
        assert_eq!(v4, want);

        let v6 = FlowMapKey::new(
            Proto::Tcp,
            "[2001:db8::2]:1".parse().unwrap(),
            "[2001:db8::1]:2".parse().unwrap(),
        )
        .to_bytes();
        assert_eq!(
            v6[..16],
            "2001:db8::2"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
        assert_eq!(
            v6[16..32],
            "2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
        assert_eq!(v6[32..], [0, 1, 0, 2, 6, 6, 0, 0]);
    }
}
