//! `--topology MODEL` plans with the model (its LLCs decide the rule) and
//! still pins each worker to the CPU of the same number on this machine:
//! a running `steer echo` with a two-LLC synthetic model has each worker
//! thread allowed on exactly its CPU, and serves. Needs root and two CPUs.

mod running;
mod support;

use running::Echo;
use steer_testbed::TestNet;
use support::drive_flows;

/// Each `steer-worker-N` thread of `pid` and the CPUs it may run on.
fn worker_affinity(pid: i32) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !comm.starts_with("steer-worker-") {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim()
            .to_owned();
        found.push((comm.to_owned(), allowed));
    }
    found.sort();
    found
}

#[test]
fn a_model_topology_still_pins_each_worker_to_its_cpu() {
    let net = TestNet::new();
    let echo = Echo::start(
        &net,
        &["--topology", "pack:2 l3:1 core:1 pu:1", "--cpus", "0-1"],
    );
    let workers = worker_affinity(echo.pid());
    assert_eq!(
        workers,
        vec![
            ("steer-worker-0".to_owned(), "0".to_owned()),
            ("steer-worker-1".to_owned(), "1".to_owned()),
        ],
    );
    let got = drive_flows(&net, 4, 10, 5);
    assert!(got.iter().all(|g| g.len() == 10), "{got:?}");
}
