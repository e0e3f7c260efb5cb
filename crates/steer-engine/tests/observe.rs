//! A running engine seen from outside: its stats socket answers with the
//! counters it keeps (per CPU, per AF_XDP socket, the frame census),
//! `/metrics` serves the same in a form `promtool check metrics` accepts,
//! a second engine on the interface is refused naming the first, and a
//! metrics address in use is a clean error that leaves nothing behind.
//! Needs root, as CI runs it.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use steer_core::policy::Policy;
use steer_engine::engine::{Engine, EngineBuilder, EngineError};
use steer_engine::observe::{query, LiveStats, ObserveError};
use steer_testbed::http::{http_get, metric_sum, promtool_check};
use steer_testbed::TestNet;
use support::{drive_flows, echo_builder};

/// A run directory of this test's own.
fn run_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("steer-observe-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Where the tests' metrics servers listen: a free loopback port.
const ANY_LOOPBACK_PORT: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// An echo engine on `net` publishing its stats socket in `dir`.
fn observed(net: &TestNet, dir: &std::path::Path) -> EngineBuilder {
    echo_builder(net, Policy::LlcAffinity, true).stats_dir(dir)
}

/// [`observed`], serving `/metrics` on a free loopback port, started.
fn served(net: &TestNet, dir: &std::path::Path) -> Engine {
    observed(net, dir)
        .metrics(ANY_LOOPBACK_PORT)
        .start()
        .unwrap()
}

/// Two flows of 20 datagrams are answered in full, and the stats socket
/// in `dir` shows the 40 replies sent.
fn assert_serves_two_flows(net: &TestNet, dir: &std::path::Path) {
    let got = drive_flows(net, 2, 20, 10);
    assert!(got.iter().all(|g| g.len() == 20), "{got:?}");
    let live = settled(
        || query(dir, &net.host, Duration::from_secs(2)).unwrap(),
        40,
    );
    assert_eq!(live.total().tx, 40);
}

/// The snapshot once its totals show `sent` transmitted (or after 5 s).
fn settled(read: impl Fn() -> LiveStats, sent: u64) -> LiveStats {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let live = read();
        if live.total().tx >= sent || Instant::now() > deadline {
            return live;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_running_engine_publishes_what_it_counts() {
    let (net, dir) = (TestNet::new(), run_dir("publish"));
    let engine = served(&net, &dir);
    let socket = engine.stats_socket().unwrap().to_path_buf();
    assert_eq!(socket, dir.join(format!("{}.sock", net.host)));
    let (flows, per_flow) = (4, 50);
    let got = drive_flows(&net, flows, per_flow, 10);
    assert!(got.iter().all(|g| g.len() == per_flow as usize), "{got:?}");
    let sent = (flows as u64) * u64::from(per_flow);

    // Workers flush their counters at the end of a batch, just after its
    // replies left: wait for that flush, not for the replies.
    let live = settled(
        || query(&dir, &net.host, Duration::from_secs(2)).unwrap(),
        sent,
    );
    assert_eq!(live.pid, std::process::id());
    assert_eq!(live.interface, net.host);
    let total = live.total();
    assert_eq!(total.core.rx, sent, "{live:#?}");
    assert_eq!(total.core.processed, sent);
    assert_eq!(total.tx, sent);
    assert_eq!(live.per_cpu.len(), engine.stats().per_cpu.len());
    assert_eq!(live.sockets.len(), 2);
    assert_eq!(live.sockets.iter().map(|s| s.rx_packets).sum::<u64>(), sent);
    assert!(live.sockets.iter().all(|s| s.rx_ring_full == 0));
    // The live census: every frame in one place.
    let places: i64 = live.frames.places().iter().map(|p| p.1).sum();
    assert!(live.frames.total > 0);
    assert_eq!(places, live.frames.total, "{:?}", live.frames);
    assert_eq!(engine.live_stats().total().core.rx, sent);

    // The same counters on /metrics, accepted by Prometheus' own linter.
    let addr = engine.metrics_addr().unwrap();
    assert!(addr.ip().is_loopback() && addr.port() != 0);
    let (status, text) = http_get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    promtool_check(&text).unwrap();
    assert_eq!(metric_sum(&text, "steer_softnet_processed_total"), sent);
    assert_eq!(metric_sum(&text, "steer_tx_packets_total"), sent);
    assert_eq!(metric_sum(&text, "steer_xsk_rx_packets_total"), sent);
    for family in [
        "steer_softnet_dropped_total",
        "steer_softnet_times_squeezed_total",
        "steer_steering_updates_total",
        "steer_desired_table_suppressed_total",
        "steer_xsk_rx_ring_full_total",
        "steer_umem_frames_in_use",
    ] {
        assert!(
            text.contains(&format!("# HELP {family} "))
                && text.contains(&format!("# TYPE {family} ")),
            "{family} missing in\n{text}"
        );
    }
    assert_eq!(http_get(addr, "/").0, "HTTP/1.1 404 Not Found");

    let report = engine.stop().unwrap();
    assert!(report.census_ok());
    // Gone with the engine: the socket, and the metrics port.
    assert!(!socket.exists());
    assert!(matches!(
        query(&dir, &net.host, Duration::from_secs(1)),
        Err(ObserveError::NoEngine { .. })
    ));
    assert!(std::net::TcpStream::connect(addr).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_engine_on_the_interface_is_refused_naming_the_first() {
    let (net, dir) = (TestNet::new(), run_dir("second"));
    let first = observed(&net, &dir).start().unwrap();
    let err = observed(&net, &dir).start().unwrap_err();
    match &err {
        EngineError::Observe(ObserveError::AlreadyServed { pid, .. }) => {
            assert_eq!(*pid, Some(std::process::id()))
        }
        other => panic!("{other}"),
    }
    let line = err.to_string();
    assert!(
        line.contains(&format!("pid {}", std::process::id())) && !line.contains('\n'),
        "{line}"
    );
    // The first engine did not notice.
    assert_serves_two_flows(&net, &dir);
    first.stop().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_metrics_address_in_use_is_a_clean_error() {
    let (net, dir) = (TestNet::new(), run_dir("inuse"));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = observed(&net, &dir).metrics(addr).start().unwrap_err();
    assert!(matches!(err, EngineError::Metrics { .. }), "{err}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    // Nothing left behind: no program, no socket.
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
    assert!(!dir.join(format!("{}.sock", net.host)).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `request` on a new connection to the stats socket and returns
/// the reply (one line, possibly empty when the client closed first).
fn raw_stats_request(path: &std::path::Path, request: &[u8], close_write: bool) -> String {
    use std::io::{BufRead, BufReader, Write};
    let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // The server may close (and reset) before reading all of a long request.
    let _ = s.write_all(request);
    if close_write {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut line = String::new();
    let _ = BufReader::new(&s).read_line(&mut line);
    line
}

/// Sends `request` to the metrics port and returns the status line.
fn raw_http(addr: std::net::SocketAddr, request: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(request);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[test]
fn garbage_on_the_stats_socket_and_the_metrics_port_changes_nothing() {
    let (net, dir) = (TestNet::new(), run_dir("garbage"));
    let engine = served(&net, &dir);
    let path = engine.stats_socket().unwrap().to_path_buf();
    let addr = engine.metrics_addr().unwrap();

    // Malformed controls and other lines: each one error line (a valid
    // control from root, as here, would be applied: `steer ctl`'s tests).
    let mut requests: Vec<Vec<u8>> = [
        "policy sometimes\n",
        "pin 1 flow udp 10.0.0.1 -> 10.0.0.2\n",
        "fast_path off\n",
        "pin 7777 1\n",
        "stop\n",
        "stats stats\n",
        "STATS\n",
        "\n",
        "stats\0\n",
    ]
    .iter()
    .map(|r| r.as_bytes().to_vec())
    .collect();
    requests.push(vec![b'x'; 100_000]);
    requests.push((0..=255u8).collect());
    // Deterministic noise.
    let mut x: u32 = 0x9e37_79b9;
    for len in [1, 7, 63, 64, 65, 500] {
        requests.push(
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect(),
        );
    }
    for r in &requests {
        let reply = raw_stats_request(&path, r, true);
        let v: serde_json::Value = serde_json::from_str(&reply).unwrap_or_else(|e| {
            panic!(
                "{:?}: not one JSON line ({e}): {reply:?}",
                &r[..r.len().min(40)]
            )
        });
        assert!(v["error"].is_string(), "{reply}");
    }
    // A client that connects and closes, one that says nothing (answered
    // after the server's one-second wait).
    drop(std::os::unix::net::UnixStream::connect(&path).unwrap());
    let reply = raw_stats_request(&path, b"", false);
    assert!(reply.contains("no request"), "{reply}");

    // The metrics port serves GET /metrics and nothing else.
    for (request, status) in [
        (
            &b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\npolicy"[..],
            "405",
        ),
        (b"PUT /metrics HTTP/1.1\r\n\r\n", "405"),
        (b"GET /policy?set=always HTTP/1.1\r\n\r\n", "404"),
        (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
            "400",
        ),
        (b"GET /metrics?policy=always HTTP/1.1\r\n\r\n", "200"),
    ] {
        let line = raw_http(addr, request);
        assert!(
            line.contains(status),
            "{:?}: {line}",
            String::from_utf8_lossy(request)
        );
    }

    // Nothing changed, and the engine still serves and answers.
    let live = query(&dir, &net.host, Duration::from_secs(2)).unwrap();
    assert_eq!((live.policy.as_str(), live.fast_path), ("llc", true));
    assert_serves_two_flows(&net, &dir);
    let report = engine.stop().unwrap();
    support::assert_accounted(&report);
    let _ = std::fs::remove_dir_all(&dir);
}
