//! Stable regression test over the fuzz seeds committed in the workspace's
//! `fuzz/seeds/parse/` (and any crash reproducers later added there): each
//! must go through the parser and the flow key without panicking and with
//! the documented invariants. Runs on stable, without cargo-fuzz.
//!
//! The seeds are built by `FrameBuilder`; `seeds_match_the_builder` checks
//! the committed files still equal what the builder makes (so a builder or
//! format change cannot silently leave stale seeds), and rewrites them when
//! run with `STEER_REGENERATE_SEEDS=1`.

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

mod common;

use common::classify::{classify_both, classify_naive};
use steer_core::flow::{flow_key, promises, FlowHasher, ToeplitzHasher};
use steer_core::packet::build::FrameBuilder;
use steer_core::packet::ethernet::ethertype;
use steer_core::packet::ip_proto;

fn seed_dir() -> PathBuf {
    // The workspace's fuzz crate, two levels up from crates/steer-core.
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/parse")
}

fn check(data: &[u8]) {
    // The promises the fuzz target checks too.
    assert_eq!(promises::check(data), Ok(()), "{data:02x?}");
    if let Ok(Some(k)) = flow_key(data) {
        assert_ne!(ToeplitzHasher::default().hash(&k), 0);
    }
    // The classifier's fast path gives what the full parser and the hasher
    // give, errors included.
    assert_eq!(classify_both(data, 0x5eed), classify_naive(data, 0x5eed));
}

#[test]
fn seeds_pass() {
    let mut n = 0;
    let mut parsed = 0;
    for entry in fs::read_dir(seed_dir()).expect("fuzz/seeds/parse exists") {
        let path = entry.unwrap().path();
        let data = fs::read(&path).unwrap();
        check(&data);
        for cut in 0..data.len() {
            check(&data[..cut]);
        }
        if matches!(flow_key(&data), Ok(Some(_))) {
            parsed += 1;
        }
        n += 1;
    }
    assert!(n >= 10, "only {n} seeds");
    // Most seeds are valid frames with a flow.
    assert!(parsed >= n / 2, "{parsed} of {n} seeds have a flow");
}

#[test]
fn seeds_match_the_builder() {
    let a4: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
    let b4: IpAddr = Ipv4Addr::new(10, 0, 0, 2).into();
    let a6: IpAddr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into();
    let b6: IpAddr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).into();
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        (
            "udp4",
            FrameBuilder::udp(a4, b4, 1000, 53).payload(b"q").build(),
        ),
        (
            "tcp4_opts",
            FrameBuilder::tcp(a4, b4, 1, 2)
                .ipv4_options(&[1, 1, 1, 0])
                .build(),
        ),
        (
            "udp6",
            FrameBuilder::udp(a6, b6, 1, 2).payload(b"x").build(),
        ),
        ("tcp6", FrameBuilder::tcp(a6, b6, 22, 40000).build()),
        (
            "udp6_ext",
            FrameBuilder::udp(a6, b6, 1, 2)
                .ipv6_ext(ip_proto::HOP_BY_HOP, 0)
                .ipv6_ext(ip_proto::IPV6_ROUTING, 1)
                .ipv6_ext(ip_proto::IPV6_DEST_OPTS, 0)
                .build(),
        ),
        (
            "qinq_udp4",
            FrameBuilder::udp(a4, b4, 3, 4)
                .vlan(ethertype::QINQ, 1)
                .vlan(ethertype::VLAN, 2)
                .build(),
        ),
        (
            "vlan_tcp6",
            FrameBuilder::tcp(a6, b6, 3, 4)
                .vlan(ethertype::VLAN, 3)
                .build(),
        ),
        (
            "frag4_first",
            FrameBuilder::udp(a4, b4, 5, 6)
                .payload(&[0; 16])
                .fragment(0, true)
                .build(),
        ),
        (
            "frag4_later",
            FrameBuilder::udp(a4, b4, 5, 6)
                .payload(&[0; 8])
                .fragment(2, false)
                .build(),
        ),
        (
            "frag6_first",
            FrameBuilder::udp(a6, b6, 5, 6)
                .payload(&[0; 16])
                .fragment(0, true)
                .build(),
        ),
        (
            "frag6_later",
            FrameBuilder::udp(a6, b6, 5, 6)
                .payload(&[0; 8])
                .fragment(2, false)
                .build(),
        ),
        (
            "icmp4",
            FrameBuilder::proto(a4, b4, ip_proto::ICMP)
                .payload(&[8, 0, 0, 0])
                .build(),
        ),
        ("arp", {
            let mut f = FrameBuilder::udp(a4, b4, 1, 2).build();
            f[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
            f
        }),
    ];
    let dir = seed_dir();
    if std::env::var_os("STEER_REGENERATE_SEEDS").is_some() {
        fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &seeds {
            fs::write(dir.join(name), bytes).unwrap();
        }
    }
    for (name, bytes) in &seeds {
        let committed = fs::read(dir.join(name))
            .unwrap_or_else(|e| panic!("seed {name}: {e} (STEER_REGENERATE_SEEDS=1 writes it)"));
        assert_eq!(
            &committed, bytes,
            "seed {name} is stale (STEER_REGENERATE_SEEDS=1 rewrites it)"
        );
    }
}
