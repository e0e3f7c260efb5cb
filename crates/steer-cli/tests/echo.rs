//! `steer echo` as a user runs it: one-line errors that say what to do
//! (unknown interface, missing privileges), and a clean stop on SIGINT and
//! SIGTERM (every frame back, the program detached, the JSON report
//! written). Needs root, as CI runs it.

mod running;
mod support;

use std::process::{Command, Output};

use running::{steer, steer_command, take_json};
use steer_testbed::{Spawned, TestNet};
use support::{drive_flows, PORT};

/// `steer echo` on the host end of `net`, UDP [`PORT`], with `extra` flags.
fn echo_on(net: &TestNet, extra: &[&str]) -> Command {
    let port = PORT.to_string();
    let mut cmd = steer_command(&["echo", "--interface", &net.host, "--port", &port]);
    cmd.args(extra);
    cmd
}

/// [`echo_on`], started, and the first line it printed.
fn start_echo(net: &TestNet, extra: &[&str]) -> (Spawned, String) {
    let child = Spawned::start("steer echo", echo_on(net, extra));
    let first = child.next_line().unwrap_or_default();
    (child, first)
}

/// The one error line of a `steer echo` that failed.
fn one_line_error(out: &Output) -> String {
    running::one_line_error("echo", out)
}

/// The one error line of `echo_on(net, extra)`, which must fail; the
/// program was not attached.
fn refused(net: &TestNet, extra: &[&str]) -> String {
    let line = one_line_error(&echo_on(net, extra).output().unwrap());
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
    line
}

#[test]
fn echo_server_errors_say_what_to_do() {
    let missing = steer(&["echo", "--interface", "steer-nonesuch0", "--port", "9"]);
    let line = one_line_error(&missing);
    assert!(
        line.contains("unknown network interface") && line.contains("ip link show"),
        "{line}"
    );

    // The same, without privileges: setpriv drops to nobody with no capabilities.
    let net = TestNet::new();
    let unprivileged =
        running::steer_as_nobody(&["echo", "--interface", &net.host, "--port", "9"], "");
    let line = one_line_error(&unprivileged);
    assert!(
        line.contains("missing privileges") && line.contains("run as root"),
        "{line}"
    );
    // Nothing was attached.
    assert!(!net.link_show().contains("prog/xdp"), "{}", net.link_show());

    // A flow limit of 0 buckets.
    // (--duration: if it started anyway, it ends.)
    let line = one_line_error(
        &steer_command(&["echo", "--interface", &net.host, "--port", "9"])
            .args(["--flow-limit", "0", "--duration", "3"])
            .output()
            .unwrap(),
    );
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
        let (mut child, line) = start_echo(
            &net,
            &["--no-table", "--stats-json", json.to_str().unwrap()],
        );
        assert!(line.contains("ready"), "{line}");
        assert!(net.link_show().contains("xdp"), "{}", net.link_show());
        let got = drive_flows(&net, 2, 50, 10);
        assert!(got.iter().all(|g| g.len() == 50), "{got:?}");
        child.signal(signal);
        let status = child.wait();
        assert!(status.success(), "signal {signal}: {status}");
        let report = take_json(&json);
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
    // (--duration: if it started anyway, it ends.)
    let line = refused(
        &net,
        &[
            "--hash",
            "toeplitz",
            "--rss-key",
            "6d:5a:56:da",
            "--duration",
            "3",
        ],
    );
    assert!(
        line.contains("--rss-key") && line.contains("4 bytes, at least 40"),
        "{line}"
    );
    // The receive hash where the program cannot get one (generic mode).
    let line = refused(
        &net,
        &["--rx-hash", "--xdp-mode", "generic", "--duration", "3"],
    );
    assert!(
        line.contains("--rx-hash") && line.contains("native"),
        "{line}"
    );

    // The symmetric RSS key: the trace shows the hash steer steered by.
    let trace = std::env::temp_dir().join(format!("steer-echo-hash-{}.trace", std::process::id()));
    let (mut child, line) = start_echo(
        &net,
        &[
            "--hash",
            "toeplitz",
            "--rss-key",
            "symmetric",
            "--no-table",
            "--record-trace",
            trace.to_str().unwrap(),
        ],
    );
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
    child.signal(libc::SIGINT);
    assert!(child.wait().success());
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
    let (mut child, line) = start_echo(
        &net,
        &[
            "--cost-ns",
            "20000",
            "--balance",
            "on",
            "--no-table",
            "--stats-json",
            json.to_str().unwrap(),
        ],
    );
    assert!(line.contains("balancer on"), "{line}");
    let got = drive_flows(&net, 4, 100, 10);
    assert!(
        got.iter()
            .all(|g| g.len() == 100 && g.windows(2).all(|w| w[0] < w[1])),
        "{got:?}"
    );
    child.signal(libc::SIGINT);
    let rest = child.rest().join("\n");
    assert!(child.wait().success());
    assert!(rest.contains("steer echo: balancer moves"), "{rest}");
    let report = take_json(&json);
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
