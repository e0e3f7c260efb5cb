//! `steer proxy` end to end: clients in a namespace, the proxy on the
//! host end of a 2-queue veth, a kernel UDP echo as the backend on loopback.
//! Every datagram is answered in order per flow under llc and always, with
//! the multi-thread, the per-core and the worker (thread-per-core) layouts,
//! switched at start and at run time (stdin commands); and the plain-tokio
//! baseline (`--io kernel`) forwards the same traffic the same way. Needs
//! root, as CI runs it.

mod support;

use std::io::Write;
use std::process::ChildStdin;

use steer_testbed::Spawned;
use steer_testbed::TestNet;
use support::{drive_flows, kernel_backend, proxy_command};

/// A running `steer proxy` and its stdin, for run-time commands.
struct Proxy {
    spawned: Spawned,
    stdin: ChildStdin,
}

impl Proxy {
    fn start(net: &TestNet, backend: u16, extra: &[&str], json: &std::path::Path) -> Self {
        let mut cmd = proxy_command(net, backend, json);
        cmd.args(extra);
        // Killed on drop: a failed test must not leave the proxy (and its
        // XDP program) behind.
        let mut spawned = Spawned::start("steer proxy", cmd);
        let stdin = spawned.child.stdin.take().unwrap();
        spawned.expect("ready");
        Proxy { spawned, stdin }
    }

    fn command(&mut self, cmd: &str, echo: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.spawned.expect(echo);
    }

    fn quit(mut self) {
        writeln!(self.stdin, "quit").unwrap();
        let status = self.spawned.wait();
        assert!(status.success(), "steer proxy exited with {status}");
    }
}

fn assert_in_order(got: &[Vec<u32>], per_flow: usize, phase: &str) {
    for (i, seqs) in got.iter().enumerate() {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{phase}: flow {i} reordered: {seqs:?}"
        );
        assert_eq!(seqs.len(), per_flow, "{phase}: flow {i} lost replies");
    }
}

/// A phase: its name, and the stdin command (with the line the proxy
/// answers it with) that starts it.
type Phase<'a> = (&'a str, Option<(&'a str, &'a str)>);

/// Each phase's name and what its flows got back.
type PhaseResults<'a> = Vec<(&'a str, Vec<Vec<u32>>)>;

/// Runs each phase (its command, then `flows` flows of `per_flow`
/// datagrams), quits the proxy and reads its JSON report: what each phase's
/// flows got back, and the report.
fn drive_phases<'a>(
    mut proxy: Proxy,
    net: &TestNet,
    phases: &[Phase<'a>],
    flows: usize,
    per_flow: u32,
    json: &std::path::Path,
) -> (PhaseResults<'a>, serde_json::Value) {
    let mut results = Vec::new();
    for &(phase, switch) in phases {
        if let Some((cmd, echo)) = switch {
            proxy.command(cmd, echo);
        }
        results.push((phase, drive_flows(net, flows, per_flow, 15)));
    }
    proxy.quit();
    let report = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let _ = std::fs::remove_file(json);
    (results, report)
}

#[test]
fn every_datagram_is_answered_in_order_under_each_policy_and_layout() {
    let net = TestNet::new();
    let backend = kernel_backend();
    let json = std::env::temp_dir().join(format!("steer-proxy-{}.json", std::process::id()));
    let proxy = Proxy::start(
        &net,
        backend,
        &["--policy", "llc", "--runtime", "multi"],
        &json,
    );
    let phases = [
        ("llc/multi", None),
        (
            "llc/per-core",
            Some(("runtime per-core", "runtime PerCore")),
        ),
        ("always/per-core", Some(("policy always", "policy always"))),
        ("always/multi", Some(("runtime multi", "runtime Multi"))),
    ];
    let (flows, per_flow) = (6, 150);
    let (results, report) = drive_phases(proxy, &net, &phases, flows, per_flow, &json);
    for (phase, got) in &results {
        let lost: Vec<usize> = got.iter().map(|g| per_flow as usize - g.len()).collect();
        assert!(
            lost.iter().all(|&l| l == 0),
            "{phase}: lost per flow {lost:?}\n{report:#}"
        );
        assert_in_order(got, per_flow as usize, phase);
    }
    let p = &report["proxy"];
    let total = (4 * flows) as u64 * u64::from(per_flow);
    assert_eq!(p["flows"], 4 * flows as u64, "{report:#}");
    assert_eq!(p["flows_multi"], 2 * flows as u64, "{report:#}");
    assert_eq!(p["flows_per_core"], 2 * flows as u64, "{report:#}");
    assert_eq!(p["to_backend"], total, "{report:#}");
    assert_eq!(p["to_client"], total, "{report:#}");
    assert_eq!(report["frames"]["balanced"], true, "{report:#}");
}

/// Started with `--runtime worker`, the flows' tasks run on steer's worker
/// threads; switching to the other layouts at run time still serves new
/// flows, and back.
#[test]
fn the_worker_layout_answers_every_datagram_in_order_and_switches_at_run_time() {
    let net = TestNet::new();
    let backend = kernel_backend();
    let json = std::env::temp_dir().join(format!("steer-proxy-worker-{}.json", std::process::id()));
    let proxy = Proxy::start(&net, backend, &["--runtime", "worker"], &json);
    let phases = [
        ("llc/worker", None),
        (
            "llc/per-core",
            Some(("runtime per-core", "runtime PerCore")),
        ),
        ("llc/multi", Some(("runtime multi", "runtime Multi"))),
        (
            "llc/worker again",
            Some(("runtime worker", "runtime Worker")),
        ),
        ("always/worker", Some(("policy always", "policy always"))),
    ];
    let (flows, per_flow) = (6, 150);
    let (results, report) = drive_phases(proxy, &net, &phases, flows, per_flow, &json);
    for (phase, got) in &results {
        assert_in_order(got, per_flow as usize, phase);
    }
    let p = &report["proxy"];
    let total = (5 * flows) as u64 * u64::from(per_flow);
    assert_eq!(p["flows"], 5 * flows as u64, "{report:#}");
    assert_eq!(p["flows_worker"], 3 * flows as u64, "{report:#}");
    assert_eq!(p["flows_per_core"], flows as u64, "{report:#}");
    assert_eq!(p["flows_multi"], flows as u64, "{report:#}");
    assert_eq!(p["to_backend"], total, "{report:#}");
    assert_eq!(p["to_client"], total, "{report:#}");
    assert_eq!(p["send_errors"], 0, "{report:#}");
    assert_eq!(report["frames"]["balanced"], true, "{report:#}");
}

#[test]
fn the_layout_and_policy_flags_apply_at_start() {
    let net = TestNet::new();
    let backend = kernel_backend();
    let json = std::env::temp_dir().join(format!("steer-proxy-start-{}.json", std::process::id()));
    let proxy = Proxy::start(
        &net,
        backend,
        &["--policy", "always", "--runtime", "per-core"],
        &json,
    );
    let got = drive_flows(&net, 4, 100, 10);
    assert_in_order(&got, 100, "always/per-core");
    proxy.quit();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(report["policy"], "always", "{report:#}");
    assert_eq!(report["proxy"]["flows_per_core"], 4, "{report:#}");
}

#[test]
fn the_kernel_io_baseline_forwards_every_datagram_in_order() {
    let net = TestNet::new();
    let backend = kernel_backend();
    let json = std::env::temp_dir().join(format!("steer-proxy-kernel-{}.json", std::process::id()));
    let proxy = Proxy::start(&net, backend, &["--io", "kernel", "--cpus", "0,1"], &json);
    let (flows, per_flow) = (6, 150);
    let got = drive_flows(&net, flows, per_flow, 15);
    assert_in_order(&got, per_flow as usize, "io kernel");
    proxy.quit();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(report["io"], "kernel", "{report:#}");
    let total = flows as u64 * u64::from(per_flow);
    assert_eq!(report["proxy"]["to_backend"], total, "{report:#}");
    assert_eq!(report["proxy"]["to_client"], total, "{report:#}");
    assert_eq!(report["proxy"]["send_errors"], 0, "{report:#}");
}

#[test]
fn the_proxy_serves_with_workers_on_a_subset_of_the_cpus() {
    let net = TestNet::new();
    let backend = kernel_backend();
    let json = std::env::temp_dir().join(format!("steer-proxy-cpu1-{}.json", std::process::id()));
    let proxy = Proxy::start(
        &net,
        backend,
        &["--cpus", "1", "--runtime", "per-core"],
        &json,
    );
    let got = drive_flows(&net, 4, 100, 10);
    assert_in_order(&got, 100, "--cpus 1");
    proxy.quit();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(report["proxy"]["to_client"], 400, "{report:#}");
}
