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

/// A UDP server with a connected socket per peer (as QUIC servers and
/// many game and media servers keep), a Python process that never heard
/// of steer, reading with `recv` on CPU 1: no recvmsg hook sees those
/// reads (no sender address is asked for), the `sock_recv_length`
/// tracepoint does (`--connected-udp`), and the peer's datagrams land on
/// CPU 1.
#[test]
fn steer_rfs_records_the_reads_of_a_connected_udp_socket() {
    const CONNECTED_PORT: u16 = 7412;
    const PEER_PORT: u16 = 40412;
    const DATAGRAMS: usize = 2000;
    let net = TestNet::new();
    let json = std::env::temp_dir().join(format!("steer-rfs-conn-{}.json", std::process::id()));
    let mut rfs = support::rfs_command(&net, "-u", CONNECTED_PORT, &json)
        .arg("--connected-udp")
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(rfs.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("udp ports [7412]"), "{line}");

    // Bound to the host's port, connected to the peer's: reads with recv.
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         s.bind(('{host}', {port}))\n\
         s.connect(('{peer}', {peer_port}))\n\
         s.settimeout(5)\n\
         print('ready', flush=True)\n\
         n = 0\n\
         try:\n\
         \x20   while n < {count}:\n\
         \x20       s.recv(2048)\n\
         \x20       n += 1\n\
         except socket.timeout:\n\
         \x20   pass\n\
         print(n, flush=True)\n",
        host = net.host_v4,
        port = CONNECTED_PORT,
        peer = net.peer_v4,
        peer_port = PEER_PORT,
        count = DATAGRAMS,
    );
    let mut server = on_cpu(1, "python3")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut server_out = BufReader::new(server.stdout.take().unwrap());
    let mut ready = String::new();
    server_out.read_line(&mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");

    let peer = std::net::SocketAddr::new(net.peer_v4.into(), PEER_PORT);
    let to = std::net::SocketAddr::new(net.host_v4.into(), CONNECTED_PORT);
    let sender = net.in_ns(|| std::net::UdpSocket::bind(peer).unwrap());
    for i in 0..DATAGRAMS {
        sender
            .send_to(format!("datagram {i}").as_bytes(), to)
            .unwrap();
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let mut read = String::new();
    server_out.read_line(&mut read).unwrap();
    let _ = server.wait();
    let read: usize = read.trim().parse().unwrap();
    assert!(read > DATAGRAMS / 2, "the server read {read}");

    let report = support::stop_rfs(rfs, &net, &json);
    let rec = &report["recorder"];
    assert_eq!(rec["new_flows"].as_u64(), Some(1), "{report:#}");
    assert!(
        rec["reads"].as_u64().unwrap() as usize >= read / 2,
        "the connected socket's reads were recorded: {report:#}"
    );
    let landed: Vec<u64> = serde_json::from_value(report["landed_per_cpu"].clone()).unwrap();
    assert!(
        landed[1] > 10 * landed[0].max(1),
        "the datagrams landed on the reader's CPU 1: {report:#}"
    );
}
