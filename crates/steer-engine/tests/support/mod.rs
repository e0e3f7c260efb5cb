//! What the engine tests share: the netns test hosts of xdp-io, an echo
//! engine on them, a multi-flow UDP driver and the accounting check.

#![allow(dead_code)]

#[path = "../../../xdp-io/tests/common/mod.rs"]
pub mod net;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use net::TestNet;
use steer_core::policy::Policy;
use steer_core::runtime::WorkerState;
use steer_engine::echo::{echo_in_place, EchoMode};
use steer_engine::engine::{Engine, EngineBuilder, EngineReport, PacketContext, Verdict};
use xdp_io::Proto;

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
