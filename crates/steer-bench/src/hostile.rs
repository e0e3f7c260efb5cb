//! `steer-bench hostile`: a UDP proxy in front of hostile traffic. One
//! well-behaved client sends numbered requests through the proxy to a UDP
//! echo backend, first alone (its baseline), then while the same spray is
//! aimed at a port nobody owns (the machine's share: the sender and the
//! kernel dropping the spray take the CPUs the proxy, client and backend
//! share), then while a sprayer opens new flows at the proxy at a set rate:
//! one datagram from each of many random source addresses and ports, as
//! any host on the internet can send. Reported: the client's answered share
//! and latency in the three phases, and the proxy's
//! open flows, descriptors and RSS over time, its budget counters, and
//! whether it is still alive; for `steer proxy` (AF_XDP) and the plain
//! tokio proxy (`steer proxy --io kernel`).
//!
//! The proxy runs under `prlimit --nofile=N:N`, as under `ulimit -n N`.
//! Everything stays on the tool's own veth pair: the spray's sources are in
//! 198.19.0.0/16 (the benchmarking range), routed back into the namespace,
//! which drops what it is sent; the backend is on loopback.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use steer_core::packet::build::FrameBuilder;

use crate::netns::{ip, TestBed};
use crate::num::f0;
use crate::procs::{tail, Proc, Spawn};
use crate::sys::{mono_ns, sleep_until, PacketSender};
use crate::table::{md_head, md_row};

/// The proxy's UDP port.
const PORT: u16 = 7300;
/// A port nobody owns on the proxy's host: the control spray's target.
const UNOWNED_PORT: u16 = 7399;
/// How long the client waits for each answer.
const ANSWER_WAIT: Duration = Duration::from_millis(1000);

/// Which proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProxyKind {
    /// `steer proxy`: AF_XDP, flows on steer's workers, the flow budget.
    Steer,
    /// `steer proxy --io kernel`: plain tokio sockets (SO_REUSEPORT).
    Kernel,
}

impl ProxyKind {
    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            ProxyKind::Steer => "steer",
            ProxyKind::Kernel => "tokio",
        }
    }
}

/// One hostile run's settings.
#[derive(Debug, Clone)]
pub struct HostileConfig {
    /// The `steer` binary.
    pub steer_bin: PathBuf,
    /// Which proxy.
    pub proxy: ProxyKind,
    /// `RLIMIT_NOFILE` the proxy starts with (soft and hard).
    pub nofile: u64,
    /// New flows sprayed per second.
    pub spray_rate: u32,
    /// Distinct spray source addresses (0: a random address per datagram).
    pub spray_sources: u32,
    /// Seconds of each phase (baseline, then spray).
    pub secs: f64,
    /// Requests the client sends in each phase, evenly spread.
    pub requests: u32,
    /// Extra `steer proxy` flags.
    pub proxy_args: Vec<String>,
    /// `(load, server)`: the proxy runs on CPU `server` alone (steer with
    /// one worker there), the sprayer, client and backend on CPU `load`,
    /// as a server and the internet would be; `None`: all share every CPU.
    pub pin: Option<(usize, usize)>,
    /// Where the proxy's log and report go.
    pub log_dir: PathBuf,
}

/// The client's view of one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClientPhase {
    /// Requests sent.
    pub sent: u32,
    /// Requests answered within the wait.
    pub answered: u32,
    /// Median round trip of the answered, microseconds.
    pub p50_us: f64,
    /// 99th percentile round trip of the answered, microseconds.
    pub p99_us: f64,
    /// Each request's round trip in the order sent, microseconds (-1:
    /// unanswered).
    pub rtt_us: Vec<f64>,
}

impl ClientPhase {
    /// `answered/sent, first at #k`: how soon a new client got in (#0: its
    /// first request was answered; each miss cost it a second).
    pub fn summary(&self) -> String {
        match self.rtt_us.iter().position(|&r| r >= 0.0) {
            Some(k) => format!("{}/{}, first at #{k}", self.answered, self.sent),
            None => format!("0/{}", self.sent),
        }
    }
}

/// The proxy at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the spray began.
    pub t: f64,
    /// Resident memory, MiB.
    pub rss_mib: f64,
    /// Open descriptors.
    pub fds: u64,
}

/// One hostile run's result.
#[derive(Debug, Clone, Serialize)]
pub struct HostileResult {
    /// Which proxy.
    pub proxy: ProxyKind,
    /// Its `RLIMIT_NOFILE`.
    pub nofile: u64,
    /// New flows sprayed per second (asked).
    pub spray_rate: u32,
    /// Datagrams the sprayer sent.
    pub sprayed: u64,
    /// Seconds of spray.
    pub secs: f64,
    /// The client alone.
    pub baseline: ClientPhase,
    /// The client while the same spray goes to a port nobody owns: what
    /// the spray costs the shared machine, not the proxy.
    pub elsewhere: ClientPhase,
    /// The client during the spray.
    pub spray: ClientPhase,
    /// A new client that starts half-way through the spray.
    pub late: ClientPhase,
    /// The proxy over the spray.
    pub samples: Vec<Sample>,
    /// The proxy's CPU time (user and system, all its threads) over the
    /// control phase and over the spray, in CPUs (seconds a second).
    pub cpu_elsewhere: f64,
    /// As `cpu_elsewhere`, over the spray at the proxy.
    pub cpu_spray: f64,
    /// The most descriptors seen.
    pub max_fds: u64,
    /// The most resident memory seen, MiB.
    pub max_rss_mib: f64,
    /// Whether the proxy was still running at the end of the spray.
    pub alive: bool,
    /// Its exit status after `quit` (-1: it had died).
    pub exit_code: i32,
    /// The proxy's own final counters (its `--stats-json`), when it wrote them.
    pub report: Option<serde_json::Value>,
    /// The last lines of its log.
    pub log_tail: String,
}

impl HostileResult {
    /// A counter of the steer proxy's flow budget (`flows.NAME`), 0 when absent.
    pub fn flows(&self, name: &str) -> u64 {
        self.report
            .as_ref()
            .and_then(|r| r["flows"][name].as_u64())
            .unwrap_or(0)
    }

    /// Refused plus evicted flows.
    pub fn shed(&self) -> u64 {
        [
            "gate_dropped",
            "refused",
            "rate_limited",
            "accept_drops",
            "evicted_unassured",
            "evicted_idle",
        ]
        .iter()
        .map(|n| self.flows(n))
        .sum()
    }
}

/// A UDP echo on loopback until `stop`; its address.
fn echo_backend(stop: Arc<AtomicBool>) -> Result<SocketAddr> {
    let s = UdpSocket::bind("127.0.0.1:0").context("binding the echo backend")?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let addr = s.local_addr()?;
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], from);
            }
        }
    });
    Ok(addr)
}

/// `q` of sorted `v`.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i.min(v.len() - 1)]
}

/// The well-behaved client: `n` numbered requests from one socket, evenly
/// over `secs`, each waited for up to [`ANSWER_WAIT`].
fn client(bed: &TestBed, n: u32, secs: f64) -> Result<ClientPhase> {
    start_client(bed, n, secs, Duration::ZERO)
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
}

/// [`client`] on a thread of its own, from a new socket opened `after`
/// from now (a client that comes once the spray has filled the budget:
/// an unanswered request is sent again, as the next one, after
/// [`ANSWER_WAIT`]).
fn start_client(
    bed: &TestBed,
    n: u32,
    secs: f64,
    after: Duration,
) -> std::thread::JoinHandle<Result<ClientPhase>> {
    let enter = TestBed::enter_fn(&bed.ns);
    let (local, remote) = (bed.peer_v4, bed.host_v4);
    std::thread::spawn(move || -> Result<ClientPhase> {
        std::thread::sleep(after);
        enter()?;
        let s = UdpSocket::bind((local, 0))?;
        s.connect((remote, PORT))?;
        let gap = Duration::from_secs_f64(secs / f64::from(n.max(1)));
        let start = Instant::now();
        let mut rtts = Vec::new();
        let mut series = Vec::new();
        let mut buf = [0u8; 512];
        for i in 0..n {
            let due = start + gap * i;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let msg = format!("request {i:08} from the well-behaved client");
            let sent = Instant::now();
            s.send(msg.as_bytes())?;
            series.push(-1.0);
            loop {
                let left = ANSWER_WAIT.saturating_sub(sent.elapsed());
                if left.is_zero() {
                    break;
                }
                s.set_read_timeout(Some(left))?;
                match s.recv(&mut buf) {
                    // A late answer to an earlier request is skipped.
                    Ok(len) if buf[..len] == *msg.as_bytes() => {
                        let rtt = sent.elapsed().as_secs_f64() * 1e6;
                        rtts.push(rtt);
                        series[i as usize] = rtt;
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
        rtts.sort_by(f64::total_cmp);
        Ok(ClientPhase {
            sent: n,
            answered: rtts.len() as u32,
            p50_us: quantile(&rtts, 0.5),
            p99_us: quantile(&rtts, 0.99),
            rtt_us: series,
        })
    })
}

/// The sprayer: `rate` new flows a second for `secs`, one datagram each,
/// from random 198.19.x.y sources (or `sources` of them) and random ports.
/// Returns the datagrams sent.
fn spray(
    bed: &TestBed,
    port: u16,
    rate: u32,
    sources: u32,
    secs: f64,
) -> std::thread::JoinHandle<Result<u64>> {
    let enter = TestBed::enter_fn(&bed.ns);
    let (peer_if, dst, host_mac, peer_mac) =
        (bed.peer_if.clone(), bed.host_v4, bed.host_mac, bed.peer_mac);
    std::thread::spawn(move || -> Result<u64> {
        enter()?;
        // In this namespace (sysfs would show the root namespace's).
        let ifindex = steer_xdp::ifindex(&peer_if)
            .with_context(|| format!("the sprayer's interface {peer_if}"))?;
        let tx = PacketSender::open(ifindex).context("AF_PACKET socket for the sprayer")?;
        // xorshift: cheap, and the same spray every run.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let total = (f64::from(rate) * secs) as u64;
        let start = mono_ns();
        let per_ns = 1e9 / f64::from(rate.max(1));
        let mut sent = 0u64;
        for i in 0..total {
            // Batches of 1 ms: the sender sleeps between them.
            if i % u64::from((rate / 1000).max(1)) == 0 {
                sleep_until(start + (i as f64 * per_ns) as u64);
            }
            let r = next();
            let host = if sources == 0 {
                (r >> 16) as u16
            } else {
                ((r >> 16) % u64::from(sources)) as u16
            };
            let src = Ipv4Addr::new(198, 19, (host >> 8) as u8, host as u8);
            let sport = 1024 + (r as u16 % 60000);
            let mut frame = FrameBuilder::udp(src.into(), dst.into(), sport, port)
                .payload(b"spray: a new flow of one datagram")
                .build();
            frame[..6].copy_from_slice(&host_mac);
            frame[6..12].copy_from_slice(&peer_mac);
            if tx.send(&frame).is_ok() {
                sent += 1;
            }
        }
        Ok(sent)
    })
}

/// The CPU seconds `pid` has used (all threads, user and system).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(crate::procs::stat_ticks(&stat)? as f64 / crate::sys::ticks_per_sec())
}

/// The CPUs `pid` used (seconds a second) while `phase` ran.
fn cpu_over<T>(pid: u32, phase: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    let out = phase()?;
    let used = match (cpu0, cpu_seconds(pid)) {
        (Some(a), Some(b)) => (b - a) / t0.elapsed().as_secs_f64().max(1e-9),
        _ => f64::NAN,
    };
    Ok((out, used))
}

/// Resident MiB and open descriptors of `pid`.
fn sample(pid: u32) -> Option<(f64, u64)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some((rss_kib / 1024.0, fds))
}

/// The calling thread pinned to one CPU until dropped (then to every
/// online CPU again).
struct PinnedHere;

impl PinnedHere {
    fn to(cpu: usize) -> Result<Self> {
        crate::sys::pin(cpu).with_context(|| format!("pinning the load to CPU {cpu}"))?;
        Ok(Self)
    }
}

impl Drop for PinnedHere {
    fn drop(&mut self) {
        let all: Vec<usize> = (0..crate::sys::online_cpus().max(1)).collect();
        let _ = crate::sys::pin_task(0, &all);
    }
}

/// Starts the proxy on `bed` under its descriptor limit.
fn start_proxy(
    cfg: &HostileConfig,
    bed: &TestBed,
    backend: SocketAddr,
    json: &Path,
) -> Result<Proc> {
    let mut argv = vec![
        "prlimit".to_string(),
        format!("--nofile={}:{}", cfg.nofile, cfg.nofile),
        "--".into(),
        cfg.steer_bin.to_string_lossy().into_owned(),
        "proxy".into(),
        "--interface".into(),
        bed.host_if.clone(),
        "--port".into(),
        PORT.to_string(),
        "--backend".into(),
        backend.to_string(),
        "--stats-json".into(),
        json.to_string_lossy().into_owned(),
    ];
    if cfg.proxy == ProxyKind::Kernel {
        argv.extend(["--io".into(), "kernel".into()]);
    } else if let Some((_, server)) = cfg.pin {
        argv.extend(["--cpus".into(), server.to_string()]);
    }
    argv.extend(cfg.proxy_args.iter().cloned());
    let log = cfg.log_dir.join(format!(
        "hostile-{}-{}.log",
        cfg.proxy.name(),
        cfg.spray_rate
    ));
    let mut p = Proc::spawn(
        &format!("{} proxy", cfg.proxy.name()),
        &argv,
        &log,
        &Spawn {
            pin: cfg.pin.map(|(_, server)| vec![server]),
            stdin: true,
            env: vec![("RUST_LOG".into(), "warn".into())],
            ..Spawn::default()
        },
    )?;
    p.wait_ready(Duration::from_secs(30))?;
    Ok(p)
}

/// One run: build the bed, start the proxy, the baseline, the spray.
pub fn run(cfg: &HostileConfig) -> Result<HostileResult> {
    if cfg.spray_rate == 0 || cfg.requests == 0 || !(0.5..=600.0).contains(&cfg.secs) {
        bail!("hostile: the spray rate and requests must be above 0, and secs 0.5..600");
    }
    fs::create_dir_all(&cfg.log_dir)?;
    // The threads started from here (backend, sprayer, client, sampler)
    // inherit the calling thread's CPUs; it gets them all back at the end.
    let _load_cpu = match cfg.pin {
        Some((load, _)) => Some(PinnedHere::to(load)?),
        None => None,
    };
    let bed = TestBed::create(2)?;
    // Replies to the spray's sources go back into the namespace (which
    // drops them), never anywhere else.
    ip(&[
        "route",
        "replace",
        "198.19.0.0/16",
        "via",
        &bed.peer_v4.to_string(),
        "dev",
        &bed.host_if,
    ])?;
    let stop_backend = Arc::new(AtomicBool::new(false));
    let backend = echo_backend(Arc::clone(&stop_backend))?;
    let json = cfg.log_dir.join(format!(
        "hostile-{}-{}.json",
        cfg.proxy.name(),
        cfg.spray_rate
    ));
    let _ = fs::remove_file(&json);
    let result = (|| -> Result<HostileResult> {
        let mut proxy = start_proxy(cfg, &bed, backend, &json)?;
        let pid = proxy.pid();
        let baseline = client(&bed, cfg.requests, cfg.secs.min(5.0))?;
        // The control: the same spray at a port nobody owns (the kernel
        // drops it, or answers a rate-limited few with ICMP).
        let (elsewhere, cpu_elsewhere) = cpu_over(pid, || {
            let secs = cfg.secs.min(5.0);
            let sprayer = spray(&bed, UNOWNED_PORT, cfg.spray_rate, cfg.spray_sources, secs);
            let phase = client(&bed, cfg.requests, secs)?;
            sprayer
                .join()
                .map_err(|_| anyhow::anyhow!("the control sprayer panicked"))??;
            Ok(phase)
        })?;
        // The spray, the client and the sampler together.
        let spray_began = (cpu_seconds(pid), Instant::now());
        let sprayer = spray(&bed, PORT, cfg.spray_rate, cfg.spray_sources, cfg.secs);
        let sampling = Arc::new(AtomicBool::new(true));
        let samples = {
            let sampling = Arc::clone(&sampling);
            std::thread::spawn(move || {
                // Listing 20,000 descriptors takes milliseconds of CPU: at
                // normal priority that delayed the client on its CPU (a
                // 4 ms slice every 200 ms), at SCHED_IDLE it waits for
                // idle time.
                if let Err(e) = crate::sys::sched_idle() {
                    eprintln!("sampler at normal priority ({e}): it may delay the client");
                }
                let start = Instant::now();
                let mut out = Vec::new();
                while sampling.load(Ordering::Relaxed) {
                    if let Some((rss_mib, fds)) = sample(pid) {
                        out.push(Sample {
                            t: start.elapsed().as_secs_f64(),
                            rss_mib,
                            fds,
                        });
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                out
            })
        };
        // A new client half-way through the spray, when the budget is
        // full: a tenth of the requests over a quarter of the time.
        let late = start_client(
            &bed,
            (cfg.requests / 10).max(5),
            cfg.secs / 4.0,
            Duration::from_secs_f64(cfg.secs / 2.0),
        );
        let under_spray = client(&bed, cfg.requests, cfg.secs)?;
        let late = late
            .join()
            .map_err(|_| anyhow::anyhow!("the late client thread panicked"))??;
        let sprayed = sprayer
            .join()
            .map_err(|_| anyhow::anyhow!("the sprayer panicked"))??;
        let cpu_spray = match (spray_began.0, cpu_seconds(pid)) {
            (Some(a), Some(b)) => (b - a) / spray_began.1.elapsed().as_secs_f64().max(1e-9),
            _ => f64::NAN,
        };
        sampling.store(false, Ordering::Relaxed);
        let samples = samples.join().unwrap_or_default();
        let alive = proxy.alive();
        let exit_code = if alive {
            proxy.send_line("quit");
            proxy.wait_exit(Duration::from_secs(20))?.0
        } else {
            -1
        };
        let report = fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        Ok(HostileResult {
            proxy: cfg.proxy,
            nofile: cfg.nofile,
            spray_rate: cfg.spray_rate,
            sprayed,
            secs: cfg.secs,
            baseline,
            elsewhere,
            spray: under_spray,
            late,
            max_fds: samples.iter().map(|s| s.fds).max().unwrap_or(0),
            max_rss_mib: samples.iter().map(|s| s.rss_mib).fold(0.0, f64::max),
            samples,
            cpu_elsewhere,
            cpu_spray,
            alive,
            exit_code,
            report,
            log_tail: tail(&proxy.log, 6),
        })
    })();
    stop_backend.store(true, Ordering::Relaxed);
    result
}

/// The table of results, one row per run.
pub fn table(results: &[HostileResult]) -> String {
    let mut out = md_head(&[
        "proxy",
        "ulimit -n",
        "spray/s",
        "answered alone",
        "answered in spray",
        "p99 alone",
        "p99 in spray elsewhere",
        "p99 in spray",
        "new client mid-spray",
        "proxy CPU elsewhere / in spray",
        "max fds",
        "max RSS",
        "open at end",
        "refused",
        "dropped at the XDP gate",
        "evicted",
        "alive",
    ]);
    for r in results {
        let steer = r.proxy == ProxyKind::Steer;
        let dash = |v: u64| if steer { v.to_string() } else { "-".into() };
        out += &md_row(&[
            r.proxy.name().to_owned(),
            r.nofile.to_string(),
            r.spray_rate.to_string(),
            format!("{}/{}", r.baseline.answered, r.baseline.sent),
            format!("{}/{}", r.spray.answered, r.spray.sent),
            format!("{} us", f0(Some(r.baseline.p99_us))),
            format!("{} us", f0(Some(r.elsewhere.p99_us))),
            format!("{} us", f0(Some(r.spray.p99_us))),
            r.late.summary(),
            format!("{:.2} / {:.2}", r.cpu_elsewhere, r.cpu_spray),
            r.max_fds.to_string(),
            format!("{} MiB", f0(Some(r.max_rss_mib))),
            dash(r.flows("open")),
            dash(
                r.flows("refused")
                    + r.flows("rate_limited")
                    + r.flows("overload")
                    + r.flows("accept_drops"),
            ),
            dash(r.flows("gate_dropped")),
            dash(r.flows("evicted_unassured") + r.flows("evicted_idle")),
            if r.alive { "yes" } else { "no" }.to_owned(),
        ]);
    }
    out
}

/// The client's p99 in the spray over its p99 alone and over its p99 in
/// the spray aimed elsewhere, per proxy, rate and limit: the median and
/// range over the runs. The second ratio is the proxy's own share of the
/// harm: the first also holds what the spray costs the shared machine.
pub fn ratios(results: &[HostileResult]) -> String {
    let mut keys: Vec<(ProxyKind, u32, u64)> = Vec::new();
    for r in results {
        let key = (r.proxy, r.spray_rate, r.nofile);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut out = String::new();
    for (proxy, rate, nofile) in keys {
        let runs: Vec<&HostileResult> = results
            .iter()
            .filter(|r| (r.proxy, r.spray_rate, r.nofile) == (proxy, rate, nofile))
            .collect();
        let spread = |f: &dyn Fn(&HostileResult) -> f64| {
            let mut v: Vec<f64> = runs
                .iter()
                .map(|r| f(r))
                .filter(|x| x.is_finite())
                .collect();
            v.sort_by(f64::total_cmp);
            match (v.first(), v.last()) {
                (Some(lo), Some(hi)) => {
                    format!("{:.2} ({:.2}-{:.2})", quantile(&v, 0.5), lo, hi)
                }
                _ => "-".into(),
            }
        };
        out += &format!(
            "{} at {rate} new flows/s, ulimit -n {nofile}, {} run(s): p99 in spray / alone {}, \
             / in spray elsewhere {}; proxy CPUs in spray {}\n",
            proxy.name(),
            runs.len(),
            spread(&|r| r.spray.p99_us / r.baseline.p99_us),
            spread(&|r| r.spray.p99_us / r.elsewhere.p99_us),
            spread(&|r| r.cpu_spray),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_sorted_round_trips() {
        assert_eq!(quantile(&[], 0.99), 0.0);
        assert_eq!(quantile(&[7.0], 0.5), 7.0);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 51.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
    }

    fn result(proxy: ProxyKind, report: Option<serde_json::Value>) -> HostileResult {
        let phase = |answered| ClientPhase {
            sent: 50,
            answered,
            p50_us: 40.0,
            p99_us: 123.4,
            rtt_us: Vec::new(),
        };
        HostileResult {
            proxy,
            nofile: 1024,
            spray_rate: 5000,
            sprayed: 10_000,
            secs: 2.0,
            baseline: phase(50),
            elsewhere: phase(50),
            spray: phase(48),
            late: ClientPhase {
                sent: 5,
                answered: 4,
                p50_us: 40.0,
                p99_us: 80.0,
                rtt_us: vec![-1.0, 40.0, 41.0, 80.0, 39.0],
            },
            samples: Vec::new(),
            cpu_elsewhere: 0.02,
            cpu_spray: 0.5,
            max_fds: 200,
            max_rss_mib: 12.6,
            alive: true,
            exit_code: 0,
            report,
            log_tail: String::new(),
        }
    }

    #[test]
    fn the_budget_counters_and_the_table() {
        let flows = serde_json::json!({"flows": {"open": 3, "refused": 4, "rate_limited": 1,
            "overload": 2, "accept_drops": 5, "evicted_unassured": 6, "evicted_idle": 7,
            "gate_dropped": 8}});
        let steer = result(ProxyKind::Steer, Some(flows));
        assert_eq!(steer.flows("open"), 3);
        assert_eq!(steer.flows("missing"), 0);
        assert_eq!(steer.shed(), 8 + 4 + 1 + 5 + 6 + 7);
        let kernel = result(ProxyKind::Kernel, None);
        assert_eq!(kernel.shed(), 0);
        let t = table(&[steer, kernel]);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 4, "{t}");
        assert!(rows[0].starts_with("| proxy | ulimit -n |"), "{t}");
        assert_eq!(
            rows[2],
            "| steer | 1024 | 5000 | 50/50 | 48/50 | 123 us | 123 us | 123 us | 4/5, first at #1 | 0.02 / 0.50 | 200 | 13 MiB | 3 | 12 | 8 | 13 | yes |"
        );
        assert!(
            rows[3].ends_with("| 0.02 / 0.50 | 200 | 13 MiB | - | - | - | - | yes |"),
            "{t}"
        );
        let mut runs = vec![result(ProxyKind::Steer, None); 3];
        for (r, (alone, elsewhere, spray)) in runs.iter_mut().zip([
            (100.0, 200.0, 300.0),
            (100.0, 100.0, 400.0),
            (200.0, 400.0, 400.0),
        ]) {
            r.baseline.p99_us = alone;
            r.elsewhere.p99_us = elsewhere;
            r.spray.p99_us = spray;
        }
        assert_eq!(
            ratios(&runs),
            "steer at 5000 new flows/s, ulimit -n 1024, 3 run(s): p99 in spray / alone \
             3.00 (2.00-4.00), / in spray elsewhere 1.50 (1.00-4.00); proxy CPUs in spray 0.50 (0.50-0.50)\n"
        );
        let never = ClientPhase {
            answered: 0,
            rtt_us: vec![-1.0; 5],
            ..result(ProxyKind::Steer, None).late
        };
        assert_eq!(never.summary(), "0/5");
    }
}
