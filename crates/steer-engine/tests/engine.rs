//! The engine end to end on a 2-queue veth pair: the UDP echo over IPv4 and
//! IPv6 with many flows under both policies and with the fast path on and
//! off (every datagram answered, in order per flow, every frame back at
//! stop); malformed and foreign frames at the owned port. of a bad start. Needs root, as CI runs it.

mod support;

use std::net::IpAddr;
use std::os::fd::AsRawFd;

use steer_core::packet::build::FrameBuilder;
use steer_core::policy::Policy;
use steer_core::runtime::WorkerState;
use support::net::TestNet;
use support::{assert_accounted, drive_flows, echo_builder, echo_engine, PORT};

#[test]
fn echo_answers_every_datagram_in_order_per_flow_under_each_policy_and_fast_path() {
    for (policy, fast_path) in [(Policy::LlcAffinity, true), (Policy::Always, false)] {
        let net = TestNet::new();
        let engine = echo_engine(&net, policy, fast_path);
        let (flows, per_flow) = (8, 300);
        let got = drive_flows(&net, flows, per_flow, 25);
        let stats = engine.stats();
        let report = engine.stop().unwrap();
        for (i, seqs) in got.iter().enumerate() {
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "{policy:?}/fast {fast_path}: flow {i} reordered: {seqs:?}"
            );
            assert_eq!(
                seqs.len(),
                per_flow as usize,
                "{policy:?}/fast {fast_path}: flow {i} lost replies; stats\n{}",
                stats.table(None)
            );
        }
        let t = &report.stats.total;
        let sent = (flows as u64) * u64::from(per_flow);
        assert_eq!(t.core.rx, sent, "{}", report.stats.table(None));
        assert_eq!(t.engine.tx, sent);
        if fast_path {
            assert!(t.core.fast_path > 0, "some flows are served inline");
        } else {
            assert_eq!(t.core.fast_path, 0);
        }
        assert_accounted(&report);
    }
}

/// The `se.slice` (ns) of every steer worker thread of this process.
fn worker_slices() -> Vec<u64> {
    let mut slices = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("steer-worker") {
            continue;
        }
        let sched = std::fs::read_to_string(task.path().join("sched")).unwrap_or_default();
        if let Some(v) = sched
            .lines()
            .find(|l| l.starts_with("se.slice"))
            .and_then(|l| l.split(':').nth(1))
        {
            slices.push(v.trim().parse().unwrap());
        }
    }
    slices
}

#[test]
fn workers_ask_for_a_short_scheduling_slice_unless_told_not_to() {
    let net = TestNet::new();
    // Other tests' engines (default slice) may run beside this one; only
    // this test starts workers with the kernel's default.
    let engine = echo_engine(&net, Policy::LlcAffinity, true);
    let slices = worker_slices();
    assert!(slices.len() >= 2, "{slices:?}");
    assert!(slices.iter().all(|&s| s == 100_000), "{slices:?}");
    engine.stop().unwrap();

    let engine = support::echo_builder(&net, Policy::LlcAffinity, true)
        .worker_slice(None)
        .start()
        .unwrap();
    let kernel_default = worker_slices().iter().filter(|&&s| s != 100_000).count();
    assert!(kernel_default >= 2, "{:?}", worker_slices());
    engine.stop().unwrap();
}

/// An AF_PACKET socket on the peer, for frames a UDP socket cannot send.
fn send_raw(net: &TestNet, frames: &[Vec<u8>]) {
    net.in_ns(|| {
        let ifindex = xdp_io::ifindex(&net.peer).unwrap();
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

#[test]
fn malformed_and_foreign_frames_at_the_owned_port_are_counted_never_fatal() {
    let net = TestNet::new();
    let engine = echo_engine(&net, Policy::LlcAffinity, true);
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
    for _ in 0..50 {
        send_raw(&net, &bad);
    }
    // The engine still serves.
    let got = drive_flows(&net, 2, 20, 10);
    assert!(got.iter().all(|g| g.len() == 20), "{got:?}");
    let states = engine.worker_states();
    assert!(
        states.iter().all(|(_, s)| *s == WorkerState::Running),
        "{states:?}"
    );
    let program = engine.program_stats().unwrap();
    let report = engine.stop().unwrap();
    let t = &report.stats.total;
    // What the program redirected, the engine received; the bad part of it
    // was dropped with a counter (malformed, or refused by the echo).
    assert_eq!(t.core.rx, program.redirected, "{program:?} {t:?}");
    assert_eq!(t.engine.tx, 40);
    assert!(t.drops() > 0, "{t:?}");
    assert_accounted(&report);
}

fn parse_mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// A hook that keeps every move it is told of.
struct Capture(std::sync::Arc<std::sync::Mutex<Vec<steer_core::hook::FlowMove>>>);

impl steer_core::hook::SteerHook for Capture {
    fn steer(
        &mut self,
        mv: &steer_core::hook::FlowMove,
    ) -> Result<Option<steer_core::hook::FilterId>, steer_core::hook::HookError> {
        self.0.lock().unwrap().push(*mv);
        Ok(None)
    }
    fn remove(&mut self, _rxq: u32, _bucket: usize, _filter: steer_core::hook::FilterId) {}
}

#[test]
fn the_builders_hook_is_told_of_every_move_with_the_flows_key() {
    let net = TestNet::new();
    let moves = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let m = moves.clone();
    let engine = echo_builder(&net, Policy::Always, true)
        .hook(move |_rxq| Capture(m.clone()))
        .start()
        .unwrap();
    let cpus: Vec<usize> = engine.worker_states().iter().map(|(c, _)| *c).collect();
    let got = drive_flows(&net, 4, 50, 10);
    assert!(got.iter().all(|g| g.len() == 50));
    let report = engine.stop().unwrap();
    let moves = moves.lock().unwrap();
    assert!(!moves.is_empty());
    assert_eq!(moves.len() as u64, report.stats.steering_updates());
    for mv in moves.iter() {
        let key = mv.key.expect("the dispatcher passes the flow's key");
        assert_eq!((key.protocol, key.dst_port()), (17, PORT), "{mv:?}");
        assert!(cpus.contains(&mv.to), "{mv:?}");
    }
}
