//! The new-flow start bound end to end on a 1-queue veth: with
//! `max_starting` flows offered and not yet read, further new flows are
//! refused (counted as `overload`) while an established flow's datagrams
//! still arrive; reading a flow, or dropping it unread, gives its start
//! back; a full accept backlog drops new flows (the worker goes on) and
//! their starts come back. Needs root, as CI runs it.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use steer_engine::engine::Engine;
use steer_engine::flows::{Flow, FlowListener, FlowOptions, HubStats};
use steer_testbed::TestNet;
use steer_xdp::Proto;
use support::PORT;

const MAX_STARTING: usize = 4;

/// One datagram from each of `n` new sockets (new flows) in the namespace.
fn new_flows(net: &TestNet, n: usize, tag: &str) {
    net.in_ns(|| {
        let to = SocketAddr::new(net.host_v4.into(), PORT);
        let sockets: Vec<UdpSocket> = (0..n)
            .map(|_| UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap())
            .collect();
        for (i, s) in sockets.iter().enumerate() {
            s.send_to(format!("{tag} {i}").as_bytes(), to).unwrap();
        }
    });
}

/// Waits until the engine has decided on `n` new flows since `before`.
fn decided(engine: &Engine, before: &HubStats, n: u64) -> HubStats {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = engine.flow_stats().unwrap();
        let seen = (s.accepted - before.accepted) + (s.overload - before.overload);
        if seen >= n || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn accept_all(listener: &FlowListener) -> Vec<Flow> {
    std::iter::from_fn(|| listener.try_accept()).collect()
}

#[test]
fn new_flows_past_the_start_bound_are_refused_and_reads_give_starts_back() {
    let net = TestNet::with_queues(1);
    let engine = Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .frames(4096, 512)
        .deliver_flows(FlowOptions {
            max_starting: MAX_STARTING,
            ..FlowOptions::default()
        })
        .start()
        .expect("engine with flow delivery starts on the test veth");
    let listener = engine.listener().unwrap();
    let zero = engine.flow_stats().unwrap();

    // 12 new flows while nobody reads: 4 are offered, 8 refused.
    let peer = net.in_ns(|| UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap());
    let to = SocketAddr::new(net.host_v4.into(), PORT);
    peer.send_to(b"established 0", to).unwrap();
    // Offered first (the workers offer flows side by side, in no set
    // order, so the spray waits for it).
    let s = decided(&engine, &zero, 1);
    assert_eq!(s.accepted - zero.accepted, 1, "{s:?}");
    new_flows(&net, 11, "spray");
    let s = decided(&engine, &zero, 12);
    assert_eq!(s.accepted - zero.accepted, MAX_STARTING as u64, "{s:?}");
    assert_eq!(s.overload - zero.overload, 8, "{s:?}");

    // Accepting alone gives nothing back: the flows still wait to be read.
    let mut offered = accept_all(&listener);
    assert_eq!(offered.len(), MAX_STARTING);
    let before = engine.flow_stats().unwrap();
    new_flows(&net, 2, "still full");
    let s = decided(&engine, &before, 2);
    assert_eq!(s.overload - before.overload, 2, "{s:?}");

    // Read the first flow (the established one) and drop another unread:
    // two starts come back, and two of the next three new flows get in.
    let established_at = offered
        .iter()
        .position(|f| f.key().src_port() == peer.local_addr().unwrap().port())
        .expect("the first datagram's flow was offered");
    let mut established = offered.swap_remove(established_at);
    assert_eq!(
        established.try_recv().as_deref(),
        Some(&b"established 0"[..])
    );
    drop(offered.pop());
    let before = engine.flow_stats().unwrap();
    new_flows(&net, 3, "after");
    let s = decided(&engine, &before, 3);
    assert_eq!(s.accepted - before.accepted, 2, "{s:?}");
    assert_eq!(s.overload - before.overload, 1, "{s:?}");

    // The bound is full again, and the established flow is still served.
    peer.send_to(b"established 1", to).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let got = loop {
        if let Some(d) = established.try_recv() {
            break d;
        }
        assert!(
            Instant::now() < deadline,
            "the established flow's datagram never came"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(got, b"established 1");
    engine.stop().unwrap();
}

#[test]
fn a_full_backlog_drops_new_flows_and_gives_their_starts_back() {
    let net = TestNet::with_queues(1);
    let engine = Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .frames(4096, 512)
        .deliver_flows(FlowOptions {
            max_starting: 16,
            backlog: 2,
            ..FlowOptions::default()
        })
        .start()
        .expect("engine with flow delivery starts on the test veth");
    let listener = engine.listener().unwrap();
    let zero = engine.flow_stats().unwrap();
    // 5 new flows, nobody accepting: 2 wait in the backlog, 3 are dropped
    // (and the worker that dropped them goes on).
    new_flows(&net, 5, "backlog");
    let deadline = Instant::now() + Duration::from_secs(5);
    let s = loop {
        let s = engine.flow_stats().unwrap();
        if s.accepted - zero.accepted + s.accept_drops - zero.accept_drops >= 5
            || Instant::now() > deadline
        {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(s.accepted - zero.accepted, 2, "{s:?}");
    assert_eq!(s.accept_drops - zero.accept_drops, 3, "{s:?}");
    assert_eq!(s.open, 2, "the dropped flows are not open: {s:?}");
    // Their starts came back: 14 more fit once the backlog is drained.
    let waiting = accept_all(&listener);
    assert_eq!(waiting.len(), 2);
    let before = engine.flow_stats().unwrap();
    new_flows(&net, 2, "after the drops");
    let s = decided(&engine, &before, 2);
    assert_eq!(s.accepted - before.accepted, 2, "{s:?}");
    engine.stop().unwrap();
}
