//! `steer echo` and `steer proxy` answer fragmented datagrams: on a veth
//! pair with MTU 1500,
//! a 3000-byte UDP datagram from the peer namespace leaves in fragments,
//! which the XDP program passes to the kernel; the kernel reassembles it
//! and the engine's slow-path socket on the owned port hands it to the
//! echo, whose reply goes back through the kernel (fragmented again). Each
//! round, the same flow (same socket) also sends a 64-byte datagram, which
//! must still take the XDP path. IPv4 and IPv6. The report's counters say
//! which path each took. The proxy forwards the reassembled datagrams to a
//! kernel UDP backend and sends its 3000-byte replies back through the
//! kernel. Needs root, as CI runs it.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use steer_testbed::TestNet;
use support::PORT;

/// Rounds per flow: one large and one small datagram each.
const ROUNDS: u32 = 10;
const LARGE: usize = 3000;
const SMALL: usize = 64;

/// A running `steer`, killed if the test fails before it stops it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        // A failed test must not leave steer (and its XDP program) behind.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(args: &[&str]) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_steer"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("steer starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    loop {
        let line: String = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("steer printed ready");
        if line.contains("ready") {
            break;
        }
    }
    Running(child)
}

/// Datagram `seq` of flow `flow`, `len` bytes: a pattern that tells every
/// byte's place, so a reply cut, reordered inside or mixed up shows.
fn datagram(flow: usize, seq: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31) ^ seq.wrapping_mul(7) ^ (flow as u32 * 131))
        .map(|x| x as u8)
        .collect()
}

/// From the peer: on one IPv4 and one IPv6 socket, each round a large
/// then a small datagram of the same flow; both replies must come back
/// intact (in either order: the small one may overtake the large one,
/// which takes the slower path).
fn drive(net: &TestNet) {
    net.in_ns(|| {
        let flows: Vec<(UdpSocket, SocketAddr)> = [
            (IpAddr::from(net.peer_v4), IpAddr::from(net.host_v4)),
            (IpAddr::from(net.peer_v6), IpAddr::from(net.host_v6)),
        ]
        .into_iter()
        .map(|(local, remote)| {
            let s = UdpSocket::bind(SocketAddr::new(local, 0)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            (s, SocketAddr::new(remote, PORT))
        })
        .collect();
        let mut buf = vec![0u8; 65536];
        for seq in 0..ROUNDS {
            for (i, (s, to)) in flows.iter().enumerate() {
                let large = datagram(i, seq, LARGE);
                let small = datagram(i, seq, SMALL);
                s.send_to(&large, to).unwrap();
                s.send_to(&small, to).unwrap();
                let (mut got_large, mut got_small) = (false, false);
                while !(got_large && got_small) {
                    let n = s.recv(&mut buf).unwrap_or_else(|e| {
                        panic!(
                            "flow {i} round {seq}: large answered {got_large}, small answered \
                             {got_small}: {e}"
                        )
                    });
                    match n {
                        LARGE => {
                            assert!(
                                buf[..n] == large[..],
                                "flow {i} round {seq}: large reply differs"
                            );
                            got_large = true;
                        }
                        SMALL => {
                            assert!(
                                buf[..n] == small[..],
                                "flow {i} round {seq}: small reply differs"
                            );
                            got_small = true;
                        }
                        other => panic!("flow {i} round {seq}: a {other}-byte reply"),
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
    drive(&net);
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, libc::SIGINT) }, 0);
    assert!(child.0.wait().unwrap().success());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
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

/// The report written to `json`, removed after reading.
fn read_report(json: &std::path::Path) -> serde_json::Value {
    let report = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let _ = std::fs::remove_file(json);
    report
}

#[test]
fn steer_proxy_forwards_fragmented_datagrams_and_their_large_replies() {
    let net = TestNet::new();
    net.set_mtu(1500);
    // A kernel UDP echo on loopback with room for any datagram.
    let backend = UdpSocket::bind("127.0.0.1:0").unwrap();
    let backend_port = backend.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = backend.recv_from(&mut buf) {
            let _ = backend.send_to(&buf[..n], from);
        }
    });
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
        "--stats-json",
        json.to_str().unwrap(),
    ]);
    drive(&net);
    writeln!(child.0.stdin.as_mut().unwrap(), "quit").unwrap();
    assert!(child.0.wait().unwrap().success());
    let report = read_report(&json);
    let both = u64::from(2 * ROUNDS);
    let slow = &report["slow_path"];
    assert_eq!(
        slow["received"], both,
        "the large datagrams took the slow path: {slow}"
    );
    // Every large reply left through the kernel (longer than the MTU);
    // small ones too on a flow born from a reassembled datagram.
    let answered = slow["answered"].as_u64().unwrap();
    assert!((both..=2 * both).contains(&answered), "{slow}");
    for drop in ["too_large", "queue_full", "send_failed", "refused"] {
        assert_eq!(slow[drop], 0, "{drop}: {slow}");
    }
    assert_eq!(
        report["total"]["rx"], both,
        "the small ones came over AF_XDP"
    );
}
