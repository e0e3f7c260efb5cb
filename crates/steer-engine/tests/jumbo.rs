//! Jumbo frames end to end: a veth pair with MTU 9000 on both ends, where
//! an 8000-byte datagram spans several 2048-byte UMEM frames (multi-buffer
//! AF_XDP, turned on by the engine because the MTU does not fit one frame).
//! The echo handler answers 8000-byte datagrams intact over IPv4 and IPv6
//! beside small datagrams on other flows; flow delivery hands the reader the
//! whole datagram and sends its 8000-byte reply back; the multi-buffer
//! counters say so. With multi-buffer turned off the engine refuses the MTU
//! at start. Needs root, as CI runs it.

mod support;

use steer_core::policy::Policy;
use steer_engine::engine::Engine;
use steer_engine::flows::FlowOptions;
use steer_testbed::traffic::drive_sized;
use steer_testbed::TestNet;
use steer_xdp::{MultiBuffer, Proto};
use support::{assert_accounted, echo_builder, echo_flows_on_multi_thread, PORT};

/// A veth pair with MTU 9000 on both ends.
fn jumbo_net() -> TestNet {
    let net = TestNet::new();
    net.set_mtu(9000);
    net
}

/// `rounds` rounds: on each of two jumbo flows (IPv4, IPv6) one
/// 8000-byte datagram, on each of four small flows one 64-byte one; every
/// reply must be its datagram, intact. Returns (jumbo, small) replies.
fn drive_mixed(net: &TestNet, rounds: u32) -> (u32, u32) {
    let got = drive_sized(net, PORT, &[8000, 8000, 64, 64, 64, 64], rounds);
    (got[..2].iter().sum(), got[2..].iter().sum())
}

#[test]
fn jumbo_datagrams_are_echoed_intact_beside_small_ones_over_ipv4_and_ipv6() {
    let net = jumbo_net();
    let engine = echo_builder(&net, Policy::LlcAffinity, true)
        .start()
        .expect("engine starts on a 9000-MTU veth");
    assert!(
        engine.modes().multi_buffer,
        "an MTU of 9000 does not fit a 2048-byte frame: multi-buffer is on"
    );
    let rounds = 50;
    let (jumbo, small) = drive_mixed(&net, rounds);
    assert_eq!(jumbo, 2 * rounds);
    assert_eq!(small, 4 * rounds);
    let stats = engine.stats();
    assert_eq!(
        stats.multi_buffer.received,
        u64::from(2 * rounds),
        "{:?}",
        stats.multi_buffer
    );
    assert_eq!(stats.multi_buffer.transmitted, u64::from(2 * rounds));
    assert_eq!(stats.multi_buffer.refused, 0);
    // The same per socket, as the stats socket and /metrics publish them.
    let live = engine.live_stats();
    let per_socket: u64 = live.sockets.iter().map(|s| s.multi_rx_packets).sum();
    assert_eq!(per_socket, u64::from(2 * rounds));
    let report = engine.stop().unwrap();
    assert_accounted(&report);
}

#[test]
fn four_kilobyte_frames_carry_jumbo_datagrams_in_fewer_frames() {
    let net = jumbo_net();
    let engine = echo_builder(&net, Policy::LlcAffinity, false)
        .frame_size(4096)
        .start()
        .expect("engine starts with 4096-byte frames");
    assert!(engine.modes().multi_buffer);
    let (jumbo, small) = drive_mixed(&net, 20);
    assert_eq!((jumbo, small), (40, 80));
    assert_eq!(engine.stats().multi_buffer.received, 40);
    let report = engine.stop().unwrap();
    assert_accounted(&report);
}

#[test]
fn flow_delivery_reads_and_answers_jumbo_datagrams_whole() {
    let net = jumbo_net();
    let engine = Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .frames(4096, 512)
        .deliver_flows(FlowOptions::default())
        .start()
        .expect("engine with flow delivery starts");
    let listener = engine.listener().unwrap();
    let rt = echo_flows_on_multi_thread(listener, 2);
    let (jumbo, small) = drive_mixed(&net, 20);
    assert_eq!((jumbo, small), (40, 80));
    let stats = engine.stats();
    assert_eq!(stats.multi_buffer.received, 40, "{:?}", stats.multi_buffer);
    assert_eq!(stats.multi_buffer.transmitted, 40);
    drop(rt);
    let report = engine.stop().unwrap();
    assert!(report.census_ok(), "{:?}", report.census);
}

#[test]
fn multi_buffer_off_refuses_an_mtu_one_frame_cannot_hold() {
    let net = jumbo_net();
    let err = echo_builder(&net, Policy::LlcAffinity, true)
        .multi_buffer(MultiBuffer::Off)
        .start()
        .expect_err("a 9000 MTU does not fit a 2048-byte frame");
    let line = err.to_string();
    assert!(
        line.contains("MTU 9000") && !line.contains('\n'),
        "one clear line: {line}"
    );
}
