//! `steer echo` as a user runs it: one-line errors that say what to do
//! (unknown interface, missing privileges), and a clean stop on SIGINT and
//! SIGTERM (every frame back, the program detached, the JSON report
//! written). Needs root, as CI runs it.

mod support;

use std::process::Command;

use steer_testbed::TestNet;
use support::{drive_flows, PORT};

/// `steer echo`'s command line.
fn steer_echo() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_steer"));
    cmd.arg("echo");
    cmd
}

fn one_line_error(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("steer echo:"))
        .collect();
    assert_eq!(lines.len(), 1, "one error line expected: {stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    lines[0].to_owned()
}

#[test]
fn echo_server_errors_say_what_to_do() {
    let missing = steer_echo()
        .args(["--interface", "steer-nonesuch0", "--port", "9"])
        .output()
        .unwrap();
    let line = one_line_error(&missing);
    assert!(
        line.contains("unknown network interface") && line.contains("ip link show"),
        "{line}"
    );

    // The same, without privileges: setpriv drops to nobody with no capabilities.
    let net = TestNet::new();
    let unprivileged = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .args([env!("CARGO_BIN_EXE_steer"), "echo"])
        .args(["--interface", &net.host, "--port", "9"])
        .output()
        .unwrap();
    let line = one_line_error(&unprivileged);
    assert!(
        line.contains("missing privileges") && line.contains("run as root"),
        "{line}"
    );
    // Nothing was attached.
    assert!(!net.link_show().contains("prog/xdp"), "{}", net.link_show());

    // A flow limit of 0 buckets.
    let out = steer_echo()
        .args(["--interface", &net.host, "--port", "9", "--flow-limit", "0"])
        .args(["--duration", "3"]) // if it started anyway, it ends
        .output()
        .unwrap();
    let line = one_line_error(&out);
    assert!(
        line.contains("flow limit table of 0 buckets") && line.contains("power of two"),
        "{line}"
    );
    assert!(!net.link_show().contains("prog/xdp"), "{}", net.link_show());
}

#[test]
fn echo_server_stops_cleanly_on_sigint_and_sigterm() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let net = TestNet::new();
        let json = std::env::temp_dir().join(format!(
            "steer-echo-signal-{}-{signal}.json",
            std::process::id()
        ));
        let mut child = steer_echo()
            .args(["--interface", &net.host, "--port", &PORT.to_string()])
            .args(["--no-table", "--stats-json", json.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        assert!(line.contains("ready"), "{line}");
        assert!(net.link_show().contains("xdp"), "{}", net.link_show());
        let got = drive_flows(&net, 2, 50, 10);
        assert!(got.iter().all(|g| g.len() == 50), "{got:?}");
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let status = child.wait().unwrap();
        assert!(status.success(), "signal {signal}: {status}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        assert_eq!(report["frames"]["balanced"], true, "{report:#}");
        assert_eq!(report["total"]["tx"], 100, "{report:#}");
        // The program is detached.
        assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
    }
}

#[test]
fn echo_steers_by_the_hash_its_flags_name() {
    use steer_core::flow::SYMMETRIC_RSS_KEY;
    use steer_core::flow::{FlowHasher, ToeplitzHasher};
    let net = TestNet::new();
    // A key of the wrong length: one line, before anything is attached.
    let out = steer_echo()
        .args(["--interface", &net.host, "--port", &PORT.to_string()])
        .args(["--hash", "toeplitz", "--rss-key", "6d:5a:56:da"])
        .args(["--duration", "3"]) // if it started anyway, it ends
        .output()
        .unwrap();
    let line = one_line_error(&out);
    assert!(
        line.contains("--rss-key") && line.contains("4 bytes, at least 40"),
        "{line}"
    );
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
    // The receive hash where the program cannot get one (generic mode).
    let out = steer_echo()
        .args(["--interface", &net.host, "--port", &PORT.to_string()])
        .args(["--rx-hash", "--xdp-mode", "generic", "--duration", "3"])
        .output()
        .unwrap();
    let line = one_line_error(&out);
    assert!(
        line.contains("--rx-hash") && line.contains("native"),
        "{line}"
    );
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());

    // The symmetric RSS key: the trace shows the hash steer steered by.
    let trace = std::env::temp_dir().join(format!("steer-echo-hash-{}.trace", std::process::id()));
    let mut child = steer_echo()
        .args(["--interface", &net.host, "--port", &PORT.to_string()])
        .args(["--hash", "toeplitz", "--rss-key", "symmetric", "--no-table"])
        .args(["--record-trace", trace.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert!(line.contains("ready"), "{line}");
    let to = std::net::SocketAddr::new(net.host_v4.into(), PORT);
    let from = net.in_ns(|| {
        let s = std::net::UdpSocket::bind((net.peer_v4, 0)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        let mut buf = [0u8; 64];
        for i in 0..20u32 {
            s.send_to(&i.to_be_bytes(), to).unwrap();
            s.recv_from(&mut buf).expect("echoed");
        }
        s.local_addr().unwrap()
    });
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(&trace).unwrap();
    let _ = std::fs::remove_file(&trace);
    let key = support::peer_udp_key(&net, from.port());
    let want = ToeplitzHasher::new(&SYMMETRIC_RSS_KEY).unwrap().hash(&key);
    let hashes: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("p "))
        .filter_map(|l| l.split(' ').nth(1))
        .collect();
    assert_eq!(hashes.len(), 20, "{text}");
    assert!(
        hashes.iter().all(|h| *h == format!("{want:#010x}")),
        "want {want:#010x}: {hashes:?}"
    );
}

#[test]
fn echo_server_with_a_costly_handler_and_the_balancer() {
    let net = TestNet::new();
    let json = std::env::temp_dir().join(format!("steer-echo-balance-{}.json", std::process::id()));
    let mut child = steer_echo()
        .args(["--interface", &net.host, "--port", &PORT.to_string()])
        .args(["--cost-ns", "20000", "--balance", "on"])
        .args(["--no-table", "--stats-json", json.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert!(line.contains("balancer on"), "{line}");
    let got = drive_flows(&net, 4, 100, 10);
    assert!(
        got.iter()
            .all(|g| g.len() == 100 && g.windows(2).all(|w| w[0] < w[1])),
        "{got:?}"
    );
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(rest.contains("steer echo: balancer moves"), "{rest}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(report["balancer"]["on"], true, "{report:#}");
    assert!(report["balancer"]["rounds"].as_u64().unwrap() > 0);
    // 400 packets at 20 us each: at least 8 ms of busy time.
    let busy: u64 = report["per_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["busy_ns"].as_u64().unwrap())
        .sum();
    assert!(busy >= 8_000_000, "{report:#}");
    assert_eq!(report["frames"]["balanced"], true);
}
