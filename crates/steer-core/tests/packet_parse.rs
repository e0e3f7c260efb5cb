//! Parser behaviour over whole frames: every layer, malformed and truncated
//! input, VLAN stacks, IPv6 extension chains and fragments; random bytes
//! never panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use steer_core::flow::flow_key;
use steer_core::packet::build::FrameBuilder;
use steer_core::packet::ethernet::ethertype;
use steer_core::packet::{
    ip_proto, parse, EthernetFrame, Fragment, IpVersion, Ipv4Packet, Ipv6Packet, Layer, ParseError,
    TcpPacket, UdpPacket, MAX_IPV6_EXT_HEADERS,
};

fn v4(x: u8) -> IpAddr {
    Ipv4Addr::new(192, 0, 2, x).into()
}

fn v6(x: u16) -> IpAddr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, x).into()
}

/// A spread of valid frames covering every layer.
fn samples() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "udp4",
            FrameBuilder::udp(v4(1), v4(2), 1000, 53)
                .payload(b"abc")
                .build(),
        ),
        (
            "tcp4",
            FrameBuilder::tcp(v4(1), v4(2), 40000, 80)
                .payload(b"GET /")
                .build(),
        ),
        (
            "tcp4 options",
            FrameBuilder::tcp(v4(1), v4(2), 1, 2)
                .ipv4_options(&[1, 1, 1, 0, 7, 4, 0, 0])
                .build(),
        ),
        (
            "udp6",
            FrameBuilder::udp(v6(1), v6(2), 5353, 5353)
                .payload(b"x")
                .build(),
        ),
        ("tcp6", FrameBuilder::tcp(v6(1), v6(2), 22, 50000).build()),
        (
            "udp6 ext",
            FrameBuilder::udp(v6(1), v6(2), 1, 2)
                .ipv6_ext(ip_proto::HOP_BY_HOP, 0)
                .ipv6_ext(ip_proto::IPV6_ROUTING, 1)
                .ipv6_ext(ip_proto::IPV6_DEST_OPTS, 2)
                .payload(b"hi")
                .build(),
        ),
        (
            "qinq udp4",
            FrameBuilder::udp(v4(1), v4(2), 3, 4)
                .vlan(ethertype::QINQ, 100)
                .vlan(ethertype::VLAN, 200)
                .build(),
        ),
        (
            "vlan tcp6",
            FrameBuilder::tcp(v6(1), v6(2), 3, 4)
                .vlan(ethertype::VLAN, 5)
                .build(),
        ),
        (
            "icmp4",
            FrameBuilder::proto(v4(1), v4(2), ip_proto::ICMP)
                .payload(&[8, 0, 0, 0])
                .build(),
        ),
        (
            "frag4 first",
            FrameBuilder::udp(v4(1), v4(2), 9, 9)
                .payload(&[0; 16])
                .fragment(0, true)
                .build(),
        ),
        (
            "frag4 later",
            FrameBuilder::udp(v4(1), v4(2), 9, 9)
                .payload(&[0; 16])
                .fragment(3, false)
                .build(),
        ),
        (
            "frag6 first",
            FrameBuilder::udp(v6(1), v6(2), 9, 9)
                .payload(&[0; 16])
                .fragment(0, true)
                .build(),
        ),
        (
            "frag6 later",
            FrameBuilder::udp(v6(1), v6(2), 9, 9)
                .payload(&[0; 16])
                .fragment(3, true)
                .build(),
        ),
    ]
}

#[test]
fn samples_parse() {
    for (name, f) in samples() {
        let l = parse(&f)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .expect(name);
        assert!(
            l.l3_offset <= l.l4_offset && l.l4_offset <= l.l3_end && l.l3_end <= f.len(),
            "{name}"
        );
        flow_key(&f)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .expect(name);
    }
}

#[test]
fn every_proper_prefix_is_an_error() {
    // Each sample is exactly as long as its headers say: any cut is caught
    // (by a header length check or a total/payload length check).
    for (name, f) in samples() {
        for cut in 0..f.len() {
            let r = parse(&f[..cut]);
            assert!(r.is_err(), "{name} cut at {cut}: {r:?}");
            assert!(flow_key(&f[..cut]).is_err(), "{name} cut at {cut}");
        }
    }
}

#[test]
fn truncation_names_the_layer() {
    let f = FrameBuilder::udp(v6(1), v6(2), 1, 2)
        .vlan(ethertype::VLAN, 1)
        .build();
    assert_eq!(parse(&f[..13]), Err(ParseError::Truncated(Layer::Ethernet)));
    assert_eq!(parse(&f[..17]), Err(ParseError::Truncated(Layer::Vlan)));
    assert_eq!(
        parse(&f[..18 + 39]),
        Err(ParseError::Truncated(Layer::Ipv6))
    );
    assert_eq!(parse(&f[..18 + 40]), Err(ParseError::BadPayloadLength));
}

#[test]
fn ethernet_padding_is_ignored() {
    let mut f = FrameBuilder::udp(v4(1), v4(2), 1000, 53)
        .payload(b"abc")
        .build();
    let len = f.len();
    f.resize(60, 0);
    let l = parse(&f).unwrap().unwrap();
    assert_eq!(l.l3_end, len);
    assert_eq!(&f[l.payload_range(&f).unwrap()], b"abc");
}

#[test]
fn udp_and_tcp_payload_ranges() {
    let f = FrameBuilder::udp(v6(1), v6(2), 1, 2)
        .ipv6_ext(ip_proto::IPV6_DEST_OPTS, 0)
        .payload(b"payload!")
        .build();
    let l = parse(&f).unwrap().unwrap();
    assert_eq!(l.l4_offset, 14 + 40 + 8);
    assert_eq!(&f[l.payload_range(&f).unwrap()], b"payload!");

    let f = FrameBuilder::tcp(v4(1), v4(2), 1, 2)
        .ipv4_options(&[1, 1, 1, 1])
        .payload(b"data")
        .build();
    let l = parse(&f).unwrap().unwrap();
    assert_eq!(l.l4_offset, 14 + 24);
    assert_eq!(&f[l.payload_range(&f).unwrap()], b"data");
    let tcp = TcpPacket::new_checked(l.l4(&f)).unwrap();
    assert!(tcp.verify_checksum_v4(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)));

    let icmp = FrameBuilder::proto(v4(1), v4(2), ip_proto::ICMP)
        .payload(&[0; 8])
        .build();
    let l = parse(&icmp).unwrap().unwrap();
    assert_eq!(l.payload_range(&icmp), Err(ParseError::NotUdpOrTcp));
}

#[test]
fn bad_l4_lengths() {
    let mut f = FrameBuilder::udp(v4(1), v4(2), 1, 2)
        .payload(b"abcd")
        .build();
    let l = parse(&f).unwrap().unwrap();
    // UDP length beyond the datagram.
    f[l.l4_offset + 5] = 200;
    assert_eq!(l.payload_range(&f), Err(ParseError::BadL4Length));
    // UDP length below the header.
    f[l.l4_offset + 5] = 7;
    assert_eq!(l.payload_range(&f), Err(ParseError::BadL4Length));

    let mut f = FrameBuilder::tcp(v4(1), v4(2), 1, 2).payload(b"ab").build();
    let l = parse(&f).unwrap().unwrap();
    f[l.l4_offset + 12] = 0x40; // data offset 16 bytes
    assert_eq!(l.payload_range(&f), Err(ParseError::BadL4Length));
    f[l.l4_offset + 12] = 0x60; // 24 bytes, only 22 present
    assert_eq!(l.payload_range(&f), Err(ParseError::BadL4Length));
}

#[test]
fn bad_ihl_and_version() {
    let f = FrameBuilder::udp(v4(1), v4(2), 1, 2).build();
    for ihl in 0..5u8 {
        let mut g = f.clone();
        g[14] = 0x40 | ihl;
        assert_eq!(parse(&g), Err(ParseError::BadIhl), "ihl {ihl}");
    }
    // IHL 15 = 60 bytes: past the total length (and the buffer here).
    let mut g = f.clone();
    g[14] = 0x4f;
    assert!(parse(&g).is_err());
    let mut g = f.clone();
    g[14] = 0x65;
    assert_eq!(parse(&g), Err(ParseError::BadIpVersion));
    let v6f = FrameBuilder::udp(v6(1), v6(2), 1, 2).build();
    let mut g = v6f.clone();
    g[14] = 0x45;
    assert_eq!(parse(&g), Err(ParseError::BadIpVersion));
}

#[test]
fn total_length_checks() {
    let f = FrameBuilder::udp(v4(1), v4(2), 1, 2)
        .payload(b"abcd")
        .build();
    let mut g = f.clone();
    let total = (f.len() - 14) as u16;
    g[16..18].copy_from_slice(&(total + 1).to_be_bytes());
    assert_eq!(parse(&g), Err(ParseError::BadTotalLength));
    g[16..18].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(parse(&g), Err(ParseError::BadTotalLength));
    // Shorter than the buffer is fine (padding) but the UDP header no
    // longer fits: the ports cannot be read.
    g[16..18].copy_from_slice(&22u16.to_be_bytes());
    assert_eq!(flow_key(&g), Err(ParseError::Truncated(Layer::Ports)));
}

#[test]
fn ipv4_options_are_skipped() {
    let f = FrameBuilder::udp(v4(1), v4(2), 7, 8)
        .ipv4_options(&[0x94, 4, 0, 0, 1, 1, 1, 0])
        .build();
    let l = parse(&f).unwrap().unwrap();
    assert_eq!(l.l4_offset - l.l3_offset, 28);
    let ip = Ipv4Packet::new_checked(&f[l.l3_offset..]).unwrap();
    assert_eq!(ip.options(), &[0x94, 4, 0, 0, 1, 1, 1, 0]);
    assert!(ip.verify_checksum());
    let k = flow_key(&f).unwrap().unwrap();
    assert_eq!((k.src_port(), k.dst_port()), (7, 8));
}

#[test]
fn vlan_stacks() {
    let single = FrameBuilder::udp(v4(1), v4(2), 1, 2)
        .vlan(ethertype::VLAN, 42)
        .build();
    let l = parse(&single).unwrap().unwrap();
    assert_eq!((l.vlan_tags, l.vlan_ids, l.l3_offset), (1, [42, 0], 18));

    let qinq = FrameBuilder::udp(v4(1), v4(2), 1, 2)
        .vlan(ethertype::QINQ, 10)
        .vlan(ethertype::VLAN, 20)
        .build();
    let l = parse(&qinq).unwrap().unwrap();
    assert_eq!((l.vlan_tags, l.vlan_ids, l.l3_offset), (2, [10, 20], 22));

    // Double 802.1Q also counts as two tags.
    let dbl = FrameBuilder::udp(v4(1), v4(2), 1, 2)
        .vlan(ethertype::VLAN, 1)
        .vlan(ethertype::VLAN, 2)
        .build();
    assert_eq!(parse(&dbl).unwrap().unwrap().vlan_tags, 2);

    let triple = FrameBuilder::udp(v4(1), v4(2), 1, 2)
        .vlan(ethertype::QINQ, 1)
        .vlan(ethertype::QINQ, 2)
        .vlan(ethertype::VLAN, 3)
        .build();
    assert_eq!(parse(&triple), Err(ParseError::TooManyVlanTags));

    // The same flow with and without tags has the same key.
    let plain = FrameBuilder::udp(v4(1), v4(2), 1, 2).build();
    assert_eq!(flow_key(&plain), flow_key(&qinq));

    // A tagged non-IP frame has no flow.
    let mut arp = single.clone();
    arp[16..18].copy_from_slice(&ethertype::ARP.to_be_bytes());
    assert_eq!(parse(&arp), Ok(None));
}

#[test]
fn ipv6_extension_chain() {
    let f = FrameBuilder::tcp(v6(1), v6(2), 1, 2)
        .ipv6_ext(ip_proto::HOP_BY_HOP, 0)
        .ipv6_ext(ip_proto::IPV6_DEST_OPTS, 1)
        .ipv6_ext(ip_proto::IPV6_ROUTING, 0)
        .build();
    let l = parse(&f).unwrap().unwrap();
    assert_eq!(
        (l.ip, l.protocol, l.fragment),
        (IpVersion::V6, ip_proto::TCP, None)
    );
    assert_eq!(l.l4_offset, 14 + 40 + 8 + 16 + 8);

    // Hop-by-hop anywhere but first is rejected.
    let bad = FrameBuilder::tcp(v6(1), v6(2), 1, 2)
        .ipv6_ext(ip_proto::IPV6_DEST_OPTS, 0)
        .ipv6_ext(ip_proto::HOP_BY_HOP, 0)
        .build();
    assert_eq!(parse(&bad), Err(ParseError::BadExtHeader));

    // The walk is bounded.
    let mut ok = FrameBuilder::udp(v6(1), v6(2), 1, 2);
    for _ in 0..MAX_IPV6_EXT_HEADERS {
        ok = ok.ipv6_ext(ip_proto::IPV6_DEST_OPTS, 0);
    }
    assert!(parse(&ok.build()).is_ok());
    let too_many = ok.ipv6_ext(ip_proto::IPV6_DEST_OPTS, 0).build();
    assert_eq!(parse(&too_many), Err(ParseError::TooManyExtHeaders));

    // An extension header whose length runs past the payload.
    let mut g = FrameBuilder::udp(v6(1), v6(2), 1, 2)
        .ipv6_ext(ip_proto::IPV6_ROUTING, 0)
        .build();
    g[14 + 40 + 1] = 5;
    assert_eq!(parse(&g), Err(ParseError::Truncated(Layer::Ipv6Ext)));

    // A chain that loops to itself until the payload ends.
    let mut g = FrameBuilder::proto(v6(1), v6(2), ip_proto::IPV6_DEST_OPTS)
        .payload(&[60, 0, 0, 0, 0, 0, 0, 0])
        .build();
    g[14 + 6] = ip_proto::IPV6_DEST_OPTS;
    assert_eq!(parse(&g), Err(ParseError::Truncated(Layer::Ipv6Ext)));

    // No next header: a flow on addresses and protocol 59.
    let nn = FrameBuilder::proto(v6(1), v6(2), ip_proto::IPV6_NO_NEXT).build();
    let k = flow_key(&nn).unwrap().unwrap();
    assert_eq!((k.protocol, k.ports), (ip_proto::IPV6_NO_NEXT, None));
}

#[test]
fn fragments() {
    for (a, b) in [(v4(1), v4(2)), (v6(1), v6(2))] {
        let first = FrameBuilder::udp(a, b, 1111, 2222)
            .payload(&[1; 24])
            .fragment(0, true)
            .build();
        let middle = FrameBuilder::udp(a, b, 1111, 2222)
            .payload(&[2; 24])
            .fragment(4, true)
            .build();
        let last = FrameBuilder::udp(a, b, 1111, 2222)
            .payload(&[3; 8])
            .fragment(7, false)
            .build();
        let lf = parse(&first).unwrap().unwrap();
        let lm = parse(&middle).unwrap().unwrap();
        let ll = parse(&last).unwrap().unwrap();
        assert_eq!(lf.fragment, Some(Fragment::First));
        assert_eq!(lm.fragment, Some(Fragment::Later));
        assert_eq!(ll.fragment, Some(Fragment::Later));
        assert_eq!((lf.protocol, lm.protocol), (ip_proto::UDP, ip_proto::UDP));
        let k = flow_key(&first).unwrap().unwrap();
        assert_eq!(k.ports, None);
        assert_eq!(flow_key(&middle).unwrap(), Some(k));
        assert_eq!(flow_key(&last).unwrap(), Some(k));
        assert_eq!(lm.payload_range(&middle), Err(ParseError::NotFirstFragment));
        // The first fragment still has its UDP header at l4_offset.
        let udp = UdpPacket::new_unchecked(lf.l4(&first));
        assert_eq!((udp.src_port(), udp.dst_port()), (1111, 2222));
    }
}

#[test]
fn views_check_len_then_never_panic() {
    // For every length, either check_len fails or every accessor works.
    let f = FrameBuilder::tcp(v6(1), v6(2), 1, 2)
        .payload(&[9; 10])
        .build();
    for n in 0..=f.len() {
        let b = &f[..n];
        if let Ok(e) = EthernetFrame::new_checked(b) {
            let _ = (e.dst_addr(), e.src_addr(), e.ethertype(), e.payload().len());
        }
        let ip = b.get(14..).unwrap_or_default();
        if let Ok(p) = Ipv6Packet::new_checked(ip) {
            let _ = (
                p.src_addr(),
                p.dst_addr(),
                p.payload().len(),
                p.flow_label(),
            );
        }
        let l4 = b.get(54..).unwrap_or_default();
        if let Ok(t) = TcpPacket::new_checked(l4) {
            let _ = (t.seq(), t.ack(), t.flags(), t.window(), t.payload().len());
        }
        if let Ok(u) = UdpPacket::new_checked(l4) {
            let _ = (u.len(), u.checksum(), u.payload().len());
        }
        if let Ok(p) = Ipv4Packet::new_checked(ip) {
            let _ = (p.options().len(), p.payload().len(), p.frag_offset());
        }
    }
}

#[test]
fn echo_in_place_keeps_checksums() {
    for (a, b) in [(v4(1), v4(2)), (v6(1), v6(2))] {
        let mut f = FrameBuilder::udp(a, b, 4000, 7).payload(b"echo me").build();
        let l = parse(&f).unwrap().unwrap();
        EthernetFrame::new_unchecked(&mut f[..]).swap_addrs();
        match l.ip {
            IpVersion::V4 => {
                let mut ip = Ipv4Packet::new_unchecked(&mut f[l.l3_offset..l.l3_end]);
                ip.swap_addrs();
                assert!(ip.verify_checksum());
            }
            IpVersion::V6 => Ipv6Packet::new_unchecked(&mut f[l.l3_offset..l.l3_end]).swap_addrs(),
        }
        UdpPacket::new_unchecked(&mut f[l.l4_offset..l.l3_end]).swap_ports();
        let udp = UdpPacket::new_checked(&f[l.l4_offset..l.l3_end]).unwrap();
        assert_eq!((udp.src_port(), udp.dst_port()), (7, 4000));
        match (a, b) {
            (IpAddr::V4(a), IpAddr::V4(b)) => assert!(udp.verify_checksum_v4(b, a)),
            (IpAddr::V6(a), IpAddr::V6(b)) => assert!(udp.verify_checksum_v6(b, a)),
            _ => unreachable!(),
        }
        let k = flow_key(&f).unwrap().unwrap();
        assert_eq!(
            Some(k.reversed()),
            flow_key(&FrameBuilder::udp(a, b, 4000, 7).build()).unwrap()
        );
    }
}

#[test]
fn corrupted_checksum_is_detected() {
    let mut f = FrameBuilder::udp(v4(1), v4(2), 1, 2)
        .payload(b"abcdef")
        .build();
    let l = parse(&f).unwrap().unwrap();
    let end = f.len() - 1;
    f[end] ^= 0x01;
    let udp = UdpPacket::new_checked(&f[l.l4_offset..l.l3_end]).unwrap();
    assert!(!udp.verify_checksum_v4(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(Some(l)) = parse(&bytes) {
            prop_assert!(l.l3_end <= bytes.len());
            let _ = l.payload_range(&bytes);
            let _ = l.ports(&bytes);
        }
        let _ = flow_key(&bytes);
    }

    #[test]
    fn mutated_frames_never_panic(
        which in 0usize..13,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let mut f = samples().swap_remove(which).1;
        for (at, v) in edits {
            let n = f.len();
            f[at % n] = v;
        }
        let len = f.len();
        f.truncate(cut % (len + 1));
        if let Ok(Some(l)) = parse(&f) {
            prop_assert!(l.l3_offset <= l.l4_offset && l.l4_offset <= l.l3_end && l.l3_end <= f.len());
            if let Ok(r) = l.payload_range(&f) {
                prop_assert!(r.start <= r.end && r.end <= f.len());
            }
        }
        let _ = flow_key(&f);
    }
}
