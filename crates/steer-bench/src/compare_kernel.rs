//! `steer-bench compare-kernel`: the sockperf comparison, the second
//! opinion next to `steer-bench run`. The kernel's UDP path (RPS/RFS)
//! against steer's AF_XDP echo server, in one run, on the same veth pair
//! and the same CPUs.
//!
//! For each mode (sockperf under-load, ping-pong): start the server on the
//! root-namespace end of a fresh veth pair, drive it from the namespace
//! with `--clients` concurrent sockperf clients (each its own source port,
//! so its own flow), keep each client's report, stop the server. First
//! `sockperf server` (the kernel path; every rx queue of the veth gets
//! `rps_cpus` = the CPU set, `rps_flow_cnt` = 16384, and
//! `net.core.rps_sock_flow_entries` = 32768, restored afterwards), then
//! `steer echo --sockperf`. Servers and clients are pinned to the same CPU
//! set; both servers get the same scheduling slice (`--slice-us`). The
//! reports are parsed, aggregated and compared by [`crate::sockperf`]
//! (table, JSON, goal).
//!
//! Invariants: one measurement at a time (the lock `steer-bench run`
//! takes: the CPUs and the global RPS sysctl are shared); the namespace,
//! veth pair, RPS settings and every process are removed or restored on
//! every exit path (their owners' `Drop`); sockperf exits 0 even when it
//! fails, so success is judged from its output only.

use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::{
    netns::{self, RpsGuard, TestBed},
    procs::{tail, Proc, Spawn},
    seeds::harness::{self, Harness},
    sockperf::{self, Comparison, Mode},
};

/// The lock `steer-bench run` takes too.
pub const LOCK_PATH: &str = "/run/lock/steer-compare-kernel.lock";

/// `steer-bench compare-kernel`.
#[derive(Debug, Clone, Args)]
pub struct CompareKernel {
    /// sockperf -t per client and mode, seconds.
    #[arg(short = 't', long = "time", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub secs: u64,
    /// Concurrent sockperf clients.
    #[arg(short = 'c', long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub clients: u16,
    /// CI smoke: 2 s per run.
    #[arg(long)]
    pub quick: bool,
    /// CPU list for servers and clients (default: every online CPU).
    #[arg(long)]
    pub cpus: Option<String>,
    /// under-load, ping-pong or both.
    #[arg(long, default_value = "both", value_parser = ["under-load", "ul", "ping-pong", "pp", "both"])]
    pub mode: String,
    /// Measure the kernel only.
    #[arg(long, conflicts_with = "steer_only")]
    pub kernel_only: bool,
    /// Measure steer only.
    #[arg(long)]
    pub steer_only: bool,
    /// The servers' UDP port.
    #[arg(long, default_value_t = 11111)]
    pub port: u16,
    /// Source port of the first client.
    #[arg(long, default_value_t = 20000)]
    pub client_port: u16,
    /// Message size.
    #[arg(short = 'm', long = "msg-size", default_value_t = 14, value_parser = clap::value_parser!(u16).range(14..))]
    pub msg_size: u16,
    /// under-load send rate per client (`max` or messages per second).
    #[arg(long, default_value = "max", value_parser = crate::args::parse_mps)]
    pub mps: String,
    /// Also write the numbers as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Keep every server and client log in this directory.
    #[arg(long, value_name = "DIR")]
    pub keep_logs: Option<PathBuf>,
    /// Exit 3 unless steer reaches the goal in every mode.
    #[arg(long)]
    pub require_goal: bool,
    /// Scheduling slice for both servers' threads, us (what steer's
    /// workers ask for; 0: the kernel's default).
    #[arg(long, default_value_t = 100)]
    pub slice_us: u64,
    /// The `steer` command (its `echo` serves; default: the one next to
    /// this binary).
    #[arg(long, env = "STEER")]
    pub steer: Option<PathBuf>,
    /// The whole steer server command instead (words split on spaces;
    /// the `steer echo` arguments are appended).
    #[arg(long, env = "STEER_SERVER_CMD")]
    pub steer_cmd: Option<String>,
    /// Extra arguments for steer echo (after `--`, e.g. `-- --busy-poll`).
    #[arg(last = true)]
    pub extra: Vec<String>,
}

struct Run<'a> {
    a: &'a CompareKernel,
    h: &'a Harness,
    bed: &'a TestBed,
    cpus: Vec<usize>,
    cpu_list: String,
    steer_cmd: Vec<String>,
}

/// Client `i`'s command: sockperf in namespace `ns` against `server`.
fn client_argv(a: &CompareKernel, ns: &str, server: Ipv4Addr, mode: Mode, i: u16) -> Vec<String> {
    let mut v: Vec<String> = [
        "ip",
        "netns",
        "exec",
        ns,
        "sockperf",
        mode.name(),
        "-i",
        &server.to_string(),
        "-p",
        &a.port.to_string(),
        "-t",
        &a.secs.to_string(),
        "-m",
        &a.msg_size.to_string(),
    ]
    .map(String::from)
    .to_vec();
    if mode == Mode::UnderLoad {
        v.push(format!("--mps={}", a.mps));
    }
    v.extend(["--client_port".into(), (a.client_port + i).to_string()]);
    v
}

impl Run<'_> {
    /// The clients against whatever server listens; their reports go to
    /// `<tag>-client<i>.log`.
    fn clients(&self, mode: Mode, tag: &str) -> Result<()> {
        let pin = self.on_cpus();
        let mut ps = Vec::new();
        for i in 0..self.a.clients {
            let log = self.h.path(&format!("{tag}-client{i}.log"));
            ps.push(Proc::spawn(
                &format!("sockperf client {i}"),
                &client_argv(self.a, &self.bed.ns, self.bed.host_v4, mode, i),
                &log,
                &pin,
            )?);
        }
        for (i, p) in ps.iter_mut().enumerate() {
            let (rc, _) = p.wait_exit(Duration::from_secs(self.a.secs + 30))?;
            if rc != 0 {
                self.h.log(&format!(
                    "{tag} client {i} (port {}) exited with {rc}: {}",
                    self.a.client_port + i as u16,
                    tail(&p.log, 3)
                ));
            }
        }
        self.h.check()
    }

    /// Starts server `argv` on the server CPUs, its log `TAG-server.log`.
    fn server(&self, what: &str, argv: &[String], tag: &str) -> Result<Proc> {
        let log = self.h.path(&format!("{tag}-server.log"));
        Proc::spawn(what, argv, &log, &self.on_cpus())
    }

    /// Processes pinned to the comparison's CPUs.
    fn on_cpus(&self) -> Spawn {
        Spawn {
            pin: Some(self.cpus.clone()),
            ..Spawn::default()
        }
    }

    fn kernel(&self, mode: Mode) -> Result<()> {
        let (a, h) = (self.a, self.h);
        let tag = format!("kernel-{}", mode.name());
        h.log(&format!(
            "{}: kernel (sockperf server, RPS/RFS) with {} clients, {}s",
            mode.name(),
            a.clients,
            a.secs
        ));
        let argv = [
            "sockperf",
            "server",
            "-i",
            &self.bed.host_v4.to_string(),
            "-p",
            &a.port.to_string(),
        ]
        .map(String::from);
        let mut server = self.server("sockperf server", &argv, &tag)?;
        if !harness::wait_udp_bound(self.bed.host_v4, a.port, Duration::from_secs(10), || {
            server.alive()
        }) {
            bail!(
                "sockperf server did not bind {}:{}: {}",
                self.bed.host_v4,
                a.port,
                tail(&server.log, 5)
            );
        }
        if a.slice_us > 0 {
            crate::sched_slice::set_process_slice(server.pid(), Duration::from_micros(a.slice_us))
                .context("could not set sockperf server's scheduling slice")?;
        }
        self.clients(mode, &tag)?;
        let _ = server.stop(Duration::from_secs(5));
        Ok(())
    }

    fn steer(&self, mode: Mode) -> Result<()> {
        let (a, h) = (self.a, self.h);
        let tag = format!("steer-{}", mode.name());
        h.log(&format!(
            "{}: steer ({}) with {} clients, {}s",
            mode.name(),
            self.steer_cmd.join(" "),
            a.clients,
            a.secs
        ));
        let mut argv = self.steer_cmd.clone();
        argv.extend(
            [
                "--interface",
                &self.bed.host_if,
                "--port",
                &a.port.to_string(),
                "--cpus",
                &self.cpu_list,
                "--sockperf",
                "--stats-json",
                &h.path(&format!("{tag}-stats.json")).to_string_lossy(),
                "--no-table",
                "--worker-slice-us",
                &a.slice_us.to_string(),
            ]
            .map(String::from),
        );
        argv.extend(a.extra.iter().cloned());
        let mut server = self.server("the steer echo server", &argv, &tag)?;
        server.wait_ready(Duration::from_secs(60))?;
        self.clients(mode, &tag)?;
        let rc = server.stop(Duration::from_secs(10))?;
        if rc != 0 {
            h.log(&format!(
                "steer echo server exited with {rc}: {}",
                tail(&server.log, 3)
            ));
        }
        if xdp_attached(&self.bed.host_if) {
            h.log(&format!(
                "warning: an XDP program is still attached to {} after the echo server stopped",
                self.bed.host_if
            ));
        }
        std::fs::write(h.path(&format!("{tag}-exit")), format!("{rc}\n"))?;
        Ok(())
    }
}

fn xdp_attached(interface: &str) -> bool {
    Command::new("ip")
        .args(["-d", "link", "show", "dev", interface])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("prog/xdp"))
}

fn steer_command(a: &CompareKernel) -> Result<Vec<String>> {
    if let Some(cmd) = &a.steer_cmd {
        let words: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
        if words.is_empty() {
            bail!("--steer-cmd is empty");
        }
        return Ok(words);
    }
    let bin = harness::steer_binary(a.steer.as_deref())
        .context("run with --kernel-only to measure the kernel alone")?;
    Ok(vec![bin.to_string_lossy().into_owned(), "echo".into()])
}

/// Runs the comparison: prints the table, writes the JSON; exit status 0,
/// 2 when a side lacks results, 3 when `--require-goal` and it is missed.
pub fn run(a: &CompareKernel) -> Result<ExitCode> {
    let mut a = a.clone();
    if a.quick {
        a.secs = 2;
    }
    let modes = match a.mode.as_str() {
        "under-load" | "ul" => vec![Mode::UnderLoad],
        "ping-pong" | "pp" => vec![Mode::PingPong],
        _ => vec![Mode::UnderLoad, Mode::PingPong],
    };
    harness::require_root("network namespaces, veth, RPS sysctls, XDP")?;
    harness::require_tool("sockperf")?;
    harness::require_tool("ip")?;
    let cpu_list = match &a.cpus {
        Some(c) => c.clone(),
        None => std::fs::read_to_string("/sys/devices/system/cpu/online")
            .context("reading the online CPUs")?
            .trim()
            .to_owned(),
    };
    let cpus = crate::args::parse_cpu_list(&cpu_list)
        .filter(|c| !c.is_empty())
        .with_context(|| format!("--cpus {cpu_list:?} is not a CPU list"))?;
    let mask = netns::cpu_mask(&cpus);
    let (run_kernel, run_steer) = (!a.steer_only, !a.kernel_only);
    let steer_cmd = if run_steer {
        steer_command(&a)?
    } else {
        Vec::new()
    };
    let h = Harness::locked(
        "compare-kernel",
        a.keep_logs.clone(),
        Path::new(LOCK_PATH),
        Duration::from_secs(900),
    )?;
    let bed = TestBed::create(2)?;
    let rps = RpsGuard::configure(&bed.host_if, &mask)?;
    h.log(&format!(
        "netns {}, {} {} <-> {} {}, CPUs {cpu_list} (RPS mask {mask})",
        bed.ns, bed.host_if, bed.host_v4, bed.peer_if, bed.peer_v4
    ));
    if harness::udp_bound(a.port) {
        h.log(&format!(
            "warning: something already listens on UDP port {} (ss -lun)",
            a.port
        ));
    }
    let r = Run {
        a: &a,
        h: &h,
        bed: &bed,
        cpus,
        cpu_list: cpu_list.clone(),
        steer_cmd,
    };
    for &mode in &modes {
        if run_kernel {
            r.kernel(mode)?;
        }
        if run_steer {
            r.steer(mode)?;
        }
    }
    let settings: Vec<(String, String)> = [
        ("seconds", a.secs.to_string()),
        ("clients", a.clients.to_string()),
        ("cpus", cpu_list),
        ("port", a.port.to_string()),
        ("client_port_base", a.client_port.to_string()),
        ("msg_size", a.msg_size.to_string()),
        ("mps", a.mps.clone()),
        ("interface", bed.host_if.clone()),
        ("namespace", bed.ns.clone()),
        ("server_ip", bed.host_v4.to_string()),
        (
            "sockperf",
            crate::procs::first_line("sockperf", "--version"),
        ),
        ("steer_cmd", r.steer_cmd.join(" ")),
        ("rps_cpus", mask),
        ("rps_flow_cnt", netns::RPS_FLOW_CNT.to_string()),
        (
            "rps_sock_flow_entries",
            netns::RPS_SOCK_FLOW_ENTRIES.to_string(),
        ),
        ("server_slice_us", a.slice_us.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let cmp = Comparison {
        work: h.work.clone(),
        modes,
        clients: a.clients.into(),
        config: settings,
    };
    let (table, j, status) = sockperf::compare(&cmp, a.require_goal);
    print!("{table}");
    println!();
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        h.log(&format!("JSON summary in {}", path.display()));
    }
    drop(rps);
    drop(bed);
    Ok(ExitCode::from(status as u8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: CompareKernel,
    }

    fn args(words: &[&str]) -> CompareKernel {
        Cli::try_parse_from(std::iter::once("x").chain(words.iter().copied()))
            .unwrap()
            .a
    }

    #[test]
    fn clients_and_options() {
        let a = args(&[
            "-t",
            "3",
            "--mps",
            "5000",
            "--client-port",
            "30000",
            "-m",
            "64",
            "--",
            "--busy-poll",
        ]);
        let server = Ipv4Addr::new(198, 18, 130, 1);
        let ul = client_argv(&a, "sb1", server, Mode::UnderLoad, 2);
        assert_eq!(
            ul.join(" "),
            "ip netns exec sb1 sockperf under-load -i 198.18.130.1 -p 11111 -t 3 -m 64 --mps=5000 --client_port 30002"
        );
        let pp = client_argv(&a, "sb1", server, Mode::PingPong, 0);
        assert!(!pp.iter().any(|w| w.starts_with("--mps")), "{pp:?}");
        assert_eq!(a.extra, ["--busy-poll"]);
        assert_eq!((a.clients, a.slice_us, a.mode.as_str()), (4, 100, "both"));
        assert!(Cli::try_parse_from(["x", "--kernel-only", "--steer-only"]).is_err());
        assert!(Cli::try_parse_from(["x", "--mode", "sideways"]).is_err());
        assert!(
            Cli::try_parse_from(["x", "-m", "8"]).is_err(),
            "below sockperf's header"
        );
        assert!(Cli::try_parse_from(["x", "--mps", "0"]).is_err());
    }
}
