//! Starting and stopping kernel-socket steering: a stop detaches the
//! program and frees its maps and programs (nothing left behind), and the
//! connections it steered carry on along the kernel's own path; a bad start
//! says what to do in one line. Needs root.

mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use steer_kernel::{KernelError, KernelSteering, Proto, RfsStats};
use support::Pair;

const PORT: u16 = 7200;

/// The ids of the maps program `id` uses (bpftool).
fn map_ids(id: u32) -> Vec<u64> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "bpftool prog show id {id}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["map_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_u64().unwrap())
        .collect()
}

fn exists(kind: &str, id: u64) -> bool {
    Command::new("bpftool")
        .args([kind, "show", "id", &id.to_string()])
        .output()
        .unwrap()
        .status
        .success()
}

fn start(pair: &Pair) -> Result<KernelSteering, KernelError> {
    let dev = pair.srv_dev.clone();
    Pair::in_ns(&pair.srv_ns, move || {
        KernelSteering::builder(&dev).own(Proto::Tcp, PORT).start()
    })
}

#[test]
fn stop_leaves_nothing_behind_and_connections_carry_on() {
    let pair = Pair::new();
    let steering = std::sync::Arc::new(start(&pair).unwrap());
    let prog_id = steering.program().unwrap().id();
    let maps = map_ids(prog_id);
    assert!(maps.len() >= 6, "{maps:?}");
    assert!(pair.srv_link().contains("xdp"), "{}", pair.srv_link());

    // An echo server recording its one connection on every read.
    let addr = SocketAddr::new(pair.srv_v4.into(), PORT);
    let (ready_tx, ready_rx) = mpsc::channel();
    let st = steering.clone();
    let server = Pair::spawn_in(&pair.srv_ns, move || {
        let l = std::net::TcpListener::bind(addr).unwrap();
        ready_tx.send(()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let flow = st.flow(&s).unwrap();
        let mut rec = st.recorder();
        drop(st);
        let mut buf = [0u8; 64];
        while s.read_exact(&mut buf).is_ok() {
            let _ = rec.record_flow(&flow);
            s.write_all(&buf).unwrap();
        }
    });
    ready_rx.recv().unwrap();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let client = Pair::spawn_in(&pair.cli_ns, move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let mut buf = [7u8; 64];
        while go_rx.recv().is_ok() {
            for _ in 0..100 {
                c.write_all(&buf).unwrap();
                c.read_exact(&mut buf).unwrap();
            }
            done_tx.send(()).unwrap();
        }
    });
    go_tx.send(()).unwrap();
    done_rx.recv().unwrap();
    let stats: RfsStats = steering.stats().program.unwrap();
    assert!(stats.redirected >= 90, "steered before the stop: {stats:?}");

    // Stop while the connection lives (the server thread still holds a
    // recorder and the flow): the program goes at once.
    let steering = std::sync::Arc::try_unwrap(steering).expect("only the test holds it now");
    steering.stop();
    assert!(!pair.srv_link().contains("xdp"), "{}", pair.srv_link());
    assert!(
        !exists("prog", u64::from(prog_id)),
        "program {prog_id} left"
    );
    // Maps are freed once the last reference goes (deferred in the kernel).
    let deadline = Instant::now() + Duration::from_secs(5);
    while maps.iter().any(|&m| exists("map", m)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<_> = maps.iter().filter(|&&m| exists("map", m)).collect();
    assert!(left.is_empty(), "maps left behind: {left:?}");

    // The connection carries on along the kernel's path.
    go_tx.send(()).unwrap();
    done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("echo after the stop");
    drop(go_tx);
    client.join().unwrap();
    server.join().unwrap();
}

#[test]
fn a_bad_start_says_what_to_do() {
    let pair = Pair::new();
    let first = start(&pair).unwrap();
    // A second program on the same device: the first is not stale, but the
    // message is the same as for a crashed run's leftover.
    let second = start(&pair).unwrap_err().to_string();
    assert!(
        second.contains("already has a steer XDP program attached")
            && second.contains("replace_stale"),
        "{second}"
    );
    drop(first);
    let unknown = KernelSteering::builder("steer-nonesuch0")
        .own(Proto::Tcp, PORT)
        .start()
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("ip link show"), "{unknown}");
    let no_port = KernelSteering::builder(&pair.srv_dev)
        .start()
        .unwrap_err()
        .to_string();
    assert!(no_port.contains(".own(Proto::Tcp, port)"), "{no_port}");
}
