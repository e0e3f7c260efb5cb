//! What the engine tests share beyond steer-testbed's test nets: an echo
//! engine on them, the multi-flow UDP driver aimed at its [`PORT`], an
//! ordered echo load with a handler that moves its flows (`ordered`),
//! malformed frames and a raw sender for them, the accounting check, and
//! readings of the engine's and the process's counters.

#![allow(dead_code)]

pub mod ordered;

use std::net::IpAddr;
use std::os::fd::AsRawFd;

use steer_core::flow::{FlowAddrs, FlowKey, Ports};
use steer_core::packet::build::FrameBuilder;
use steer_core::policy::Policy;
use steer_core::runtime::WorkerState;
use steer_engine::echo::{echo_in_place, EchoMode};
use steer_engine::engine::{
    Engine, EngineBuilder, EngineReport, EngineStats, PacketContext, Verdict,
};
use steer_testbed::{parse_mac, TestNet};
use steer_xdp::Proto;

/// The UDP port the test engines own.
pub const PORT: u16 = 7777;

/// An engine on the host end of `net` owning UDP [`PORT`] (echo handler).
pub fn echo_builder(net: &TestNet, policy: Policy, fast_path: bool) -> EngineBuilder {
    Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .policy(policy)
        .fast_path(fast_path)
        .frames(4096, 512)
        .handler(|_cpu| {
            Box::new(
                |p: &mut [u8], _: &PacketContext| match echo_in_place(p, EchoMode::Plain) {
                    Ok(len) => Verdict::Transmit(len),
                    Err(_) => Verdict::Drop,
                },
            )
        })
}

/// The key of the UDP flow from the peer's IPv4 address and `sport` to
/// the host's [`PORT`], as the engine sees its packets.
pub fn peer_udp_key(net: &TestNet, sport: u16) -> FlowKey {
    FlowKey {
        addrs: FlowAddrs::V4 {
            src: net.peer_v4,
            dst: net.host_v4,
        },
        protocol: 17,
        ports: Some(Ports {
            src: sport,
            dst: PORT,
        }),
    }
}

/// [`echo_builder`], started.
pub fn echo_engine(net: &TestNet, policy: Policy, fast_path: bool) -> Engine {
    echo_builder(net, policy, fast_path)
        .start()
        .expect("engine starts on the test veth")
}

/// Every frame the engine received was answered, refused or consumed, and
/// every UMEM frame is back with the sockets.
pub fn assert_accounted(report: &EngineReport) {
    let t = &report.stats.total;
    assert!(report.census_ok(), "frame census: {:?}", report.census);
    assert_eq!(
        t.core.rx,
        t.engine.tx + t.drops() + t.engine.consumed,
        "rx = tx + drops + consumed: {t:?}"
    );
    assert!(report
        .workers
        .iter()
        .all(|(_, s)| *s == WorkerState::Stopped));
}

/// This process's resident set, in KiB (`VmRSS`).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The packets `stats` counts as processed on `cpu` (which must have a row).
pub fn processed_on(stats: &EngineStats, cpu: usize) -> u64 {
    stats
        .per_cpu
        .iter()
        .find(|r| r.cpu == cpu)
        .unwrap_or_else(|| panic!("no row for CPU {cpu}: {:?}", stats.per_cpu))
        .core
        .processed
}

/// Sends `per_flow` numbered datagrams on each flow to [`PORT`] in bursts
/// and collects the replies ([`steer_testbed::traffic::drive_flows`]).
pub fn drive_flows(net: &TestNet, flows: usize, per_flow: u32, burst: u32) -> Vec<Vec<u32>> {
    steer_testbed::traffic::drive_flows(net, PORT, flows, per_flow, burst)
}

/// Frames at the owned port the engine must count and drop, never choke
/// on: truncated and inconsistent headers, fragments, TCP, another IP
/// protocol and garbage, addressed to the host end of `net`.
pub fn malformed_frames(net: &TestNet) -> Vec<Vec<u8>> {
    let (host, peer): (IpAddr, IpAddr) = (net.host_v4.into(), net.peer_v4.into());
    let good = FrameBuilder::udp(peer, host, 40000, PORT)
        .payload(b"0123456789abcdef")
        .build();
    let mut bad = Vec::new();
    // Truncated inside the UDP header, and inside the payload's claimed length.
    bad.push(good[..14 + 20 + 4].to_vec());
    bad.push(good[..good.len() - 6].to_vec());
    // IHL below 5, and a total length beyond the frame.
    let mut ihl = good.clone();
    ihl[14] = 0x44;
    bad.push(ihl);
    let mut total = good.clone();
    total[16..18].copy_from_slice(&1400u16.to_be_bytes());
    bad.push(total);
    // A UDP length beyond the datagram.
    let mut udp_len = good.clone();
    udp_len[14 + 20 + 4..14 + 20 + 6].copy_from_slice(&999u16.to_be_bytes());
    bad.push(udp_len);
    // Fragments of a datagram to the owned port (the echo does not reassemble).
    bad.push(
        FrameBuilder::udp(peer, host, 40001, PORT)
            .payload(&[7; 64])
            .fragment(0, true)
            .build(),
    );
    bad.push(
        FrameBuilder::udp(peer, host, 40001, PORT)
            .payload(&[7; 64])
            .fragment(8, false)
            .build(),
    );
    // Not UDP: TCP and a raw protocol to the owned port number.
    bad.push(FrameBuilder::tcp(peer, host, 40002, PORT).build());
    bad.push(
        FrameBuilder::proto(peer, host, 253)
            .payload(&[1; 32])
            .build(),
    );
    // Garbage with an IPv4 EtherType.
    let mut junk = vec![0xa5u8; 60];
    junk[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    bad.push(junk);
    let macs = net.macs();
    let host_mac = parse_mac(&macs.0).expect("the host end's MAC");
    for f in &mut bad {
        f[..6].copy_from_slice(&host_mac);
    }
    bad
}

/// An AF_PACKET socket on the peer, for frames a UDP socket cannot send.
pub fn send_raw(net: &TestNet, frames: &[Vec<u8>]) {
    net.in_ns(|| {
        let ifindex = steer_xdp::ifindex(&net.peer).unwrap();
        // SAFETY: plain socket(2) call; the fd is closed below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        let sock = std::fs::File::from(unsafe {
            // SAFETY: `fd` is a fresh descriptor we own.
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        });
        for f in frames {
            // SAFETY: sockaddr_ll is plain data; zero is a valid start.
            let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            addr.sll_family = libc::AF_PACKET as u16;
            addr.sll_ifindex = ifindex as i32;
            addr.sll_halen = 6;
            addr.sll_addr[..6].copy_from_slice(&f[..6]);
            // SAFETY: `f` and `addr` outlive the call; lengths are theirs.
            let rc = unsafe {
                libc::sendto(
                    sock.as_raw_fd(),
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    (&addr as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert_eq!(rc, f.len() as isize, "{}", std::io::Error::last_os_error());
        }
    });
}

/// A tokio multi-thread runtime with `threads` workers that accepts every
/// flow of `listener` and echoes it from a task of its own.
pub fn echo_flows_on_multi_thread(
    listener: steer_engine::flows::FlowListener,
    threads: usize,
) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap();
    rt.spawn(async move {
        while let Some(mut flow) = listener.accept().await {
            tokio::spawn(async move {
                while let Some(d) = flow.recv().await {
                    flow.send(&d).unwrap();
                }
            });
        }
    });
    rt
}
