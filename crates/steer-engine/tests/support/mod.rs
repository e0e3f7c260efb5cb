//! What the engine tests share: the netns test hosts of steer-xdp, an echo
//! engine on them, a multi-flow UDP driver, an ordered echo load with a
//! handler that moves its flows (`ordered`), malformed frames and a raw
//! sender for them, and the accounting check.

#![allow(dead_code)]

#[path = "../../../steer-xdp/tests/common/mod.rs"]
pub mod net;
pub mod ordered;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use net::TestNet;
use steer_core::flow::{FlowAddrs, FlowKey, Ports};
use steer_core::packet::build::FrameBuilder;
use steer_core::policy::Policy;
use steer_core::runtime::WorkerState;
use steer_engine::echo::{echo_in_place, EchoMode};
use steer_engine::engine::{Engine, EngineBuilder, EngineReport, PacketContext, Verdict};
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

/// Sends `per_flow` numbered datagrams on each flow in bursts and collects
/// the replies; returns the sequence numbers each flow got back, in order.
pub fn drive_flows(net: &TestNet, flows: usize, per_flow: u32, burst: u32) -> Vec<Vec<u32>> {
    net.in_ns(|| {
        let sockets: Vec<(UdpSocket, SocketAddr)> = (0..flows)
            .map(|i| {
                let (local, remote): (IpAddr, IpAddr) = if i % 2 == 0 {
                    (net.peer_v4.into(), net.host_v4.into())
                } else {
                    (net.peer_v6.into(), net.host_v6.into())
                };
                let s = UdpSocket::bind(SocketAddr::new(local, 0)).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                (s, SocketAddr::new(remote, PORT))
            })
            .collect();
        let mut got = vec![Vec::new(); flows];
        let mut seq = 0;
        while seq < per_flow {
            let n = burst.min(per_flow - seq);
            for (s, to) in &sockets {
                for k in seq..seq + n {
                    let mut msg = k.to_be_bytes().to_vec();
                    msg.extend_from_slice(b" steer echo test payload");
                    s.send_to(&msg, to).unwrap();
                }
            }
            for (i, (s, _)) in sockets.iter().enumerate() {
                let mut buf = [0u8; 256];
                for _ in 0..n {
                    match s.recv_from(&mut buf) {
                        Ok((len, _)) if len >= 4 => {
                            got[i].push(u32::from_be_bytes(buf[..4].try_into().unwrap()))
                        }
                        _ => break,
                    }
                }
            }
            seq += n;
        }
        got
    })
}

/// `GET path` from an HTTP server that closes after one response (the
/// engine's `/metrics`); returns the status line and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// Runs `promtool check metrics` (Debian's `prometheus` package) on
/// `text`; returns what it said when it refuses it.
pub fn promtool_check(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian's prometheus package: scripts/setup.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The sum of every sample of `family` in Prometheus text.
pub fn metric_sum(text: &str, family: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
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
    let host_mac = parse_mac(&macs.0);
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

/// `aa:bb:..` as bytes.
pub fn parse_mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}
