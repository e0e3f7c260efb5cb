//! `steer-bench transparent`: `steer rfs` beside an unmodified iperf3
//! server whose reading thread a mover shifts between CPU 0 and CPU 1 every
//! `move_every`, against the kernel path alone. Per run: the steering
//! updates the in-kernel recorder wrote (and their rate), those the LLC
//! rule suppressed, the segments queued out of order at the server
//! (`TcpExt:TCPOFOQueue` of /proc/net/netstat, the server's namespace:
//! behind a reordering or behind a loss), the client's retransmissions
//! (losses) and the throughput iperf3 reports.
//!
//! Also where the kernel processed the packets: the growth of every CPU's
//! `processed` and `received_rps` counters (/proc/net/softnet_stat) in
//! slices between two moves, split into the CPU the mover had put the
//! server on and the others ([`softnet::ReaderSplit`]).
//!
//! The server end of the test bed is in the root namespace; iperf3's client
//! sends from the bed's namespace over the veth pair. Modes ([`Mode`](crate::transparent::Mode)):
//! `none` (no steer: the kernel's own path), `pass` (the RFS program
//! attached but steering another port: the kernel path through native XDP,
//! the fair baseline on veth), `kernel-rfs` (no steer: the kernel's RFS on
//! the server end, set by [`RpsGuard`](crate::netns::RpsGuard) and written back when the run ends,
//! also on error), `llc` and `always`, these two on the live topology and
//! on a synthetic 2-LLC model (`pack:1 l3:2 core:1 pu:1`).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::netns::{cpu_mask, RpsGuard, TestBed};
use crate::num::{f1, f2};
use crate::procs::{tail, Proc, Spawn};
use crate::softnet::{self, ReaderSplit};
use crate::table::{md_head, md_row};

const PORT: u16 = 5299;

/// A 2-LLC model of a 2-CPU machine: every move crosses an LLC.
pub const TWO_LLCS: &str = "pack:1 l3:2 core:1 pu:1";

/// How a run treats the server's flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No steer, no RPS: the kernel's own path.
    None,
    /// `steer rfs` attached, steering a port nobody uses.
    Pass,
    /// No steer: the kernel's RFS on the server end (all CPUs in
    /// `rps_cpus`).
    KernelRfs,
    /// `steer rfs --policy llc`.
    Llc,
    /// `steer rfs --policy always`.
    Always,
}

impl Mode {
    /// The name the command line and the report use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Pass => "pass",
            Mode::KernelRfs => "kernel-rfs",
            Mode::Llc => "llc",
            Mode::Always => "always",
        }
    }
}

/// One mode on one topology (`None`: the live one).
pub type RunSpec = (Mode, Option<&'static str>);

/// Every run, in order: the default of `--modes`.
pub const ALL_MODES: &str = "none,pass,kernel-rfs,llc,always,llc-2llc,always-2llc";

/// Parses a comma-separated list of `none`, `pass`, `kernel-rfs`, `llc`,
/// `always`, `llc-2llc`, `always-2llc` (the last two on the 2-LLC model).
pub fn parse_modes(s: &str) -> Result<Vec<RunSpec>, String> {
    let mut out = Vec::new();
    for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        out.push(match t {
            "none" => (Mode::None, None),
            "pass" => (Mode::Pass, None),
            "kernel-rfs" => (Mode::KernelRfs, None),
            "llc" => (Mode::Llc, None),
            "always" => (Mode::Always, None),
            "llc-2llc" => (Mode::Llc, Some(TWO_LLCS)),
            "always-2llc" => (Mode::Always, Some(TWO_LLCS)),
            _ => return Err(format!("unknown mode {t:?} (one of {ALL_MODES})")),
        });
    }
    if out.is_empty() {
        return Err("no mode given".into());
    }
    Ok(out)
}

/// What to run.
#[derive(Debug, Clone)]
pub struct TransparentConfig {
    /// The runs of each round, in order.
    pub modes: Vec<RunSpec>,
    /// The `steer` binary.
    pub steer_bin: PathBuf,
    /// Seconds of iperf3.
    pub secs: u32,
    /// Parallel iperf3 streams.
    pub streams: u32,
    /// Each stream's rate (iperf3 `-b`, e.g. `100M`; `None`: as fast as it
    /// goes, where veth's XDP ring overflows and losses dominate).
    pub bitrate: Option<String>,
    /// How often the mover shifts the server between CPU 0 and CPU 1.
    pub move_every: Duration,
    /// Where logs and reports go.
    pub log_dir: PathBuf,
}

/// One mode's run.
#[derive(Debug, Clone, Serialize)]
pub struct TransparentResult {
    /// The [`Mode`]'s name.
    pub mode: String,
    /// `live` or the synthetic topology.
    pub topology: String,
    /// Times the mover shifted the server.
    pub moves: u64,
    /// Reads the recorder saw.
    pub reads: u64,
    /// Flows it placed.
    pub new_flows: u64,
    /// Desired CPUs it wrote (placements and moves): the costly updates.
    pub updates: u64,
    /// Per second of the run.
    pub updates_per_s: f64,
    /// CPU changes the LLC rule left unwritten.
    pub suppressed: u64,
    /// Segments the server queued out of order.
    pub ofo_queue: u64,
    /// Segments the client retransmitted (its namespace's RetransSegs):
    /// losses on the way, which also leave holes the server queues out of
    /// order behind.
    pub retrans: u64,
    /// iperf3's received throughput, Gbit/s.
    pub gbps: f64,
    /// Packets processed (softnet `processed`) and RPS IPIs taken, on the
    /// CPU the mover had put the server on and elsewhere, over the slices
    /// between moves: every interface's packets on this machine, the bed's
    /// data and ACKs among them.
    pub softnet: ReaderSplit,
    /// Packets the server's end of the bed received over the run (the
    /// data), to set beside the softnet sums.
    pub server_rx_packets: u64,
    /// Packets the client's end received (the server's ACKs, processed on
    /// the CPU that sent them: no RPS there).
    pub client_rx_packets: u64,
}

impl TransparentResult {
    /// Packets the softnet counters saw beyond the bed's own (other
    /// traffic on this machine; slightly negative when the bed's packets
    /// during the moves themselves, which no slice counts, outweigh it).
    pub fn others_packets(&self) -> i64 {
        let seen = self.softnet.processed_on_reader + self.softnet.processed_elsewhere;
        let bed = self.server_rx_packets + self.client_rx_packets;
        i64::try_from(seen).unwrap_or(i64::MAX) - i64::try_from(bed).unwrap_or(i64::MAX)
    }

    /// A lower bound on the share of the server's data packets processed
    /// on the reader's CPU: everything on that CPU less every ACK (which
    /// may all have been there), over the data packets. `None` without
    /// data, or when other traffic (more than 5% of the bed's packets)
    /// makes the counters someone else's.
    pub fn data_on_reader_at_least(&self) -> Option<f64> {
        let bed = self.server_rx_packets + self.client_rx_packets;
        if self.others_packets() > i64::try_from(bed / 20).unwrap_or(i64::MAX) {
            return None;
        }
        let on = self
            .softnet
            .processed_on_reader
            .saturating_sub(self.client_rx_packets);
        (self.server_rx_packets > 0).then(|| (on as f64 / self.server_rx_packets as f64).min(1.0))
    }
}

/// The text of `path` as this namespace sees it, or as `ns` does (procfs
/// and sysfs show the reader's namespace); empty when unreadable.
fn read_in(path: &str, ns: Option<&str>) -> String {
    match ns {
        None => fs::read_to_string(path).unwrap_or_default(),
        Some(ns) => Command::new("ip")
            .args(["netns", "exec", ns, "cat", path])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default(),
    }
}

/// The text of /proc/net/`file`: this namespace's, or `ns`'s.
fn proc_net(file: &str, ns: Option<&str>) -> String {
    read_in(&format!("/proc/net/{file}"), ns)
}

/// `TcpExt` counters of this namespace (the server's).
fn tcp_ext() -> HashMap<String, u64> {
    steer_testbed::netns::parse_counters(&proc_net("netstat", None), "TcpExt:")
}

/// `Tcp: RetransSegs` of namespace `ns` (the client's).
fn retrans_segs(ns: &str) -> u64 {
    steer_testbed::netns::parse_counters(&proc_net("snmp", Some(ns)), "Tcp:")
        .get("RetransSegs")
        .copied()
        .unwrap_or(0)
}

fn received_gbps(json: &str) -> f64 {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v["end"]["sum_received"]["bits_per_second"].as_f64())
        .map_or(0.0, |b| b / 1e9)
}

/// `rx_packets` of `dev`: this namespace's, or `ns`'s.
fn rx_packets(dev: &str, ns: Option<&str>) -> u64 {
    let path = format!("/sys/class/net/{dev}/statistics/rx_packets");
    read_in(&path, ns).trim().parse().unwrap_or(0)
}

/// Moves every thread of `pid` (which starts on CPU 1) between CPU 0 and
/// CPU 1 every `every` until `stop`; returns the moves made and the softnet
/// split by the server's CPU. A slice runs from just after one move to just
/// before the next, so the few milliseconds `taskset` takes (where the
/// server's CPU is changing) count in neither share.
fn mover(
    pid: u32,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u64, ReaderSplit)> {
    std::thread::spawn(move || {
        let mut moves = 0;
        let mut split = ReaderSplit::default();
        let mut on = 1;
        let mut from = softnet::sample();
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(every);
            let to = softnet::sample();
            split.add(on, &from, &to);
            let cpu = (moves + 1) % 2;
            let ok = Command::new("taskset")
                .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                break; // the server is gone
            }
            moves += 1;
            on = cpu as usize;
            from = softnet::sample();
        }
        (moves, split)
    })
}

/// One run on `bed` in `mode`, on `topology` (`None`: the live one).
pub fn run_one(
    cfg: &TransparentConfig,
    bed: &TestBed,
    mode: Mode,
    topology: Option<&str>,
) -> Result<TransparentResult> {
    fs::create_dir_all(&cfg.log_dir)?;
    // The kernel's RFS for this run only: written back when it drops (at
    // the end of this function, also on an early error).
    let _rfs = if mode == Mode::KernelRfs {
        let cpus: Vec<usize> = (0..crate::sys::online_cpus().max(1)).collect();
        Some(RpsGuard::configure(&bed.host_if, &cpu_mask(&cpus))?)
    } else {
        None
    };
    let report = cfg.log_dir.join(format!(
        "rfs-{}-{}.json",
        mode.name(),
        topology.map_or("live", |_| "2llc")
    ));
    let _ = fs::remove_file(&report);
    // `pass`: the program attached, steering a port nobody uses (the kernel
    // path through native XDP: veth then hands on MTU-sized frames instead
    // of 64 KiB GSO ones).
    let steering = match mode {
        Mode::None | Mode::KernelRfs => None,
        Mode::Pass => Some((PORT + 1, "llc")),
        Mode::Llc => Some((PORT, "llc")),
        Mode::Always => Some((PORT, "always")),
    };
    let mut steer = if let Some((port, policy)) = steering {
        let mut argv = vec![
            cfg.steer_bin.to_string_lossy().into_owned(),
            "rfs".into(),
            "-i".into(),
            bed.host_if.clone(),
            "-p".into(),
            port.to_string(),
            "--policy".into(),
            policy.into(),
            "--no-table".into(),
            "--stats-json".into(),
            report.to_string_lossy().into_owned(),
        ];
        if let Some(t) = topology {
            argv.extend(["--topology".into(), t.into()]);
        }
        let log = cfg.log_dir.join(format!("rfs-{}.log", mode.name()));
        let mut p = Proc::spawn("steer rfs", &argv, &log, &Spawn::default())?;
        p.wait_ready(Duration::from_secs(30))?;
        Some(p)
    } else {
        None
    };
    let (ext0, retrans0) = (tcp_ext(), retrans_segs(&bed.ns));
    let bed_rx = || {
        (
            rx_packets(&bed.host_if, None),
            rx_packets(&bed.peer_if, Some(&bed.ns)),
        )
    };
    let rx0 = bed_rx();
    let mut server = Command::new("taskset")
        .args(["-c", "1", "iperf3", "-s", "-1", "-p", &PORT.to_string()])
        .args(["-B", &bed.host_v4.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 (install iperf3)")?;
    std::thread::sleep(Duration::from_millis(500));
    let stop = Arc::new(AtomicBool::new(false));
    let moving = mover(server.id(), cfg.move_every, Arc::clone(&stop));
    let client = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "iperf3", "-J", "-c"])
        .arg(bed.host_v4.to_string())
        .args(["-p", &PORT.to_string(), "-t", &cfg.secs.to_string()])
        .args(["-P", &cfg.streams.to_string()])
        .args(
            cfg.bitrate
                .as_ref()
                .map(|b| vec!["-b".to_string(), b.clone()])
                .unwrap_or_default(),
        )
        .output()
        .context("running the iperf3 client")?;
    stop.store(true, Ordering::Relaxed);
    let (moves, split) = moving.join().unwrap_or_default();
    let _ = server.wait();
    let (ext1, retrans1) = (tcp_ext(), retrans_segs(&bed.ns));
    let rx1 = bed_rx();
    if !client.status.success() {
        bail!(
            "iperf3 -c failed: {}",
            String::from_utf8_lossy(&client.stdout)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    let gbps = received_gbps(&String::from_utf8_lossy(&client.stdout));
    let ofo = |m: &HashMap<String, u64>| m.get("TCPOFOQueue").copied().unwrap_or(0);
    let mut result = TransparentResult {
        mode: mode.name().into(),
        topology: topology.unwrap_or("live").into(),
        moves,
        reads: 0,
        new_flows: 0,
        updates: 0,
        updates_per_s: 0.0,
        suppressed: 0,
        ofo_queue: ofo(&ext1).saturating_sub(ofo(&ext0)),
        retrans: retrans1.saturating_sub(retrans0),
        gbps,
        softnet: split,
        server_rx_packets: rx1.0.saturating_sub(rx0.0),
        client_rx_packets: rx1.1.saturating_sub(rx0.1),
    };
    if let Some(p) = steer.as_mut() {
        let code = p.stop(Duration::from_secs(5))?;
        if code != 0 {
            bail!("steer rfs exited with {code}: {}", tail(&p.log, 6));
        }
        let v: serde_json::Value = serde_json::from_str(
            &fs::read_to_string(&report).with_context(|| format!("{}", report.display()))?,
        )?;
        let rec = &v["recorder"];
        let n = |k: &str| rec[k].as_u64().unwrap_or(0);
        result.reads = n("reads");
        result.new_flows = n("new_flows");
        result.updates = n("updates");
        result.updates_per_s = rec["updates_per_s"].as_f64().unwrap_or(0.0);
        result.suppressed = n("suppressed");
    }
    Ok(result)
}

/// Every mode and topology, `runs` times interleaved.
pub fn run(cfg: &TransparentConfig, runs: u32) -> Result<Vec<TransparentResult>> {
    let bed = TestBed::create(2)?;
    let mut out = Vec::new();
    for run in 0..runs.max(1) {
        for &(mode, topology) in &cfg.modes {
            eprintln!(
                "run {}/{runs}: {} on the {} topology",
                run + 1,
                mode.name(),
                topology.unwrap_or("live")
            );
            out.push(run_one(cfg, &bed, mode, topology)?);
        }
    }
    Ok(out)
}

/// The results as a Markdown table.
pub fn table(results: &[TransparentResult]) -> String {
    let mut s = md_head(&[
        "mode",
        "topology",
        "moves",
        "reads",
        "new flows",
        "updates",
        "updates/s",
        "suppressed",
        "OFO queued",
        "retrans",
        "Gbit/s",
        "processed on reader's CPU",
        "processed elsewhere",
        "RPS IPIs",
        "server end rx",
        "client end rx",
        "others' packets",
        "data on reader's CPU, at least",
    ]);
    for r in results {
        s += &md_row(&[
            r.mode.clone(),
            r.topology.clone(),
            r.moves.to_string(),
            r.reads.to_string(),
            r.new_flows.to_string(),
            r.updates.to_string(),
            f1(Some(r.updates_per_s)),
            r.suppressed.to_string(),
            r.ofo_queue.to_string(),
            r.retrans.to_string(),
            f2(Some(r.gbps)),
            format!(
                "{} ({}%)",
                r.softnet.processed_on_reader,
                f1(r.softnet.reader_share().map(|x| x * 100.0))
            ),
            r.softnet.processed_elsewhere.to_string(),
            format!(
                "{} ({} on reader's)",
                r.softnet.rps(),
                r.softnet.rps_on_reader
            ),
            r.server_rx_packets.to_string(),
            r.client_rx_packets.to_string(),
            r.others_packets().to_string(),
            format!("{}%", f1(r.data_on_reader_at_least().map(|x| x * 100.0))),
        ]);
    }
    s
}

/// Writes `results` as JSON to `path`.
pub fn write_json(results: &[TransparentResult], path: &Path) -> Result<()> {
    fs::write(path, serde_json::to_string_pretty(results)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_group_is_its_names_over_its_values() {
        let text = "Ip: Forwarding\nIp: 1\nTcp: ActiveOpens RetransSegs\nTcp: 3 17\n";
        let tcp = steer_testbed::netns::parse_counters(text, "Tcp:");
        assert_eq!(tcp.get("RetransSegs"), Some(&17));
        assert_eq!(tcp.get("ActiveOpens"), Some(&3));
        assert!(steer_testbed::netns::parse_counters(text, "TcpExt:").is_empty());
    }

    #[test]
    fn iperf3_throughput_is_read_from_its_json() {
        let json = r#"{"end": {"sum_received": {"bits_per_second": 2.5e9}}}"#;
        assert_eq!(received_gbps(json), 2.5);
        assert_eq!(received_gbps("not json"), 0.0);
    }

    #[test]
    fn the_table_has_a_row_per_result() {
        let r = TransparentResult {
            mode: "llc".into(),
            topology: "live".into(),
            moves: 10,
            reads: 100,
            new_flows: 9,
            updates: 9,
            updates_per_s: 0.9,
            suppressed: 80,
            ofo_queue: 0,
            retrans: 1,
            gbps: 3.0,
            softnet: ReaderSplit {
                slices: 10,
                processed_on_reader: 900,
                processed_elsewhere: 100,
                rps_on_reader: 0,
                rps_elsewhere: 0,
            },
            server_rx_packets: 600,
            client_rx_packets: 380,
        };
        assert_eq!(r.others_packets(), 20);
        let mut quiet = r.clone();
        quiet.client_rx_packets = 1000;
        assert_eq!(quiet.data_on_reader_at_least(), Some(0.0));
        assert_eq!(quiet.others_packets(), -600);
        quiet.server_rx_packets = 0;
        assert_eq!(quiet.data_on_reader_at_least(), None);
        let mut noisy = r.clone();
        noisy.softnet.processed_elsewhere += 1000;
        assert_eq!(noisy.data_on_reader_at_least(), None);
        let t = table(&[r.clone(), r]);
        assert_eq!(t.lines().count(), 4);
        assert!(t.contains(
            "| llc | live | 10 | 100 | 9 | 9 | 0.9 | 80 | 0 | 1 | 3.00 | 900 (90.0%) | 100 | 0 (0 on reader's) | 600 | 380 | 20 | 86.7% |"
        ));
    }

    #[test]
    fn modes_parse_from_a_list() {
        assert_eq!(
            parse_modes("none, kernel-rfs,llc,always-2llc").unwrap(),
            vec![
                (Mode::None, None),
                (Mode::KernelRfs, None),
                (Mode::Llc, None),
                (Mode::Always, Some(TWO_LLCS)),
            ]
        );
        assert_eq!(parse_modes(ALL_MODES).unwrap().len(), 7);
        assert!(parse_modes("none,rfs").is_err());
        assert!(parse_modes(" , ").is_err());
        for m in [
            Mode::None,
            Mode::Pass,
            Mode::KernelRfs,
            Mode::Llc,
            Mode::Always,
        ] {
            assert_eq!(parse_modes(m.name()).unwrap(), vec![(m, None)]);
        }
    }
}
