//! Recording in the kernel (transparent mode): an unmodified iperf3 server,
//! a process that never heard of steer, reads its TCP flows on the CPU it
//! is pinned to; the BPF recorder on `sock_recv_length` writes that CPU for
//! each flow, and the RFS program hands the flow's segments to that CPU's
//! stack. When the server moves to another CPU mid-run, the LLC rule keeps
//! the entry if the CPUs share an LLC (counted as suppressed) and moves the
//! flow if they do not (a synthetic 2-LLC model); closed connections are
//! forgotten once idle. Needs root, two CPUs and iperf3.

mod support;

use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use steer_core::cpu::{CpuLayout, CpuSet};
use steer_kernel::{KernelSteering, Policy, Proto, RfsStats};
use steer_testbed::process::move_process;
use steer_testbed::Netns;
use support::Pair;

const PORT: u16 = 7100;

fn start(pair: &Pair, cpus_per_llc: usize) -> KernelSteering {
    let dev = pair.srv_dev.clone();
    Pair::in_ns(&pair.srv_ns, move || {
        KernelSteering::builder(&dev)
            .own(Proto::Tcp, PORT)
            .policy(Policy::LlcAffinity)
            .topology(Arc::new(CpuLayout::uniform(2, cpus_per_llc).unwrap()))
            .cpus(CpuSet::first(2))
            .record_in_kernel(true)
            .idle_timeout(Duration::from_millis(400))
            .sweep_every(Duration::from_millis(100))
            .start()
            .expect("steering with the in-kernel recorder starts")
    })
}

/// `iperf3 -s -1` in the server's namespace, pinned to `cpu`.
fn iperf3_server(pair: &Pair, cpu: usize) -> Child {
    let child = Netns::command_on_cpu(&pair.srv_ns, cpu, "iperf3")
        .args(["-s", "-1", "-p", &PORT.to_string()])
        .args(["-B", &pair.srv_v4.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 runs (install iperf3)");
    std::thread::sleep(Duration::from_millis(500));
    child
}

/// `iperf3 -c` from the client's namespace for `secs` seconds.
fn iperf3_client(pair: &Pair, secs: u32) -> Child {
    Netns::command(&pair.cli_ns, "iperf3")
        .arg("-c")
        .arg(pair.srv_v4.to_string())
        .args(["-p", &PORT.to_string(), "-t", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the iperf3 client runs")
}

fn landed(steering: &KernelSteering) -> Vec<u64> {
    steering.program().unwrap().landed_per_cpu().unwrap()
}

fn stats(steering: &KernelSteering) -> RfsStats {
    steering.program().unwrap().stats().unwrap()
}

/// Runs a 4-second iperf3 test with the server on CPU 1, moved to CPU 0
/// after 2 s; returns the counters and the frames landed per CPU before
/// and after the move.
fn run_with_a_move(pair: &Pair, steering: &KernelSteering) -> (RfsStats, Vec<u64>, Vec<u64>) {
    let mut server = iperf3_server(pair, 1);
    let mut client = iperf3_client(pair, 4);
    std::thread::sleep(Duration::from_secs(2));
    let before = landed(steering);
    move_process(server.id(), 0);
    assert!(client.wait().unwrap().success(), "the iperf3 client failed");
    let _ = server.wait();
    let after = landed(steering);
    let moved: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    (stats(steering), before, moved)
}

#[test]
fn an_unmodified_servers_flows_land_on_its_cpu_and_cross_llc_moves_follow_it() {
    let pair = Pair::new();
    let steering = start(&pair, 1); // CPUs 0 and 1 in different LLCs
    let (st, before, moved) = run_with_a_move(&pair, &steering);
    eprintln!("{st:?}\nlanded before the move {before:?}, after {moved:?}");
    // The control and the data connection were recorded from the reads of
    // a process that never called steer.
    assert!(st.recorder_new_flows >= 2, "{st:?}");
    assert!(st.recorded > 0 && st.redirected > 0, "{st:?}");
    // Before the move the segments landed on the reading CPU (1).
    assert!(
        before[1] > 10 * before[0].max(1),
        "landed before {before:?}"
    );
    // Across LLCs the move is written, and the segments follow the reader.
    assert!(st.recorder_updates > st.recorder_new_flows, "{st:?}");
    assert!(moved[0] > moved[1], "landed after the move {moved:?}");
    assert_eq!(st.recorder_suppressed, 0, "{st:?}");
}

#[test]
fn a_move_within_the_llc_is_not_written() {
    let pair = Pair::new();
    let steering = start(&pair, 2); // one LLC
    let (st, before, moved) = run_with_a_move(&pair, &steering);
    eprintln!("{st:?}\nlanded before the move {before:?}, after {moved:?}");
    assert!(st.recorder_new_flows >= 2, "{st:?}");
    // Only the placements were written; the reads on CPU 0 after the move
    // left the entries alone.
    assert_eq!(st.recorder_updates, st.recorder_new_flows, "{st:?}");
    assert!(st.recorder_suppressed > 0, "{st:?}");
    assert!(moved[1] > moved[0], "the flow stayed on CPU 1: {moved:?}");
    // The connections are closed: once idle, the recorder's flows are
    // forgotten (the maps do not fill up with dead connections).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !steering.program().unwrap().tracked().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "idle flows were never forgotten"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(steering.stats().in_kernel_forgotten >= 2);
}
