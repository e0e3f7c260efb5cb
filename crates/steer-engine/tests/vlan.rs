//! Owned traffic on a VLAN trunk: frames with one 802.1Q tag, or an 802.1ad
//! outer and an 802.1Q inner tag (QinQ), IPv4 and IPv6, sent raw from the
//! peer to the owned UDP port, are redirected by the XDP program by their
//! inner protocol and port (counted in `ProgramStats::vlan_tagged`),
//! steered and answered by the engine's echo: every one comes back to the
//! peer with its ports swapped. Needs root, as CI runs it. (This kernel has
//! no 802.1Q module, so no VLAN device: the frames are built by hand.)

mod support;

use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use steer_core::packet::build::FrameBuilder;
use steer_core::packet::ethernet::ethertype::{QINQ, VLAN};
use steer_core::policy::Policy;
use steer_testbed::parse_mac;
use steer_testbed::TestNet;
use support::{echo_engine, send_raw, PORT};

/// An AF_PACKET socket on the peer end that sees every frame there.
fn capture(net: &TestNet) -> OwnedFd {
    net.in_ns(|| {
        let ifindex = steer_xdp::ifindex(&net.peer).unwrap();
        let all = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2) call; the fd is owned below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(all)) };
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = all;
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: `addr` outlives the call; the length is its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        fd
    })
}

/// Frames `fd` receives until `quiet` passes without one.
fn frames_until_quiet(fd: &OwnedFd, quiet: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut last = Instant::now();
    let mut buf = vec![0u8; 4096];
    while last.elapsed() < quiet {
        // SAFETY: `buf` outlives the call and its length is passed.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            got.push(buf[..n as usize].to_vec());
            last = Instant::now();
        } else {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    got
}

#[test]
fn tagged_and_qinq_frames_to_the_owned_port_are_steered_and_answered() {
    let net = TestNet::new();
    let engine = echo_engine(&net, Policy::LlcAffinity, true);
    let (host_mac, peer_mac) = net.macs();
    let (host_mac, peer_mac) = (parse_mac(&host_mac).unwrap(), parse_mac(&peer_mac).unwrap());
    let tag_sets = [vec![(VLAN, 7)], vec![(QINQ, 100), (VLAN, 7)]];
    let addrs: [(IpAddr, IpAddr); 2] = [
        (net.peer_v4.into(), net.host_v4.into()),
        (net.peer_v6.into(), net.host_v6.into()),
    ];
    let mut frames = Vec::new();
    let mut sport = 41000u16;
    for tags in &tag_sets {
        for &(peer, host) in &addrs {
            for _ in 0..5 {
                let mut b = FrameBuilder::udp(peer, host, sport, PORT).payload(b"on a trunk");
                for &(tpid, vid) in tags {
                    b = b.vlan(tpid, vid);
                }
                let mut f = b.build();
                f[..6].copy_from_slice(&host_mac);
                f[6..12].copy_from_slice(&peer_mac);
                frames.push(f);
                sport += 1;
            }
        }
    }
    let sent = frames.len() as u64;
    let cap = capture(&net);
    send_raw(&net, &frames);

    let deadline = Instant::now() + Duration::from_secs(5);
    while engine.program_stats().unwrap().vlan_tagged < sent {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            engine.program_stats().unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Every one answered: a UDP frame from the owned port back to its
    // source port (the tags may be in the frame or, once the peer's stack
    // took them off, beside it).
    let mut answered: Vec<u16> = frames_until_quiet(&cap, Duration::from_millis(500))
        .iter()
        .filter_map(|f| {
            let l = steer_core::packet::parse(f).ok()??;
            match l.ports(f).ok()? {
                Some((src, dst)) if src == PORT => Some(dst),
                _ => None,
            }
        })
        .collect();
    answered.sort_unstable();
    answered.dedup();
    assert_eq!(answered, (41000..sport).collect::<Vec<_>>());
    let stats = engine.program_stats().unwrap();
    assert_eq!(stats.vlan_tagged, sent, "{stats:?}");
    engine.stop().unwrap();
}
