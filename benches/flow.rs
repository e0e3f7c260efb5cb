//! Per-packet classification cost over batches of 64 realistic frames
//! (mixed IPv4/IPv6, UDP/TCP, some VLAN-tagged, a few fragments and
//! ICMP), `Throughput::Elements(64)` so criterion reports per-frame rates.
//! Each iteration hides the batch from the optimizer (`black_box` on the
//! slice, as a dispatcher receives it), not each frame: a per-frame
//! `black_box` forced every frame's slice through the stack, work no
//! dispatcher does.
//!
//! - `steer/flow/parse`: `flow_key` only.
//! - `steer/flow/parse_hash/{keyed,keyed_symmetric,toeplitz,toeplitz_symmetric}`:
//!   `flow_key` then the hasher.
//! - `steer/flow/parse_hash_lookup/{keyed,toeplitz}`: plus
//!   `DesiredCpuTable::lookup` of the hash (every flow recorded, 4096 slots):
//!   the library's two-call route (`flow_key`, then the hasher).
//! - `steer/flow/parse_hash_lookup/{keyed_udp4_only,keyed_redirected}`: the
//!   same over 64 untagged UDP/IPv4 frames (no branch mispredictions from
//!   the mix: the best case), and over the redirected batch (below).
//! - `steer/flow/parse_hash_lookup/keyed_umem`: `keyed` over the same 64
//!   mixed frames laid out in one buffer at 2 KiB strides, as in a UMEM
//!   (the other variants read 64 separate heap allocations).
//! - `steer/flow/classify_lookup/{keyed,keyed_udp4_only,keyed_redirected}`:
//!   what the dispatcher runs per packet (its decision work; goal: under
//!   10 ns/packet): `FlowClassifier::classify`
//!   (keyed hash), then the lookup, over the mixed batch, the
//!   UDP/IPv4-only batch, and a batch of what steer's XDP program actually
//!   redirects to AF_XDP (UDP/TCP over IPv4 and IPv6, untagged, no
//!   fragments or extension headers; the mixed batch's ICMP, fragments,
//!   tags and extension headers stay with the kernel).
//! - `steer/flow/classify_lookup/{any_keyed,toeplitz,any_toeplitz}_redirected`:
//!   the same over the redirected batch with the hasher behind
//!   `AnyHasher` (the run-time choice the engine makes) and with Toeplitz,
//!   so the cost of the choice reads against `keyed_redirected`.
//! - `steer/flow/hash/{keyed,toeplitz}`: the hashers alone over pre-parsed
//!   keys.
//!
//! Run: `cargo bench --no-default-features --bench flow`.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use steer::core::cpu::{CpuLayout, CpuSet};
use steer::core::flow::{
    flow_key, AnyHasher, Classifier, FlowClassifier, FlowHasher, FlowKey, KeyedHasher,
    ToeplitzHasher,
};
use steer::core::packet::build::FrameBuilder;
use steer::core::packet::ethernet::ethertype;
use steer::core::packet::ip_proto;
use steer::core::table::DesiredCpuTable;

const BATCH: usize = 64;

/// The client address of flow `n`, IPv4.
fn client4(n: u16) -> IpAddr {
    Ipv4Addr::new(10, 1, (n >> 8) as u8, n as u8).into()
}

/// The client address of flow `n`, IPv6.
fn client6(n: u16) -> IpAddr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, n).into()
}

/// The server's IPv4 and IPv6 addresses.
fn servers() -> (IpAddr, IpAddr) {
    (
        Ipv4Addr::new(192, 0, 2, 10).into(),
        Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 10).into(),
    )
}

/// 64 frames of distinct flows: 40% UDP/IPv4, 25% TCP/IPv4, 15% UDP/IPv6,
/// 10% TCP/IPv6 (half with an extension header), every 8th VLAN-tagged
/// (one QinQ), plus two fragments and one ICMP.
fn frames() -> Vec<Vec<u8>> {
    (0..BATCH)
        .map(|i| {
            let n = i as u16;
            let (server4, server6) = servers();
            let payload = [0xabu8; 64];
            let mut b = match i % 20 {
                0..=7 => FrameBuilder::udp(client4(n), server4, 30000 + n, 53),
                8..=12 => FrameBuilder::tcp(client4(n), server4, 40000 + n, 443),
                13..=15 => FrameBuilder::udp(client6(n), server6, 30000 + n, 4433),
                16 => FrameBuilder::tcp(client6(n), server6, 40000 + n, 443),
                17 => FrameBuilder::tcp(client6(n), server6, 40000 + n, 443)
                    .ipv6_ext(ip_proto::IPV6_DEST_OPTS, 0),
                18 => FrameBuilder::udp(client4(n), server4, 5000, 5000).fragment(0, true),
                _ => FrameBuilder::proto(client4(n), server4, ip_proto::ICMP),
            }
            .payload(&payload);
            if i == 44 {
                b = b.vlan(ethertype::QINQ, 7).vlan(ethertype::VLAN, 8);
            } else if i % 8 == 3 {
                b = b.vlan(ethertype::VLAN, 100);
            }
            b.build()
        })
        .collect()
}

/// 64 frames of distinct flows of the shapes steer's XDP program
/// (`crates/steer-xdp/bpf/steer_xdp.c`) redirects to AF_XDP: untagged UDP or
/// TCP over IPv4 (not fragmented) or IPv6 (no extension header); ICMP,
/// fragments, extension headers and tagged frames stay with the kernel.
/// 45% UDP/IPv4, 30% TCP/IPv4, 15% UDP/IPv6, 10% TCP/IPv6.
fn redirected_frames() -> Vec<Vec<u8>> {
    (0..BATCH)
        .map(|i| {
            let n = i as u16;
            let (server4, server6) = servers();
            match i % 20 {
                0..=7 | 18 => FrameBuilder::udp(client4(n), server4, 30000 + n, 53),
                8..=12 | 19 => FrameBuilder::tcp(client4(n), server4, 40000 + n, 443),
                13..=15 => FrameBuilder::udp(client6(n), server6, 30000 + n, 4433),
                _ => FrameBuilder::tcp(client6(n), server6, 40000 + n, 443),
            }
            .payload(&[0xab; 64])
            .build()
        })
        .collect()
}

/// 64 untagged UDP/IPv4 frames of distinct flows.
fn udp4_frames() -> Vec<Vec<u8>> {
    (0..BATCH as u16)
        .map(|n| {
            let src: IpAddr = Ipv4Addr::new(10, 2, 0, n as u8).into();
            let dst: IpAddr = Ipv4Addr::new(192, 0, 2, 10).into();
            FrameBuilder::udp(src, dst, 30000 + n, 53)
                .payload(&[0xab; 64])
                .build()
        })
        .collect()
}

/// UMEM chunk size the `keyed_umem` variant lays frames out at.
const CHUNK: usize = 2048;

/// `frames` copied into one buffer, frame `i` at `i * CHUNK`.
fn umem(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut buf = vec![0u8; frames.len() * CHUNK];
    for (i, f) in frames.iter().enumerate() {
        buf[i * CHUNK..][..f.len()].copy_from_slice(f);
    }
    buf
}

fn parse_hash<H: FlowHasher>(frames: &[Vec<u8>], h: &H) -> u32 {
    let mut acc = 0u32;
    for f in black_box(frames) {
        if let Ok(Some(k)) = flow_key(f) {
            acc = acc.wrapping_add(h.hash(&k));
        }
    }
    acc
}

fn parse_hash_lookup<F: AsRef<[u8]>, H: FlowHasher>(
    frames: &[F],
    h: &H,
    t: &DesiredCpuTable,
) -> usize {
    let mut acc = 0usize;
    for f in black_box(frames) {
        if let Ok(Some(k)) = flow_key(f.as_ref()) {
            acc = acc.wrapping_add(t.lookup(h.hash(&k)).unwrap_or(usize::MAX));
        }
    }
    acc
}

/// The dispatcher's per-packet decision work: its classifier, then the
/// desired-table lookup.
fn classify_lookup<H: FlowHasher>(
    frames: &[Vec<u8>],
    c: &mut FlowClassifier<H>,
    t: &DesiredCpuTable,
) -> usize {
    let mut acc = 0usize;
    for f in black_box(frames) {
        if let Ok(Some(info)) = c.classify(f, None) {
            acc = acc.wrapping_add(t.lookup(info.hash).unwrap_or(usize::MAX));
        }
    }
    acc
}

fn table_for<H: FlowHasher>(frames: &[Vec<u8>], h: &H) -> DesiredCpuTable {
    let layout = CpuLayout::uniform(64, 8).unwrap();
    let all = CpuSet::first(64);
    let t = DesiredCpuTable::new(4096, 64).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let k = flow_key(f).unwrap().unwrap();
        t.record(h.hash(&k), i % 64, &all, &layout).unwrap();
    }
    t
}

fn bench(c: &mut Criterion) {
    let frames = frames();
    assert!(frames.iter().all(|f| matches!(flow_key(f), Ok(Some(_)))));
    let keyed = KeyedHasher::random();
    let keyed_sym = KeyedHasher::random().symmetric(true);
    let toeplitz = ToeplitzHasher::default();
    let toeplitz_sym = ToeplitzHasher::default().symmetric(true);

    let mut g = c.benchmark_group("steer/flow/parse");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("flow_key", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for f in black_box(&frames) {
                n += usize::from(matches!(flow_key(f), Ok(Some(_))));
            }
            n
        })
    });
    g.finish();

    let mut g = c.benchmark_group("steer/flow/parse_hash");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("keyed", |b| b.iter(|| parse_hash(&frames, &keyed)));
    g.bench_function("keyed_symmetric", |b| {
        b.iter(|| parse_hash(&frames, &keyed_sym))
    });
    g.bench_function("toeplitz", |b| b.iter(|| parse_hash(&frames, &toeplitz)));
    g.bench_function("toeplitz_symmetric", |b| {
        b.iter(|| parse_hash(&frames, &toeplitz_sym))
    });
    g.finish();

    let tk = table_for(&frames, &keyed);
    let tt = table_for(&frames, &toeplitz);
    let mut g = c.benchmark_group("steer/flow/parse_hash_lookup");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("keyed", |b| {
        b.iter(|| parse_hash_lookup(&frames, &keyed, &tk))
    });
    g.bench_function("toeplitz", |b| {
        b.iter(|| parse_hash_lookup(&frames, &toeplitz, &tt))
    });
    let udp4 = udp4_frames();
    let tu = table_for(&udp4, &keyed);
    g.bench_function("keyed_udp4_only", |b| {
        b.iter(|| parse_hash_lookup(&udp4, &keyed, &tu))
    });
    let redirected = redirected_frames();
    let tr = table_for(&redirected, &keyed);
    g.bench_function("keyed_redirected", |b| {
        b.iter(|| parse_hash_lookup(&redirected, &keyed, &tr))
    });
    let buf = umem(&frames);
    let in_umem: Vec<&[u8]> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| &buf[i * CHUNK..][..f.len()])
        .collect();
    g.bench_function("keyed_umem", |b| {
        b.iter(|| parse_hash_lookup(&in_umem, &keyed, &tk))
    });
    g.finish();

    let mut g = c.benchmark_group("steer/flow/classify_lookup");
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut classifier = FlowClassifier::new(keyed.clone());
    g.bench_function("keyed", |b| {
        b.iter(|| classify_lookup(&frames, &mut classifier, &tk))
    });
    g.bench_function("keyed_udp4_only", |b| {
        b.iter(|| classify_lookup(&udp4, &mut classifier, &tu))
    });
    g.bench_function("keyed_redirected", |b| {
        b.iter(|| classify_lookup(&redirected, &mut classifier, &tr))
    });
    // What the engine runs: the hasher chosen at run time.
    let mut any_keyed = FlowClassifier::new(AnyHasher::from(keyed.clone()));
    g.bench_function("any_keyed_redirected", |b| {
        b.iter(|| classify_lookup(&redirected, &mut any_keyed, &tr))
    });
    let ttr = table_for(&redirected, &toeplitz);
    let mut toeplitz_classifier = FlowClassifier::new(toeplitz.clone());
    g.bench_function("toeplitz_redirected", |b| {
        b.iter(|| classify_lookup(&redirected, &mut toeplitz_classifier, &ttr))
    });
    let mut any_toeplitz = FlowClassifier::new(AnyHasher::from(toeplitz.clone()));
    g.bench_function("any_toeplitz_redirected", |b| {
        b.iter(|| classify_lookup(&redirected, &mut any_toeplitz, &ttr))
    });
    g.finish();

    let keys: Vec<FlowKey> = frames
        .iter()
        .map(|f| flow_key(f).unwrap().unwrap())
        .collect();
    let mut g = c.benchmark_group("steer/flow/hash");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("keyed", |b| {
        b.iter(|| {
            keys.iter()
                .fold(0u32, |a, k| a.wrapping_add(keyed.hash(black_box(k))))
        })
    });
    g.bench_function("toeplitz", |b| {
        b.iter(|| {
            keys.iter()
                .fold(0u32, |a, k| a.wrapping_add(toeplitz.hash(black_box(k))))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
