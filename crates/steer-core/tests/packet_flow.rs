//! Flow hashes: the Microsoft RSS verification-suite vectors for Toeplitz
//! (IPv4 and IPv6, with and without ports), symmetric modes (proptest),
//! fragments and VLAN tags hashing like the plain flow, and `flow_key`'s
//! fast path agreeing with the full parser (proptest).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod common;

use common::classify::{classify_both, classify_naive};
use proptest::prelude::*;
use steer_core::flow::{
    flow_key, flow_key_general, FlowAddrs, FlowHasher, FlowKey, KeyedHasher, Ports, ToeplitzHasher,
    SYMMETRIC_RSS_KEY,
};
use steer_core::packet::build::FrameBuilder;
use steer_core::packet::ethernet::ethertype;
use steer_core::packet::ip_proto;

/// (source, destination, source port, destination port, hash without
/// ports, hash with ports), from the Microsoft "Verifying the RSS Hash
/// Calculation" page.
const V4_VECTORS: [(&str, &str, u16, u16, u32, u32); 5] = [
    (
        "66.9.149.187",
        "161.142.100.80",
        2794,
        1766,
        0x323e8fc2,
        0x51ccc178,
    ),
    (
        "199.92.111.2",
        "65.69.140.83",
        14230,
        4739,
        0xd718262a,
        0xc626b0ea,
    ),
    (
        "24.19.198.95",
        "12.22.207.184",
        12898,
        38024,
        0xd2d0a5de,
        0x5c2b394a,
    ),
    (
        "38.27.205.30",
        "209.142.163.6",
        48228,
        2217,
        0x82989176,
        0xafc7327f,
    ),
    (
        "153.39.163.191",
        "202.188.127.2",
        44251,
        1303,
        0x5d1809c5,
        0x10e828a2,
    ),
];

const V6_VECTORS: [(&str, &str, u16, u16, u32, u32); 3] = [
    (
        "3ffe:2501:200:1fff::7",
        "3ffe:2501:200:3::1",
        2794,
        1766,
        0x2cc18cd5,
        0x40207d3d,
    ),
    (
        "3ffe:501:8::260:97ff:fe40:efab",
        "ff02::1",
        14230,
        4739,
        0x0f0c461c,
        0xdde51bbf,
    ),
    (
        "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
        "fe80::200:f8ff:fe21:67cf",
        44251,
        38024,
        0x4b61e985,
        0x02d1feef,
    ),
];

fn key(src: IpAddr, dst: IpAddr, protocol: u8, ports: Option<(u16, u16)>) -> FlowKey {
    let addrs = match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => FlowAddrs::V4 { src, dst },
        (IpAddr::V6(src), IpAddr::V6(dst)) => FlowAddrs::V6 { src, dst },
        _ => panic!("mixed families"),
    };
    FlowKey {
        addrs,
        protocol,
        ports: ports.map(|(src, dst)| Ports { src, dst }),
    }
}

#[test]
fn toeplitz_microsoft_vectors() {
    let t = ToeplitzHasher::default();
    for (s, d, sp, dp, h2, h4) in V4_VECTORS.iter().chain(V6_VECTORS.iter()) {
        let (s, d): (IpAddr, IpAddr) = (s.parse().unwrap(), d.parse().unwrap());
        // With ports: TCP (and UDP by default).
        assert_eq!(
            t.hash(&key(s, d, ip_proto::TCP, Some((*sp, *dp)))),
            *h4,
            "{s} {d} 4-tuple"
        );
        assert_eq!(
            t.hash(&key(s, d, ip_proto::UDP, Some((*sp, *dp)))),
            *h4,
            "{s} {d} udp"
        );
        // Without: a fragment, another protocol, or UDP with ports off.
        assert_eq!(
            t.hash(&key(s, d, ip_proto::TCP, None)),
            *h2,
            "{s} {d} 2-tuple"
        );
        assert_eq!(
            t.hash(&key(s, d, ip_proto::SCTP, Some((*sp, *dp)))),
            *h2,
            "{s} {d} sctp"
        );
        let no_udp = ToeplitzHasher::default().hash_udp_ports(false);
        assert_eq!(
            no_udp.hash(&key(s, d, ip_proto::UDP, Some((*sp, *dp)))),
            *h2
        );
    }
}

#[test]
fn toeplitz_vectors_from_frames() {
    let t = ToeplitzHasher::default();
    for (s, d, sp, dp, h2, h4) in V4_VECTORS.iter().chain(V6_VECTORS.iter()) {
        let (s, d): (IpAddr, IpAddr) = (s.parse().unwrap(), d.parse().unwrap());
        let tcp = FrameBuilder::tcp(s, d, *sp, *dp)
            .vlan(ethertype::VLAN, 9)
            .build();
        assert_eq!(t.hash(&flow_key(&tcp).unwrap().unwrap()), *h4);
        let frag = FrameBuilder::tcp(s, d, *sp, *dp).fragment(0, true).build();
        assert_eq!(t.hash(&flow_key(&frag).unwrap().unwrap()), *h2);
    }
}

#[test]
fn toeplitz_configurable_key() {
    let k = key(
        "10.1.2.3".parse().unwrap(),
        "10.9.8.7".parse().unwrap(),
        ip_proto::TCP,
        Some((1, 2)),
    );
    let mut other = [0u8; 40];
    other[0] = 0x80;
    let a = ToeplitzHasher::default().hash(&k);
    let b = ToeplitzHasher::new(&other).unwrap().hash(&k);
    assert_ne!(a, b);
    // Key bit 0 only: the hash is the first input bit's window, 0x80000000
    // if the source address's top bit is set, else 0 -> mapped to 1.
    assert_eq!(b, 1);
}

#[test]
fn symmetric_rss_key_is_symmetric_without_canonical_order() {
    let t = ToeplitzHasher::new(&SYMMETRIC_RSS_KEY).unwrap();
    let k = key(
        "192.168.1.10".parse().unwrap(),
        "10.0.0.1".parse().unwrap(),
        ip_proto::TCP,
        Some((51000, 443)),
    );
    assert_eq!(t.hash(&k), t.hash(&k.reversed()));
    // The default key is not.
    let ms = ToeplitzHasher::default();
    assert_ne!(ms.hash(&k), ms.hash(&k.reversed()));
}

#[test]
fn fragments_of_a_datagram_hash_alike() {
    let h = KeyedHasher::with_seed(11);
    let t = ToeplitzHasher::default();
    let (a, b): (IpAddr, IpAddr) = (Ipv6Addr::LOCALHOST.into(), "2001:db8::9".parse().unwrap());
    let first = FrameBuilder::udp(a, b, 10, 20)
        .payload(&[0; 32])
        .fragment(0, true)
        .build();
    let later = FrameBuilder::udp(a, b, 10, 20)
        .payload(&[0; 32])
        .fragment(4, false)
        .build();
    let (k1, k2) = (
        flow_key(&first).unwrap().unwrap(),
        flow_key(&later).unwrap().unwrap(),
    );
    assert_eq!(h.hash(&k1), h.hash(&k2));
    assert_eq!(t.hash(&k1), t.hash(&k2));
}

fn arb_key() -> impl Strategy<Value = FlowKey> {
    let v4 = (any::<u32>(), any::<u32>()).prop_map(|(s, d)| FlowAddrs::V4 {
        src: Ipv4Addr::from_bits(s),
        dst: Ipv4Addr::from_bits(d),
    });
    let v6 = (any::<u128>(), any::<u128>()).prop_map(|(s, d)| FlowAddrs::V6 {
        src: Ipv6Addr::from_bits(s),
        dst: Ipv6Addr::from_bits(d),
    });
    (
        prop_oneof![v4, v6],
        prop_oneof![Just(ip_proto::TCP), Just(ip_proto::UDP), any::<u8>()],
        proptest::option::of((any::<u16>(), any::<u16>())),
    )
        .prop_map(|(addrs, protocol, ports)| FlowKey {
            addrs,
            protocol,
            ports: ports.map(|(src, dst)| Ports { src, dst }),
        })
}

proptest! {
    #[test]
    fn symmetric_modes_ignore_direction(k in arb_key(), seed in any::<u64>()) {
        let keyed = KeyedHasher::with_seed(seed).symmetric(true);
        prop_assert_eq!(keyed.hash(&k), keyed.hash(&k.reversed()));
        let t = ToeplitzHasher::default().symmetric(true);
        prop_assert_eq!(t.hash(&k), t.hash(&k.reversed()));
        let sk = ToeplitzHasher::new(&SYMMETRIC_RSS_KEY).unwrap();
        prop_assert_eq!(sk.hash(&k), sk.hash(&k.reversed()));
    }

    #[test]
    fn hashes_are_never_zero_and_deterministic(k in arb_key(), seed in any::<u64>()) {
        let keyed = KeyedHasher::with_seed(seed);
        prop_assert_ne!(keyed.hash(&k), 0);
        prop_assert_eq!(keyed.hash(&k), KeyedHasher::with_seed(seed).hash(&k));
        prop_assert_ne!(ToeplitzHasher::default().hash(&k), 0);
        prop_assert_ne!(KeyedHasher::random().hash(&k), 0);
    }

    #[test]
    fn frames_roundtrip_to_keys(
        s in any::<u32>(), d in any::<u32>(), sp in any::<u16>(), dp in any::<u16>(),
        tcp in any::<bool>(), vlans in 0usize..3,
    ) {
        let (s, d): (IpAddr, IpAddr) = (Ipv4Addr::from_bits(s).into(), Ipv4Addr::from_bits(d).into());
        let mut b = if tcp { FrameBuilder::tcp(s, d, sp, dp) } else { FrameBuilder::udp(s, d, sp, dp) };
        for i in 0..vlans {
            b = b.vlan(if i == 0 && vlans == 2 { ethertype::QINQ } else { ethertype::VLAN }, i as u16);
        }
        let k = flow_key(&b.build()).unwrap().unwrap();
        let proto = if tcp { ip_proto::TCP } else { ip_proto::UDP };
        prop_assert_eq!(k, key(s, d, proto, Some((sp, dp))));
    }

    /// `flow_key` (fast path or not) equals the full parser's key or error
    /// on frames of every shape, whole, truncated, padded or with one byte
    /// of the headers changed.
    #[test]
    fn fast_and_general_paths_agree(
        six in any::<bool>(), x in any::<u32>(), sp in any::<u16>(), dp in any::<u16>(),
        shape in 0u8..6, vlans in 0usize..3, cut in 0usize..160, pad in 0usize..40,
        at in 0usize..80, byte in any::<u8>(),
    ) {
        let (s, d): (IpAddr, IpAddr) = if six {
            (Ipv6Addr::from_bits(u128::from(x)).into(), Ipv6Addr::from_bits(!u128::from(x)).into())
        } else {
            (Ipv4Addr::from_bits(x).into(), Ipv4Addr::from_bits(!x).into())
        };
        let mut b = match shape {
            0 => FrameBuilder::udp(s, d, sp, dp),
            1 => FrameBuilder::tcp(s, d, sp, dp),
            2 => FrameBuilder::udp(s, d, sp, dp).fragment(sp & 7, dp & 1 == 0),
            3 => FrameBuilder::proto(s, d, if six { ip_proto::ICMPV6 } else { ip_proto::ICMP }),
            4 if six => FrameBuilder::tcp(s, d, sp, dp).ipv6_ext(ip_proto::IPV6_DEST_OPTS, 0),
            4 => FrameBuilder::tcp(s, d, sp, dp).ipv4_options(&[1, 1, 1, 1]),
            _ => FrameBuilder::proto(s, d, ip_proto::SCTP),
        }
        .payload(&[0x5a; 12]);
        for i in 0..vlans {
            b = b.vlan(if i == 0 && vlans == 2 { ethertype::QINQ } else { ethertype::VLAN }, i as u16);
        }
        let mut f = b.build();
        f.resize(f.len() + pad, 0);
        prop_assert_eq!(flow_key(&f), flow_key_general(&f));
        prop_assert_eq!(classify_both(&f, x), classify_naive(&f, x));
        let cut = cut.min(f.len());
        prop_assert_eq!(flow_key(&f[..cut]), flow_key_general(&f[..cut]));
        prop_assert_eq!(classify_both(&f[..cut], x), classify_naive(&f[..cut], x));
        if at < f.len() {
            f[at] = byte;
            prop_assert_eq!(flow_key(&f), flow_key_general(&f));
            prop_assert_eq!(classify_both(&f, x), classify_naive(&f, x));
        }
    }
}
