//! `steer echo` and `steer proxy` on a jumbo network: a veth pair with MTU
//! 9000 on both ends, 8000-byte datagrams (several 2048-byte UMEM frames
//! each: multi-buffer AF_XDP, on by itself for this MTU) beside small ones,
//! over IPv4 and IPv6. The echo answers each intact; the proxy forwards each
//! to a kernel UDP backend and its 8000-byte reply back intact, and its
//! report counts the multi-buffer packets. Needs root, as CI runs it.

mod support;

use std::io::Write;
use std::process::Command;

use steer_testbed::traffic::drive_sized;
use steer_testbed::TestNet;
use support::{Running, PORT};

/// A veth pair with MTU 9000 on both ends.
fn jumbo_net() -> TestNet {
    let net = TestNet::new();
    net.set_mtu(9000);
    net
}

/// `rounds` rounds of one 8000-byte datagram on an IPv4 and an IPv6 flow
/// and one 64-byte datagram on two small flows; every reply must be its
/// datagram, whole.
fn drive_mixed(net: &TestNet, rounds: u32) {
    drive_sized(net, PORT, &[8000, 8000, 64, 64], rounds);
}

/// Starts `steer <args>` and waits for its "ready" line.
fn start(args: &[&str]) -> (Running, std::sync::mpsc::Receiver<String>) {
    support::start_steer(args)
}

/// The value at `key` anywhere in `v`.
fn find<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => {
            m.get(key).or_else(|| m.values().find_map(|x| find(x, key)))
        }
        serde_json::Value::Array(a) => a.iter().find_map(|x| find(x, key)),
        _ => None,
    }
}

#[test]
fn steer_echo_answers_jumbo_datagrams_intact() {
    let net = jumbo_net();
    let (mut child, _lines) = start(&[
        "echo",
        "--interface",
        &net.host,
        "--port",
        &PORT.to_string(),
        "--frame-size",
        "2048",
    ]);
    drive_mixed(&net, 30);
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, libc::SIGINT) }, 0);
    assert!(child.0.wait().unwrap().success());
}

#[test]
fn steer_proxy_forwards_jumbo_datagrams_to_a_kernel_backend_and_back() {
    let net = jumbo_net();
    // A kernel UDP echo on loopback (MTU 65536) with room for jumbo datagrams.
    let backend_port = support::kernel_backend();
    let json = std::env::temp_dir().join(format!("steer-proxy-jumbo-{}.json", std::process::id()));
    let (mut child, _lines) = start(&[
        "proxy",
        "--interface",
        &net.host,
        "--port",
        &PORT.to_string(),
        "--backend",
        &format!("127.0.0.1:{backend_port}"),
        "--frame-size",
        "2048",
        "--stats-json",
        json.to_str().unwrap(),
    ]);
    drive_mixed(&net, 30);
    writeln!(child.0.stdin.as_mut().unwrap(), "quit").unwrap();
    assert!(child.0.wait().unwrap().success());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let multi = find(&report, "multi_buffer").expect("the report counts multi-buffer packets");
    assert_eq!(multi["received"], 60, "{multi}");
    assert_eq!(multi["transmitted"], 60, "{multi}");
    assert_eq!(multi["refused"], 0, "{multi}");
}

#[test]
fn multi_buffer_off_is_refused_in_one_line_on_a_jumbo_mtu() {
    let net = jumbo_net();
    let out = Command::new(env!("CARGO_BIN_EXE_steer"))
        .args([
            "echo",
            "--interface",
            &net.host,
            "--port",
            &PORT.to_string(),
        ])
        .args(["--multi-buffer", "off"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("steer echo:"))
        .collect();
    assert_eq!(lines.len(), 1, "one error line: {stderr}");
    assert!(
        lines[0].contains("MTU 9000") && lines[0].contains("multi-buffer is off"),
        "{}",
        lines[0]
    );
    assert!(!net.link_show().contains("xdp"), "nothing left attached");
}
