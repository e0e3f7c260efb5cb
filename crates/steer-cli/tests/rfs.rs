//! `steer rfs` as an operator runs it, beside an unmodified iperf3 server
//! pinned to CPU 1: the server's connections are recorded in the kernel
//! and land on CPU 1, the live rows and the JSON summary say so, and
//! SIGINT detaches the program. Needs root, two CPUs and iperf3, as CI
//! runs it.

mod support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use steer_testbed::TestNet;
use support::on_cpu;

const PORT: u16 = 7410;

#[test]
fn steer_rfs_steers_an_unmodified_iperf3_to_its_reading_cpu() {
    let net = TestNet::new();
    let json = std::env::temp_dir().join(format!("steer-rfs-{}.json", std::process::id()));
    let mut rfs = support::rfs_command(&net, "-p", PORT, &json)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(rfs.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("recording tcp ports [7410]"), "{line}");
    assert!(net.link_show().contains("xdp"), "{}", net.link_show());

    // A server that never heard of steer, on CPU 1.
    let mut server = on_cpu(1, "iperf3")
        .args(["-s", "-1", "-p", &PORT.to_string()])
        .args(["-B", &net.host_v4.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 runs (install iperf3)");
    std::thread::sleep(Duration::from_millis(500));
    let client = net.ns_cmd(&[
        "iperf3",
        "-c",
        &net.host_v4.to_string(),
        "-p",
        &PORT.to_string(),
        "-t",
        "2",
    ]);
    assert!(
        client.status.success(),
        "{}",
        String::from_utf8_lossy(&client.stderr)
    );
    let _ = server.wait();
    // A live row saw the reads.
    let mut rows = String::new();
    for _ in 0..3 {
        line.clear();
        stdout.read_line(&mut line).unwrap();
        rows.push_str(&line);
    }
    assert!(rows.contains("reads "), "{rows}");

    let report = support::stop_rfs(rfs, &net, &json);
    let rec = &report["recorder"];
    assert!(rec["new_flows"].as_u64().unwrap() >= 2, "{report:#}");
    assert!(rec["reads"].as_u64().unwrap() > 0, "{report:#}");
    let landed: Vec<u64> = serde_json::from_value(report["landed_per_cpu"].clone()).unwrap();
    assert!(
        landed[1] > 10 * landed[0].max(1),
        "the segments landed on the reader's CPU 1: {report:#}"
    );
}
