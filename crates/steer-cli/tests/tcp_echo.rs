//! `steer tcp-echo` as a user runs it: kernel sockets steered to their
//! reader's CPU, a clean stop on SIGINT and SIGTERM (the program detached,
//! the JSON report written), a one-line error that says what to do, and
//! `steer tcp-load` against it. Needs root, as CI runs it.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use steer_testbed::TestNet;

const PORT: u16 = 7400;
/// The takeover test's port: tcp-echo binds every address, and the tests
/// run side by side.
const TAKEOVER_PORT: u16 = 7401;

fn steer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_steer"))
}

#[test]
fn tcp_echo_steers_and_stops_cleanly_on_sigint_and_sigterm() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // veth's default offloads: the client's segments carry partial
        // checksums, which the program completes before each redirect.
        let net = TestNet::new();
        let json = std::env::temp_dir().join(format!(
            "steer-tcp-echo-{}-{signal}.json",
            std::process::id()
        ));
        let mut child = steer()
            .args(["tcp-echo", "-i", &net.host, "-p", &PORT.to_string()])
            .args(["--policy", "always", "--no-table", "--stats-json"])
            .arg(&json)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.contains("ready"), "{line}");
        assert!(net.link_show().contains("xdp"), "{}", net.link_show());

        let addr = SocketAddr::new(net.host_v4.into(), PORT);
        net.in_ns(|| {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            let mut buf = [3u8; 64];
            for _ in 0..200 {
                c.write_all(&buf).unwrap();
                c.read_exact(&mut buf).unwrap();
            }
        });
        // The load client too: 16 connections, each message answered (a
        // stalled connection fails tcp-load after 5 s without its echo).
        let load = net.ns_cmd(&[
            env!("CARGO_BIN_EXE_steer"),
            "tcp-load",
            "--connect",
            &addr.to_string(),
            "--connections",
            "16",
            "--duration",
            "1.5",
        ]);
        assert!(load.status.success(), "{load:?}");
        let load: serde_json::Value = serde_json::from_slice(&load.stdout).unwrap();
        assert!(load["messages"].as_u64().unwrap() > 0, "{load:#}");

        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        // Expected library fallbacks (no bpffs, no dispatcher) and libbpf's
        // memlock advice stay out of the terminal.
        for noise in ["libbpf", "libxdp", "ulimit"] {
            assert!(!stderr.contains(noise), "start-up noise: {stderr}");
        }
        assert!(status.success(), "signal {signal}: {status}");
        assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        assert_eq!(report["connections"], 17, "{report:#}");
        assert_eq!(report["csum_errors"]["tcp"], 0, "{report:#}");
        assert!(
            report["program"]["csum_completed"].as_u64().unwrap() >= 190,
            "the client's partial checksums were completed: {report:#}"
        );
        assert!(report["map_updates"].as_u64().unwrap() >= 17, "{report:#}");
        let landed: u64 = report["landed_per_cpu"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert!(landed >= 190, "steered frames: {report:#}");
    }
}

/// Starts `steer tcp-echo` on `net` with `extra` flags and waits for its
/// ready line (`None`: it exited first; its output is returned).
fn start_tcp_echo(net: &TestNet, extra: &[&str]) -> Result<std::process::Child, String> {
    let mut child = steer()
        .args([
            "tcp-echo",
            "-i",
            &net.host,
            "-p",
            &TAKEOVER_PORT.to_string(),
        ])
        .arg("--no-table")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut line).unwrap();
    if line.contains("ready") {
        // Keep reading: its summary at the stop must not meet a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        return Ok(child);
    }
    let out = child.wait_with_output().unwrap();
    Err(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn tcp_echo_takes_over_after_kill_9_and_refuses_a_second_even_with_replace_stale() {
    let net = TestNet::new();
    let mut first = start_tcp_echo(&net, &[]).expect("the first starts");
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(first.id() as i32, libc::SIGKILL) }, 0);
    first.wait().unwrap();
    // Its program stays attached (netlink), nobody's now.
    assert!(net.link_show().contains("xdp"), "{}", net.link_show());

    let mut second = start_tcp_echo(&net, &[]).expect("takes over without a flag");
    // Least privilege, in every thread: no new privileges, and of the
    // capabilities only what detaches the program at stop (CAP_NET_ADMIN;
    // CAP_SYS_ADMIN and CAP_BPF too where libxdp's dispatcher runs it).
    const NET_ADMIN: u64 = 1 << 12;
    const DETACH: u64 = NET_ADMIN | 1 << 21 | 1 << 39;
    for task in std::fs::read_dir(format!("/proc/{}/task", second.id())).unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
                .unwrap()
        };
        assert_eq!(field("NoNewPrivs:"), 1, "{status}");
        let eff = field("CapEff:");
        assert!(eff & NET_ADMIN != 0 && eff & !DETACH == 0, "{status}");
    }
    let refused = start_tcp_echo(&net, &["--replace-stale"]).unwrap_err();
    let lines: Vec<&str> = refused
        .lines()
        .filter(|l| l.starts_with("steer tcp-echo:"))
        .collect();
    assert_eq!(lines.len(), 1, "{refused}");
    assert!(
        lines[0].contains(&format!("is served by steer pid {}", second.id())),
        "{refused}"
    );
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(second.id() as i32, libc::SIGTERM) }, 0);
    assert!(second.wait().unwrap().success());
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

#[test]
fn tcp_echo_without_an_interface_says_what_to_do() {
    let out = steer()
        .args(["tcp-echo", "-p", &PORT.to_string()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("steer tcp-echo:"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("add -i IF"), "{stderr}");
    assert_eq!(out.status.code(), Some(1));
}
