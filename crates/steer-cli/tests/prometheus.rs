//! `steer echo --metrics` checked with the real tools: `promtool check
//! metrics` accepts a scrape, and a real Prometheus server (Debian's
//! `prometheus`, on loopback, with a config and data directory of this
//! test's own and a free port) scrapes the engine under traffic; its HTTP
//! API then shows the counters grown by exactly what was sent. Needs root,
//! as CI runs it.

mod running;
mod support;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use running::Echo;
use steer_testbed::http::{http_get, metric_sum, promtool_check};
use steer_testbed::TestNet;
use support::drive_flows;

/// A Prometheus server scraping one target every second.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Self {
        let dir = std::env::temp_dir().join(format!("steer-prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: steer\n    scrape_interval: 1s\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        // A free port: another process may take it between our probe and
        // Prometheus' bind, so try again with a new one if it dies.
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
            let child = Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--log.level=warn")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect(
                    "prometheus runs (Debian's prometheus package: scripts/setup.sh installs it)",
                );
            let mut p = Prometheus {
                child,
                dir: dir.clone(),
                url: format!("http://127.0.0.1:{port}"),
            };
            if p.ready() {
                return p;
            }
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        panic!(
            "prometheus did not start: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
    }

    /// Waits for `/-/ready` (20 s at most); false if it died.
    fn ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if ureq::get(format!("{}/-/ready", self.url)).call().is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// The value of an instant query that returns one sample.
    fn query(&self, q: &str) -> Option<f64> {
        let body = ureq::get(format!("{}/api/v1/query", self.url))
            .query("query", q)
            .call()
            .ok()?
            .body_mut()
            .read_to_string()
            .ok()?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        assert_eq!(v["status"], "success", "{q}: {body}");
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// Queries `q` until it returns `want` (30 s at most); the last value.
    fn wait_for(&self, q: &str, want: f64) -> Option<f64> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.query(q);
            if got == Some(want) || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn prometheus_scrapes_a_running_engine_and_counts_what_was_sent() {
    let net = TestNet::new();
    let echo = Echo::start(&net, &["--metrics", "127.0.0.1:0"]);
    let metrics = echo.metrics_addr();
    assert!(metrics.ip().is_loopback(), "{metrics}");

    // promtool accepts a scrape.
    let (status, text) = http_get(metrics, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    promtool_check(&text).unwrap();

    let prometheus = Prometheus::start(metrics);
    assert_eq!(
        prometheus.wait_for("up{job=\"steer\"}", 1.0),
        Some(1.0),
        "Prometheus never scraped steer at {metrics}"
    );
    let counters = [
        "sum(steer_softnet_processed_total{job=\"steer\"})",
        // Every datagram went through one AF_XDP socket and got one reply.
        "sum(steer_xsk_rx_packets_total{job=\"steer\"})",
        "sum(steer_tx_packets_total{job=\"steer\"})",
    ];
    let before: Vec<f64> = counters
        .iter()
        .map(|q| prometheus.query(q).expect("the counter is scraped"))
        .collect();

    let (flows, per_flow) = (4, 100);
    let got = drive_flows(&net, flows, per_flow, 20);
    assert!(got.iter().all(|g| g.len() == per_flow as usize), "{got:?}");
    let sent = f64::from(flows as u32 * per_flow);

    for (q, before) in counters.iter().zip(&before) {
        assert_eq!(
            prometheus.wait_for(q, before + sent),
            Some(before + sent),
            "Prometheus' {q} after sending {sent}"
        );
    }
    // What Prometheus stored agrees with a scrape now.
    let (_, text) = http_get(metrics, "/metrics");
    assert_eq!(
        metric_sum(&text, "steer_softnet_processed_total") as f64,
        before[0] + sent
    );
    drop(prometheus);
    assert!(echo.stop().success());
}
