//! `steer-bench seed sockmap-affinity` (seed 001, "sockmap: CPU affinity
//! for the backlog workqueue"): send rate
//! against receive rate of a proxy whose sending client is pinned to the
//! same CPU as one of the proxy's workers. In the seed a local client
//! saturating its CPU starved the proxy work on that same CPU; running
//! that work on another CPU brought receive up to send.
//!
//! What it runs. `steer proxy` on the root-namespace end of a fresh
//! 2-queue veth pair, forwarding to a kernel `sockperf server` on
//! 127.0.0.1; `--clients` `sockperf under-load --mps max --reply-every 1`
//! clients (every message asks for a reply) in the namespace, all pinned
//! to `--client-cpu`. XPS on the namespace's veth end decides which rx
//! queue, and so which proxy worker, gets the clients' traffic. Per task
//! layout (`per-core`: a flow's task on the receiving worker's CPU;
//! `multi`: one tokio work-stealing runtime), three placements:
//!
//! ```text
//! same      workers pinned; traffic on the queue of the worker pinned to
//!           the client's CPU (the seed's "without cpu-affinity")
//! unpinned  steer proxy --no-pin, same queue: the scheduler places them
//! other     workers pinned; traffic on the other CPU's worker (the fix)
//! ```
//!
//! Columns (per second of client run time, sockperf's `[Total Run]`):
//! sent/s: datagrams the clients sent; rx/s: datagrams steer received over
//! AF_XDP; fwd/s: forwarded to the backend; reply/s: backend replies sent
//! back; recv/s: replies the clients got; fwd%, recv%: of sent; xsk drop:
//! the kernel's AF_XDP drops; app drop: received but not delivered (full
//! flow queue or ring); rx cpu: the worker CPU whose counters show the
//! traffic; cpu: proxy CPU s/s.
//!
//! Goal: none numeric; does pinning hurt when the sender shares a
//! worker's CPU, and does moving the flow to the other CPU restore it?

use crate::table::Layout;
use std::{fmt::Write as _, path::Path, time::Duration};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

use super::{
    find_run,
    harness::{self, Harness},
    result_doc, sort_runs, Outcome, SteerRun,
};
use crate::netns::TestBed;
use crate::num::{div, fixed, jnum, jopt, num, raw};
use crate::procs::{Proc, Spawn};

/// The JSON `tool` of this seed.
pub const TOOL: &str = "steer-bench seed 001";
/// What results of the shell script call it.
pub const OLD_TOOL: &str = "benches/seeds/seed001-pinned-proxy.sh";
const PLACEMENTS: [&str; 3] = ["same", "unpinned", "other"];
const CLIENT_PORT: u16 = 21000;

/// `steer-bench seed sockmap-affinity`.
#[derive(Debug, Clone, Args)]
pub struct SockmapAffinity {
    /// sockperf run time per configuration, seconds.
    #[arg(short = 't', long = "time", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    pub secs: u64,
    /// CI smoke: 2 s per configuration.
    #[arg(long)]
    pub quick: bool,
    /// Concurrent sockperf clients, one flow each.
    #[arg(short = 'c', long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub clients: u16,
    /// The CPU the clients are pinned to (0 or 1: the 2-queue veth pair
    /// maps queue q to worker CPU q).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub client_cpu: u8,
    /// Send rate per client (`max` or messages per second).
    #[arg(long, default_value = "max", value_parser = crate::args::parse_mps)]
    pub mps: String,
    /// Message size (at least sockperf's 14-byte header).
    #[arg(short = 'm', long = "msg-size", default_value_t = 64, value_parser = clap::value_parser!(u16).range(14..))]
    pub size: u16,
    /// Task layouts.
    #[arg(long, value_delimiter = ',', default_value = "per-core,multi", value_parser = ["per-core", "multi"])]
    pub layouts: Vec<String>,
    /// The `steer` command, output, runs, source tree.
    #[command(flatten)]
    pub run: SteerRun,
}

fn layouts(doc: &Value) -> Vec<String> {
    super::config_list(doc, "layouts", &["per-core", "multi"])
}

fn run_of<'a>(doc: &'a Value, layout: &str, place: &str) -> Option<&'a Value> {
    find_run(&doc["runs"], |r| {
        r["layout"] == layout && r["placement"] == place
    })
}

/// The table the seed prints, from its JSON document.
pub fn table(doc: &Value) -> String {
    let c = &doc["config"];
    let client_cpu = num(c, "/client_cpu").unwrap_or(0.0);
    let mut t = String::new();
    let _ = writeln!(t);
    let _ = writeln!(
        t,
        "seed 001: steer proxy, {} sockperf under-load clients (--mps {}, reply every message, {} B) pinned to CPU {}, {}s per run",
        raw(c.get("clients")),
        raw(c.get("mps")),
        raw(c.get("msg_size")),
        raw(c.get("client_cpu")),
        raw(c.get("seconds"))
    );
    let _ = writeln!(
        t,
        "same = workers pinned, traffic on CPU {}'s worker; unpinned = --no-pin; other = pinned, traffic on CPU {}'s worker",
        raw(c.get("client_cpu")),
        crate::num::shortest(1.0 - client_cpu)
    );
    let layout = Layout::new(&[9, 9], &[6, 9, 9, 9, 9, 9, 6, 6, 8, 9, 5]);
    let row = |t: &mut String, v: [&str; 13]| t.push_str(&layout.line(&v));
    row(
        &mut t,
        [
            "layout",
            "placement",
            "rx_cpu",
            "sent/s",
            "rx/s",
            "fwd/s",
            "reply/s",
            "recv/s",
            "fwd%",
            "recv%",
            "xsk drop",
            "app drop",
            "cpu",
        ],
    );
    let layouts = layouts(doc);
    for l in &layouts {
        for p in PLACEMENTS {
            let Some(r) = run_of(doc, l, p) else {
                let d = "-";
                row(
                    &mut t,
                    [l, p, d, d, d, d, d, d, d, d, d, d, "-  (no numbers)"],
                );
                continue;
            };
            let f = |k: &str, d| fixed(num(r, &format!("/{k}")), d);
            row(
                &mut t,
                [
                    l,
                    p,
                    &raw(r.get("rx_cpu")),
                    &f("sent_per_s", 0),
                    &f("rx_per_s", 0),
                    &f("forwarded_per_s", 0),
                    &f("replied_per_s", 0),
                    &f("received_per_s", 0),
                    &f("forwarded_pct", 1),
                    &f("received_pct", 1),
                    &raw(r.get("xsk_drops")),
                    &raw(r.get("steer_drops")),
                    &f("proxy_cpu_s_per_s", 2),
                ],
            );
        }
    }
    for l in &layouts {
        let fwd = |p| run_of(doc, l, p).and_then(|r| num(r, "/forwarded_per_s"));
        let _ = writeln!(
            t,
            "{l}: forwarded/s same {}, unpinned {} ({}x), other {} ({}x)",
            fixed(fwd("same"), 0),
            fixed(fwd("unpinned"), 0),
            div(fwd("unpinned"), fwd("same"), 2),
            fixed(fwd("other"), 0),
            div(fwd("other"), fwd("same"), 2)
        );
    }
    let _ = writeln!(t);
    t
}

/// What the clients said, summed (the run time is the longest client's).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Clients {
    ok: u32,
    sent: f64,
    received: f64,
    runtime_s: f64,
}

/// Sums the clients' `[Total Run]` lines; clients without one are skipped.
fn sum_clients(reports: &[crate::sockperf::Report]) -> Clients {
    let mut c = Clients::default();
    for r in reports {
        let Some(sent) = r.num("total_sent") else {
            continue;
        };
        c.ok += 1;
        c.sent += sent;
        c.received += r.num("total_received").unwrap_or(0.0);
        c.runtime_s = c.runtime_s.max(r.num("total_runtime").unwrap_or(0.0));
    }
    c
}

/// The worker CPU that received the most (the last of equals).
fn busiest_cpu(per_cpu: &Value) -> Value {
    let mut best: Option<&Value> = None;
    for c in per_cpu.as_array().into_iter().flatten() {
        if best.is_none_or(|b| num(c, "/rx") >= num(b, "/rx")) {
            best = Some(c);
        }
    }
    best.map_or(Value::Null, |b| b["cpu"].clone())
}

struct Measured {
    clients: u16,
    cl: Clients,
    cpu_s: f64,
    wall_s: f64,
    proxy_exit: i32,
}

fn result_json(layout: &str, place: &str, fin: &Value, m: &Measured) -> Value {
    let t = &fin["total"];
    let rt = m.cl.runtime_s;
    let per = |v: Option<f64>| jopt(v.map(|v| v / rt));
    let pct = |v: Option<f64>| jopt(v.filter(|_| m.cl.sent > 0.0).map(|v| 100.0 * v / m.cl.sent));
    let fwd = num(fin, "/proxy/to_backend");
    let xsk = num(fin, "/kernel_xsk/rx_dropped").unwrap_or(0.0)
        + num(fin, "/kernel_xsk/rx_ring_full").unwrap_or(0.0);
    let rx_by_cpu: Vec<Value> = fin["per_cpu"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!({"cpu": c["cpu"], "rx": c["rx"]}))
        .collect();
    json!({
        "layout": layout,
        "placement": place,
        "pinned": place != "unpinned",
        "clients": m.clients,
        "clients_ok": m.cl.ok,
        "runtime_s": jnum(rt),
        "sent": jnum(m.cl.sent),
        "rx": t["rx"],
        "forwarded": fin["proxy"]["to_backend"],
        "replied": fin["proxy"]["to_client"],
        "received": jnum(m.cl.received),
        "sent_per_s": per(Some(m.cl.sent)),
        "rx_per_s": per(num(t, "/rx")),
        "forwarded_per_s": per(fwd),
        "replied_per_s": per(num(fin, "/proxy/to_client")),
        "received_per_s": per(Some(m.cl.received)),
        "forwarded_pct": pct(fwd),
        "received_pct": pct(Some(m.cl.received)),
        "xsk_drops": jnum(xsk),
        "steer_drops": t["drops"],
        "app_dropped": t["app_dropped"],
        "ring_dropped": t["dropped"],
        "send_errors": fin["proxy"]["send_errors"],
        "rx_cpu": busiest_cpu(&fin["per_cpu"]),
        "rx_by_cpu": rx_by_cpu,
        "proxy_cpu_s_per_s": jnum(m.cpu_s / m.wall_s),
        "proxy_exit": m.proxy_exit,
        "final_stats": fin,
    })
}

/// XPS on the namespace's veth end: the client CPU's transmits go to tx
/// queue `q` (hence rx queue `q` of the host end, worker CPU `q`), the
/// other CPU's to the other queue.
fn xps(bed: &TestBed, client_cpu: u8, q: u8) -> Result<()> {
    let (mc, mo) = (1u32 << client_cpu, 1u32 << (1 - client_cpu));
    for tx in 0..2u8 {
        let mask = if tx == q { mc } else { mo };
        harness::write_in_ns(
            &bed.ns,
            &format!("/sys/class/net/{}/queues/tx-{tx}/xps_cpus", bed.peer_if),
            &format!("{mask:x}"),
        )
        .with_context(|| format!("could not set XPS on {}", bed.peer_if))?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_config(
    a: &SockmapAffinity,
    h: &Harness,
    bed: &TestBed,
    steer: &Path,
    port: u16,
    backend_port: u16,
    layout: &str,
    place: &str,
) -> Result<Option<Value>> {
    let tag = format!("{layout}-{place}");
    let other_cpu = 1 - a.client_cpu;
    let fin_path = h.path(&format!("{tag}-final.json"));
    let mut argv: Vec<String> = vec![
        steer.to_string_lossy().into_owned(),
        "proxy".into(),
        "--interface".into(),
        bed.host_if.clone(),
        "--port".into(),
        port.to_string(),
        "--backend".into(),
        format!("127.0.0.1:{backend_port}"),
        "--runtime".into(),
        layout.into(),
        "--stats-json".into(),
        fin_path.to_string_lossy().into_owned(),
    ];
    if place == "unpinned" {
        argv.push("--no-pin".into());
    }
    let rx_cpu = if place == "other" {
        other_cpu
    } else {
        a.client_cpu
    };
    xps(bed, a.client_cpu, rx_cpu)?;
    h.log(&format!(
        "{tag}: steer proxy --runtime {layout}{}, traffic on the queue of worker CPU {rx_cpu}, {}s",
        if place == "unpinned" { " --no-pin" } else { "" },
        a.secs
    ));
    let log = h.path(&format!("{tag}-proxy.log"));
    let mut proxy = Proc::spawn("steer proxy", &argv, &log, &Spawn::default())?;
    proxy
        .wait_ready(Duration::from_secs(60))
        .with_context(|| format!("{tag}: steer proxy did not start"))?;
    let c0 = proxy.cpu_ticks();
    let t0 = std::time::Instant::now();
    let mut clients = Vec::new();
    for i in 0..a.clients {
        let argv: Vec<String> = [
            "ip",
            "netns",
            "exec",
            &bed.ns,
            "sockperf",
            "under-load",
            "-i",
            &bed.host_v4.to_string(),
            "-p",
            &port.to_string(),
            "-t",
            &a.secs.to_string(),
            &format!("--mps={}", a.mps),
            "--reply-every",
            "1",
            "-m",
            &a.size.to_string(),
            "--client_port",
            &(CLIENT_PORT + i).to_string(),
        ]
        .map(String::from)
        .to_vec();
        clients.push(Proc::spawn(
            &format!("sockperf client {i}"),
            &argv,
            &h.path(&format!("{tag}-client{i}.log")),
            &Spawn {
                pin: Some(vec![a.client_cpu.into()]),
                ..Spawn::default()
            },
        )?);
    }
    let mut reports = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        let (rc, _) = c.wait_exit(Duration::from_secs(a.secs + 30))?;
        let r = crate::sockperf::parse(&std::fs::read_to_string(&c.log).unwrap_or_default());
        if rc != 0 {
            h.log(&format!(
                "{tag}: client {i} exited with an error: {}",
                crate::procs::tail(&c.log, 2)
            ));
        }
        if r.num("total_sent").is_none() {
            h.log(&format!(
                "{tag}: client {i} has no results: {}",
                r.error.as_deref().unwrap_or("?")
            ));
        }
        reports.push(r);
    }
    h.check()?;
    let c1 = proxy.cpu_ticks();
    let wall_s = t0.elapsed().as_secs_f64();
    let rc = proxy.stop(Duration::from_secs(15))?;
    if rc != 0 {
        h.log(&format!(
            "{tag}: steer proxy exited with {rc}: {}",
            crate::procs::tail(&log, 2)
        ));
    }
    let Some(fin) = crate::servers::read_json(&fin_path) else {
        h.log(&format!("{tag}: no final counters from steer proxy"));
        return Ok(None);
    };
    let cl = sum_clients(&reports);
    if cl.ok == 0 || cl.runtime_s == 0.0 {
        h.log(&format!("{tag}: no client results"));
        return Ok(None);
    }
    let cpu_s = match (c0, c1) {
        (Some(c0), Some(c1)) => c1.saturating_sub(c0) as f64 / harness::clk_tck(),
        _ => 0.0,
    };
    let m = Measured {
        clients: a.clients,
        cl,
        cpu_s,
        wall_s,
        proxy_exit: rc,
    };
    Ok(Some(result_json(layout, place, &fin, &m)))
}

/// One run of the seed: every layout and placement, the table and the JSON.
pub fn run_once(a: &SockmapAffinity, h: &Harness) -> Result<Outcome> {
    let mut a = a.clone();
    if a.quick {
        a.secs = 2;
    }
    harness::require_root("network namespaces, veth pairs, XDP programs, AF_XDP sockets")?;
    harness::require_tool("sockperf")?;
    harness::require_tool("ip")?;
    harness::require_cpus_0_1("the clients and the proxy's workers are pinned to them")?;
    if a.layouts.is_empty() {
        bail!("--layouts: give per-core, multi or both");
    }
    let (steer, src) = a.run.paths()?;
    let bed = TestBed::create(2)?;
    let port = harness::free_udp_port(7000)?;
    let backend_port = harness::free_udp_port(17000)?;
    let mut backend = super::start_backend(h, backend_port)?;
    h.log(&format!(
        "netns {}: {} sockperf clients on CPU {} -> {} {}:{port} -> backend 127.0.0.1:{backend_port}",
        bed.ns, a.clients, a.client_cpu, bed.host_if, bed.host_v4
    ));
    let mut runs = Vec::new();
    let mut failed = false;
    for layout in &a.layouts {
        for place in PLACEMENTS {
            match run_config(&a, h, &bed, &steer, port, backend_port, layout, place)? {
                Some(r) => runs.push(r),
                None => failed = true,
            }
        }
    }
    let _ = backend.stop(Duration::from_secs(5));
    drop(bed);
    sort_runs(&mut runs, "layout", "placement");
    let doc = result_doc(
        TOOL,
        &src,
        json!({
            "config": {
                "seconds": a.secs,
                "clients": a.clients,
                "client_cpu": a.client_cpu,
                "mps": a.mps,
                "msg_size": a.size,
                "reply_every": 1,
                "sockperf": crate::procs::first_line("sockperf", "--version"),
                "layouts": a.layouts,
            },
            "runs": runs,
        }),
    );
    Ok(Outcome::new(doc, table, failed, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::tests::{committed_tables, result};

    #[test]
    fn tables_of_the_committed_results() {
        committed_tables("seed001-pinned-proxy", "table-seed001", table, |_, _| {});
        let mut doc = result("seed001-pinned-proxy-1");
        doc["config"]["layouts"] = json!(["multi"]);
        doc["runs"] = json!([]);
        let t = table(&doc);
        assert!(!t.contains("per-core"), "{t}");
        assert!(t.contains("multi     same      "), "{t}");
        assert!(t.contains("-  (no numbers)"), "{t}");
        assert!(
            t.contains("multi: forwarded/s same -, unpinned - (-x)"),
            "{t}"
        );
    }

    #[test]
    fn results_from_the_clients_and_counters() {
        let client = |sent: &str, rcv: &str, rt: &str| {
            crate::sockperf::parse(&format!(
                "sockperf: [Total Run] RunTime={rt} sec; Warm up time=400 msec; SentMessages={sent}; ReceivedMessages={rcv}\n"
            ))
        };
        let cl = sum_clients(&[
            client("1000", "300", "2.000"),
            crate::sockperf::parse("sockperf: ERROR: bind failed\n"),
            client("500", "100", "2.100"),
        ]);
        assert_eq!(
            cl,
            Clients {
                ok: 2,
                sent: 1500.0,
                received: 400.0,
                runtime_s: 2.1
            }
        );
        let fin = json!({
            "total": {"rx": 1400, "drops": 7, "app_dropped": 5, "dropped": 2},
            "proxy": {"to_backend": 420, "to_client": 410, "send_errors": 0},
            "kernel_xsk": {"rx_dropped": 3, "rx_ring_full": 4},
            "per_cpu": [{"cpu": 0, "rx": 700}, {"cpu": 1, "rx": 700}],
        });
        let m = Measured {
            clients: 3,
            cl,
            cpu_s: 1.0,
            wall_s: 2.0,
            proxy_exit: 0,
        };
        let r = result_json("multi", "unpinned", &fin, &m);
        assert_eq!(r["pinned"], json!(false));
        assert_eq!(r["clients_ok"], json!(2));
        assert_eq!(r["forwarded_per_s"], json!(200));
        assert_eq!(r["forwarded_pct"], json!(28));
        assert_eq!(r["xsk_drops"], json!(7));
        assert_eq!(r["rx_cpu"], json!(1), "the last of equals, as jq's max_by");
        assert_eq!(r["proxy_cpu_s_per_s"], json!(0.5));
        assert_eq!(
            r["rx_by_cpu"],
            json!([{"cpu": 0, "rx": 700}, {"cpu": 1, "rx": 700}])
        );
    }
}
