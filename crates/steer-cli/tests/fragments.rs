//! `steer echo` and `steer proxy` answer fragmented datagrams. On a veth
//! pair with MTU 1500, a 3000-byte UDP datagram from the peer namespace
//! leaves in fragments, which the XDP program passes to the kernel; the
//! kernel reassembles it and the engine's slow-path socket on the owned
//! port hands it to the flow's worker, whose reply goes back through the
//! kernel (fragmented again). Each round, the same flow (same socket) also
//! sends a 64-byte datagram, which must still take the AF_XDP path. IPv4
//! and IPv6. The report's counters say which path each took. The proxy
//! forwards the reassembled datagrams to a kernel UDP backend and sends its
//! 3000-byte replies back through the kernel, on flows that began on
//! either path. Needs root, as CI runs it.

mod support;

use std::io::Write;
use std::net::{IpAddr, SocketAddr, UdpSocket};

use std::time::Duration;

use steer_testbed::TestNet;
use support::{Running, PORT};

/// Rounds per flow: one large and one small datagram each.
const ROUNDS: u32 = 10;
const LARGE: usize = 3000;
const SMALL: usize = 64;

/// Starts `steer <args>` and waits for its "ready" line.
fn start(args: &[&str]) -> Running {
    support::start_steer(args).0
}

/// The report written to `json`, removed after reading.
fn read_report(json: &std::path::Path) -> serde_json::Value {
    let report = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let _ = std::fs::remove_file(json);
    report
}

/// Datagram `seq` of flow `flow`, `len` bytes: a pattern that tells every
/// byte's place, so a reply cut, reordered inside or mixed up shows.
fn datagram(flow: usize, seq: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31) ^ seq.wrapping_mul(7) ^ (flow as u32 * 131))
        .map(|x| x as u8)
        .collect()
}

/// How a flow sends its two datagrams of a round.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Order {
    /// Both at once, the large one first: either reply may come first
    /// (the small one may overtake the large one, which takes the slower
    /// path).
    Together,
    /// The large one, then the small one once the large one is answered:
    /// the flow begins on the slow path.
    LargeFirst,
    /// The small one, then the large one once the small one is answered:
    /// the flow begins on the AF_XDP path.
    SmallFirst,
}

/// From the peer: for each order in `orders`, an IPv4 and an IPv6 flow,
/// each round a large and a small datagram; both replies must come back
/// intact.
fn drive(net: &TestNet, orders: &[Order]) {
    net.in_ns(|| {
        let flows: Vec<(UdpSocket, SocketAddr, Order)> = orders
            .iter()
            .flat_map(|&order| {
                [
                    (IpAddr::from(net.peer_v4), IpAddr::from(net.host_v4), order),
                    (IpAddr::from(net.peer_v6), IpAddr::from(net.host_v6), order),
                ]
            })
            .map(|(local, remote, order)| {
                let s = UdpSocket::bind(SocketAddr::new(local, 0)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                (s, SocketAddr::new(remote, PORT), order)
            })
            .collect();
        let mut buf = vec![0u8; 65536];
        for seq in 0..ROUNDS {
            for (i, (s, to, order)) in flows.iter().enumerate() {
                let large = datagram(i, seq, LARGE);
                let small = datagram(i, seq, SMALL);
                let first: &[&[u8]] = match order {
                    Order::Together => &[&large, &small],
                    Order::LargeFirst => &[&large],
                    Order::SmallFirst => &[&small],
                };
                for d in first {
                    s.send_to(d, to).unwrap();
                }
                let (mut got_large, mut got_small) = (false, false);
                while !(got_large && got_small) {
                    let n = s.recv(&mut buf).unwrap_or_else(|e| {
                        panic!(
                            "flow {i} ({order:?}) round {seq}: large answered {got_large}, \
                             small answered {got_small}: {e}"
                        )
                    });
                    let (expected, got, then) = match n {
                        LARGE => (&large, &mut got_large, Order::LargeFirst),
                        SMALL => (&small, &mut got_small, Order::SmallFirst),
                        other => panic!("flow {i} round {seq}: a {other}-byte reply"),
                    };
                    assert!(
                        buf[..n] == expected[..],
                        "flow {i} round {seq}: the {n}-byte reply differs"
                    );
                    *got = true;
                    // One by one: the other datagram once this one is answered.
                    if *order == then {
                        let other = if then == Order::LargeFirst {
                            &small
                        } else {
                            &large
                        };
                        s.send_to(other, to).unwrap();
                    }
                }
            }
        }
    });
}

#[test]
fn steer_echo_answers_fragmented_datagrams_and_small_ones_keep_the_xdp_path() {
    let net = TestNet::new();
    net.set_mtu(1500);
    let json = std::env::temp_dir().join(format!("steer-fragments-{}.json", std::process::id()));
    let mut child = start(&[
        "echo",
        "--interface",
        &net.host,
        "--port",
        &PORT.to_string(),
        "--no-table",
        "--stats-json",
        json.to_str().unwrap(),
    ]);
    drive(&net, &[Order::Together]);
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, libc::SIGINT) }, 0);
    assert!(child.0.wait().unwrap().success());
    let report = read_report(&json);
    let both = u64::from(2 * ROUNDS);
    let slow = &report["slow_path"];
    // The host end's IPv4, IPv6 and IPv6 link-local addresses.
    assert!(slow["sockets"].as_u64().unwrap() >= 2, "{slow}");
    assert_eq!(slow["bind_failed"], 0, "{slow}");
    assert_eq!(
        slow["received"], both,
        "the large datagrams took the slow path: {slow}"
    );
    assert_eq!(slow["received_bytes"], both * LARGE as u64, "{slow}");
    assert_eq!(slow["answered"], both, "{slow}");
    assert_eq!(slow["answered_bytes"], both * LARGE as u64, "{slow}");
    for drop in [
        "refused",
        "too_large",
        "queue_full",
        "send_failed",
        "consumed",
    ] {
        assert_eq!(slow[drop], 0, "{drop}: {slow}");
    }
    // The small datagrams (and only they: no fragment reached AF_XDP) went
    // the XDP path and were answered there.
    let total = &report["total"];
    assert_eq!(
        total["rx"], both,
        "AF_XDP received the small datagrams: {total}"
    );
    assert_eq!(total["tx"], both, "and answered them: {total}");
}

#[test]
fn steer_proxy_forwards_fragmented_datagrams_and_their_large_replies() {
    let net = TestNet::new();
    net.set_mtu(1500);
    // A kernel UDP echo on loopback with room for any datagram.
    let backend_port = support::kernel_backend();
    let json =
        std::env::temp_dir().join(format!("steer-fragments-proxy-{}.json", std::process::id()));
    let mut child = start(&[
        "proxy",
        "--interface",
        &net.host,
        "--port",
        &PORT.to_string(),
        "--backend",
        &format!("127.0.0.1:{backend_port}"),
        // A 3000-byte reply fits one 4096-byte frame: only the MTU keeps
        // it off AF_XDP.
        "--frame-size",
        "4096",
        "--stats-json",
        json.to_str().unwrap(),
    ]);
    // Flows that begin with a reassembled datagram (no Ethernet addresses
    // to answer to: all their replies leave through the kernel) and flows
    // that begin on AF_XDP (only their large replies do, past the MTU).
    drive(&net, &[Order::LargeFirst, Order::SmallFirst]);
    writeln!(child.0.stdin.as_mut().unwrap(), "quit").unwrap();
    assert!(child.0.wait().unwrap().success());
    let report = read_report(&json);
    // Per order, an IPv4 and an IPv6 flow.
    let per_order = u64::from(2 * ROUNDS);
    let slow = &report["slow_path"];
    assert_eq!(
        slow["received"],
        2 * per_order,
        "the large datagrams took the slow path: {slow}"
    );
    // Through the kernel: every large reply (longer than the MTU), and the
    // small ones of the flows born from a reassembled datagram.
    assert_eq!(slow["answered"], 3 * per_order, "{slow}");
    assert_eq!(
        slow["answered_bytes"],
        per_order * (2 * LARGE + SMALL) as u64,
        "{slow}"
    );
    for drop in ["too_large", "queue_full", "send_failed", "refused"] {
        assert_eq!(slow[drop], 0, "{drop}: {slow}");
    }
    assert_eq!(
        report["total"]["rx"],
        2 * per_order,
        "the small ones came over AF_XDP"
    );
}
