//! What the engine tests share: the netns test hosts of xdp-io, an echo
//! engine on them, a multi-flow UDP driver, an ordered echo load with a
//! handler that moves its flows (`ordered`) and the accounting check.

#![allow(dead_code)]

#[path = "../../../xdp-io/tests/common/mod.rs"]
pub mod net;
pub mod ordered;

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
