//! `steer rfs -u` as an operator runs it, beside an unmodified dnsmasq
//! pinned to CPU 1 and queried by dnsperf from the peer namespace: the
//! senders are recorded in the kernel from dnsmasq's reads (cgroup recvmsg
//! hooks on the cgroup v2 root) and their datagrams land on CPU 1; the live
//! rows, a Prometheus scrape (`--metrics`, checked by promtool) and the
//! JSON summary say so, and SIGINT detaches everything. Needs root, two
//! CPUs, dnsmasq, dnsperf and promtool, as CI runs it.

mod support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use steer_testbed::http::{http_get, metric_sum, promtool_check};
use steer_testbed::TestNet;
use support::on_cpu;

const PORT: u16 = 7411;

#[test]
fn steer_rfs_steers_an_unmodified_dnsmasqs_senders_to_its_reading_cpu() {
    let net = TestNet::new();
    let json = std::env::temp_dir().join(format!("steer-rfs-udp-{}.json", std::process::id()));
    let mut rfs = support::rfs_command(&net, "-u", PORT, &json)
        .args(["--metrics", "0"])
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(rfs.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(
        line.contains("recording tcp ports [], udp ports [7411]"),
        "{line}"
    );
    line.clear();
    stdout.read_line(&mut line).unwrap();
    let metrics: std::net::SocketAddr = line
        .trim()
        .strip_prefix("steer rfs: metrics on http://")
        .and_then(|l| l.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap();

    // A server that never heard of steer, on CPU 1, bound to the host's
    // address only (the flows are keyed by sender all the same).
    let mut server = on_cpu(1, "dnsmasq")
        .args(["-k", "--conf-file=/dev/null", "--pid-file="])
        .arg(format!("--port={PORT}"))
        .arg(format!("--listen-address={}", net.host_v4))
        .args(["--bind-interfaces", "--no-resolv", "--no-hosts"])
        .args(["--user=root", "--group=root", "--cache-size=0"])
        .arg("--address=/steer.test/10.9.9.9")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("dnsmasq runs (install dnsmasq-base)");
    std::thread::sleep(Duration::from_millis(500));
    let queries = std::env::temp_dir().join(format!("steer-rfs-udp-q-{}", std::process::id()));
    std::fs::write(&queries, "a.steer.test A\nb.steer.test A\n").unwrap();
    let client = net.ns_cmd(&[
        "dnsperf",
        "-s",
        &net.host_v4.to_string(),
        "-p",
        &PORT.to_string(),
        "-d",
        queries.to_str().unwrap(),
        "-c",
        "2",
        "-l",
        "2",
        "-Q",
        "2000",
    ]);
    let _ = std::fs::remove_file(&queries);
    let _ = server.kill();
    let _ = server.wait();
    let report = String::from_utf8_lossy(&client.stdout);
    assert!(client.status.success(), "{report}");
    assert!(report.contains("Queries completed:"), "{report}");
    // A live row saw the reads.
    let mut rows = String::new();
    for _ in 0..2 {
        line.clear();
        stdout.read_line(&mut line).unwrap();
        rows.push_str(&line);
    }
    assert!(rows.contains("reads "), "{rows}");

    // The same counters, scraped while it runs.
    let (status, text) = http_get(metrics, "/metrics");
    assert!(status.contains("200"), "{status}");
    promtool_check(&text).unwrap();
    let landed = |cpu: u32| metric_sum(&text, &format!("steer_rfs_landed_total{{cpu=\"{cpu}\"}}"));
    assert!(landed(1) > 10 * landed(0).max(1), "{text}");
    assert!(
        metric_sum(&text, "steer_rfs_recorder_new_flows_total") >= 2,
        "{text}"
    );

    let report = support::stop_rfs(rfs, &net, &json);
    assert_eq!(report["udp_ports"], serde_json::json!([PORT]), "{report:#}");
    let rec = &report["recorder"];
    // dnsperf's two senders.
    assert!(rec["new_flows"].as_u64().unwrap() >= 2, "{report:#}");
    assert!(rec["reads"].as_u64().unwrap() > 1000, "{report:#}");
    assert!(
        report["program"]["delivered"].as_u64().unwrap() > 1000,
        "{report:#}"
    );
    let landed: Vec<u64> = serde_json::from_value(report["landed_per_cpu"].clone()).unwrap();
    assert!(
        landed[1] > 10 * landed[0].max(1),
        "the datagrams landed on the reader's CPU 1: {report:#}"
    );
}
