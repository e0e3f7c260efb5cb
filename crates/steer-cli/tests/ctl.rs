//! `steer ctl` against a running `steer echo` on a veth: each control is
//! applied live and shows in `steer stats --json`; a port pinned to CPU 1
//! sends every new datagram there; a pin to a CPU without a worker is
//! refused by the engine, and a malformed control before anything is sent,
//! each in one line with a non-zero exit. Needs root, as CI runs it.

mod running;
mod support;

use running::{one_line_error, stats_json, steer, Echo};
use steer_testbed::TestNet;
use support::drive_flows;
use support::PORT;

/// Packets handled per worker CPU.
fn processed(v: &serde_json::Value) -> Vec<(u64, u64)> {
    v["per_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["cpu"].as_u64().unwrap(), r["processed"].as_u64().unwrap()))
        .collect()
}

#[test]
fn ctl_changes_a_running_engine_live() {
    let net = TestNet::new();
    let _echo = Echo::start(&net, &[]);
    let ctl = |args: &[&str]| {
        let mut all = vec!["ctl", net.host.as_str()];
        all.extend_from_slice(args);
        steer(&all)
    };
    let ok = |args: &[&str], want: &str| {
        let out = ctl(args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.trim(), format!("{}: {want}", net.host));
    };

    ok(&["policy", "always"], "policy always");
    ok(&["fast-path", "off"], "fast-path off");
    ok(&["flow-limit", "on"], "flow-limit on");
    ok(&["balance", "on"], "balance on");
    let v = stats_json(&net.host);
    assert_eq!(v["policy"], "always");
    assert_eq!(v["fast_path"], false);
    assert_eq!(v["flow_limit"], true);
    assert_eq!(v["balance"]["on"], true);
    ok(&["balance", "off"], "balance off");
    ok(&["flow-limit", "off"], "flow-limit off");

    // Every datagram to the echo's port goes to CPU 1 once pinned there.
    ok(
        &["pin", "1", "port", &PORT.to_string()],
        &format!("pin 1 port {PORT}"),
    );
    let before = processed(&stats_json(&net.host));
    let got = drive_flows(&net, 8, 20, 5);
    assert!(got.iter().all(|g| g.len() == 20), "{got:?}");
    let after = processed(&stats_json(&net.host));
    for ((cpu, b), (_, a)) in before.iter().zip(&after) {
        if *cpu == 1 {
            assert_eq!(a - b, 160, "all on CPU 1: {before:?} -> {after:?}");
        } else {
            assert_eq!(a, b, "none on CPU {cpu}: {before:?} -> {after:?}");
        }
    }
    ok(
        &["unpin", "port", &PORT.to_string()],
        &format!("unpin port {PORT}"),
    );
    // A flow, quoted as one word.
    ok(
        &["pin", "0", "flow", "udp 10.0.0.1:5000 -> 10.0.0.2:53"],
        "pin 0 flow udp 10.0.0.1:5000 -> 10.0.0.2:53",
    );

    let refused = one_line_error("ctl", &ctl(&["pin", "7", "port", "53"]));
    assert!(refused.contains("CPU 7 runs no worker"), "{refused}");
    let bad = one_line_error("ctl", &ctl(&["policy", "maybe"]));
    assert!(bad.contains("llc or always"), "{bad}");
    let none = one_line_error("ctl", &steer(&["ctl", "no-such-if0", "balance", "on"]));
    assert!(none.contains("no-such-if0"), "{none}");
}
