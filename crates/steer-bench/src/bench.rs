//! One benchmark run: the test bed, the generator thread in the namespace,
//! and every server in turn, `runs` times interleaved (run 1: every server,
//! run 2: every server, ...), each through the same phases: `--rate max`
//! (capacity), then each fixed rate (cost; the first is also the latency
//! rate). The raw AF_XDP turnaround spins by design, so it only gets the
//! capacity phase.

use std::{
    path::PathBuf,
    sync::{
        atomic::AtomicBool,
        mpsc::{channel, Receiver, Sender},
    },
    time::Duration,
};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use tracing::{info, warn};

use crate::{
    cpustat,
    gen::{GenSetup, Generator, PhaseResult, PhaseSpec},
    netns::TestBed,
    pacing::Arrivals,
    payload::Endpoints,
    report::{phase_name, ServerRun},
    servers::{Kind, Running, ServerEnv},
    sys,
};

/// Everything a run is configured with.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Servers, in visiting order.
    pub servers: Vec<Kind>,
    /// Interleaved runs.
    pub runs: usize,
    /// Phases per server: `None` = max, else a fixed rate (pps).
    pub phases: Vec<Option<u64>>,
    /// The proxies' phases (they forward less than an echo answers).
    pub proxy_phases: Vec<Option<u64>>,
    /// Flows (distinct source ports).
    pub flows: u16,
    /// Server UDP port.
    pub port: u16,
    /// First source port.
    pub sport_base: u16,
    /// The generator's CPU.
    pub gen_cpu: usize,
    /// The server CPUs.
    pub server_cpus: Vec<usize>,
    /// Per-flow send weights (see [`GenSetup::weights`]); empty: equal.
    pub weights: Vec<u32>,
    /// Queues per veth end.
    pub queues: u32,
    /// Phase timing.
    pub warmup: Duration,
    /// Measurement window.
    pub window: Duration,
    /// Drain after sending stops.
    pub drain: Duration,
    /// Generator tick at fixed rates.
    pub tick: Duration,
    /// How requests arrive at fixed rates.
    pub arrivals: Arrivals,
    /// Retries of a fixed-rate phase whose rate was not held.
    pub retries: u32,
    /// steer's echo command.
    pub steer_cmd: Vec<String>,
    /// The `steer` binary, for the proxies.
    pub steer_bin: String,
    /// Each end's receive path on its owner's CPUs (threaded NAPI).
    pub rx_on_receiver: bool,
    /// `steer proxy --runtime` of the steer-proxy server.
    pub proxy_runtime: String,
    /// Logs of the servers go here (a temporary directory otherwise).
    pub log_dir: PathBuf,
}

impl BenchConfig {
    /// Checks the settings against each other and a machine of `ncpu`
    /// CPUs: every CPU exists, the generator has its own CPU (unless
    /// `gen_on_server_cpu`), weights 1..=10000, 1..=4096 flows whose source
    /// ports fit above `sport_base`, 1..=64 queues, a window of 0.1..=600 s.
    pub fn check(&self, ncpu: usize, gen_on_server_cpu: bool) -> Result<()> {
        for &cpu in self.server_cpus.iter().chain([&self.gen_cpu]) {
            if cpu >= ncpu {
                bail!("CPU {cpu} does not exist here ({ncpu} CPUs): choose --gen-cpu and --server-cpus below {ncpu}");
            }
        }
        if self.server_cpus.contains(&self.gen_cpu) && !gen_on_server_cpu {
            bail!(
                "the generator's CPU {} is also a server CPU: give them different CPUs (or --gen-on-server-cpu)",
                self.gen_cpu
            );
        }
        if self.weights.iter().any(|&w| !(1..=10_000).contains(&w)) {
            bail!("--weights must be 1..=10000 each");
        }
        let (flows, base) = (u32::from(self.flows), u32::from(self.sport_base));
        if flows == 0 || base + flows > 65535 || flows > 4096 {
            bail!("--flows must be 1..=4096 and fit above --sport-base");
        }
        if self.queues == 0 || self.queues > 64 {
            bail!("--queues must be 1..=64");
        }
        if !(0.1..=600.0).contains(&self.window.as_secs_f64()) {
            bail!("--window-secs must be between 0.1 and 600");
        }
        Ok(())
    }
}

enum Cmd {
    Phase(PhaseSpec),
    Quit,
}

/// The generator thread's handle.
struct GenThread {
    tx: Sender<Cmd>,
    rx: Receiver<Result<PhaseResult>>,
    join: Option<std::thread::JoinHandle<()>>,
}

impl GenThread {
    fn spawn(
        bed: &TestBed,
        setup: GenSetup,
        cpu: usize,
        stop: &'static AtomicBool,
    ) -> Result<Self> {
        let (tx, cmd_rx) = channel::<Cmd>();
        let (res_tx, rx) = channel::<Result<PhaseResult>>();
        let ns = bed.ns.clone();
        let bed_ns = TestBed::enter_fn(&ns);
        let join = std::thread::Builder::new()
            .name("generator".into())
            .spawn(move || {
                let open = (|| -> Result<Generator> {
                    bed_ns()?;
                    sys::pin(cpu).with_context(|| format!("pinning the generator to CPU {cpu}"))?;
                    sys::tight_timer_slack();
                    Generator::open(setup)
                })();
                let mut gen = match open {
                    Ok(g) => {
                        let _ = res_tx.send(Err(anyhow!("ready")));
                        g
                    }
                    Err(e) => {
                        let _ = res_tx.send(Err(e));
                        return;
                    }
                };
                while let Ok(Cmd::Phase(spec)) = cmd_rx.recv() {
                    if res_tx.send(gen.run(&spec, stop)).is_err() {
                        break;
                    }
                }
            })
            .context("spawning the generator thread")?;
        let g = GenThread {
            tx,
            rx,
            join: Some(join),
        };
        match g.rx.recv() {
            Ok(Err(e)) if e.to_string() == "ready" => Ok(g),
            Ok(Err(e)) => Err(e),
            _ => bail!("the generator thread ended while starting"),
        }
    }

    fn phase(&self, spec: PhaseSpec) -> Result<PhaseResult> {
        self.tx
            .send(Cmd::Phase(spec))
            .map_err(|_| anyhow!("the generator thread is gone"))?;
        self.rx
            .recv()
            .map_err(|_| anyhow!("the generator thread is gone"))?
    }
}

impl Drop for GenThread {
    fn drop(&mut self) {
        let _ = self.tx.send(Cmd::Quit);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// What a whole benchmark produced.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Every server run.
    pub runs: Vec<ServerRun>,
    /// The test bed's names and addresses.
    pub bed: String,
    /// Where the generator end's NAPI threads ran (`--rx-on receiver`).
    pub generator_rx: Option<String>,
}

/// The test bed, the generator thread in it and the servers' environment:
/// open for as many server runs as a command makes.
pub struct Bed {
    // The generator goes before the test bed it runs in.
    gen: GenThread,
    bed: TestBed,
    /// Where the servers serve and how they are started.
    pub env: ServerEnv,
    /// The test bed's names and addresses.
    pub desc: String,
    tag: u32,
}

impl Bed {
    /// Builds the test bed and starts the generator in it.
    pub fn open(cfg: &BenchConfig, stop: &'static AtomicBool) -> Result<Bed> {
        let bed = TestBed::create(cfg.queues)?;
        let desc = format!(
            "namespace {}, generator {} {} (CPU {}), server {} {}:{} (CPUs {:?}), {} queue(s) per end, receive path on the {}, arrivals {}",
            bed.ns, bed.peer_if, bed.peer_v4, cfg.gen_cpu, bed.host_if, bed.host_v4, cfg.port,
            cfg.server_cpus, bed.queues,
            if cfg.rx_on_receiver { "receiver's CPUs (threaded NAPI; kernel servers: RPS)" } else { "sender's CPU (veth default)" },
            cfg.arrivals.label(),
        );
        println!("test bed: {desc}");
        let setup = GenSetup {
            interface: bed.peer_if.clone(),
            endpoints: Endpoints {
                dst_mac: bed.host_mac,
                src_mac: bed.peer_mac,
                src: bed.peer_v4,
                dst: bed.host_v4,
                dst_port: cfg.port,
            },
            flows: cfg.flows,
            sport_base: cfg.sport_base,
            weights: cfg.weights.clone(),
        };
        let gen = GenThread::spawn(&bed, setup, cfg.gen_cpu, stop)?;
        if cfg.rx_on_receiver {
            crate::napi::thread_and_pin(Some(&bed.ns), &bed.peer_if, &[cfg.gen_cpu])?;
        }
        let env = ServerEnv {
            interface: bed.host_if.clone(),
            addr: bed.host_v4,
            port: cfg.port,
            cpus: cfg.server_cpus.clone(),
            steer_cmd: cfg.steer_cmd.clone(),
            steer_bin: cfg.steer_bin.clone(),
            self_exe: std::env::current_exe().context("finding this binary")?,
            log_dir: cfg.log_dir.clone(),
            rx_on_server: cfg.rx_on_receiver,
            proxy_runtime: cfg.proxy_runtime.clone(),
            kernel_echo_args: Vec::new(),
        };
        Ok(Bed {
            gen,
            bed,
            env,
            desc,
            tag: 0,
        })
    }

    /// Where the generator end's NAPI threads ran (`--rx-on receiver`).
    pub fn generator_rx(&self) -> Option<String> {
        crate::napi::describe(&self.bed.peer_if)
    }

    fn phase(
        &mut self,
        cfg: &BenchConfig,
        rate: Option<u64>,
        warmup: Duration,
        window: Duration,
        drain: Duration,
    ) -> Result<PhaseResult> {
        self.tag += 1;
        self.gen.phase(PhaseSpec {
            rate: rate.map(|r| r as f64),
            warmup,
            window,
            drain,
            tick: cfg.tick,
            tag: self.tag,
            arrivals: cfg.arrivals,
        })
    }

    /// Run `run` of server `kind`, started with `env`: a probe, then each
    /// of `phases` (a fixed rate not held is tried again, up to
    /// `cfg.retries` times, and flagged with its reason if it still is
    /// not), then stopped. A server that does not start or answer gives a
    /// run with an error, not an `Err`.
    pub fn serve(
        &mut self,
        cfg: &BenchConfig,
        run: usize,
        kind: Kind,
        env: &ServerEnv,
        phases: &[Option<u64>],
    ) -> Result<ServerRun> {
        let mut sr = ServerRun {
            run,
            server: kind,
            error: None,
            phases: Vec::new(),
            ran_on: String::new(),
            last_words: String::new(),
            stats: None,
        };
        info!(run, server = kind.name(), "starting");
        let server = match Running::start(kind, env) {
            Ok(s) => s,
            Err(e) => {
                warn!("{}: {e:#}", kind.name());
                sr.error = Some(format!("did not start: {e:#}"));
                return Ok(sr);
            }
        };
        // Probe: does it answer at all? (Up to 3 s.)
        let mut answered = false;
        for _ in 0..6 {
            let p = self.phase(
                cfg,
                Some(2000),
                Duration::from_millis(100),
                Duration::from_millis(200),
                Duration::from_millis(200),
            )?;
            if p.total.answered > 0 {
                answered = true;
                break;
            }
        }
        if !answered {
            sr.error =
                Some("the server does not answer (no replies to a 2k pps probe for 3 s)".into());
            sr.ran_on = server.where_it_ran();
            let _ = server.stop();
            return Ok(sr);
        }
        for &rate in phases {
            let name = phase_name(rate);
            let mut attempt = 1;
            let p = loop {
                let p = self.measured_phase(cfg, rate, &server)?;
                if !crate::hold::retry(&p, attempt, cfg.retries) {
                    break PhaseResult {
                        attempts: attempt,
                        ..p
                    };
                }
                println!(
                    "  run {run} {} {name}: offered {:.0}/s, not held: trying again ({} of {} retries)",
                    kind.name(),
                    p.offered_pps,
                    attempt,
                    cfg.retries
                );
                attempt += 1;
            };
            let p = if crate::hold::held(&p) {
                p
            } else {
                let why = crate::hold::why_not_held(&p, &cfg.server_cpus);
                PhaseResult {
                    not_held: Some(why),
                    ..p
                }
            };
            println!("  {}", crate::report::phase_line(run, kind, &name, &p));
            sr.phases.push((name, p));
        }
        sr.ran_on = server.where_it_ran();
        match server.stop() {
            Ok((last, stats)) => {
                sr.last_words = last;
                sr.stats = stats;
            }
            Err(e) => sr.error = Some(format!("{e:#}")),
        }
        Ok(sr)
    }

    /// One phase with the server process's own costs per reply.
    fn measured_phase(
        &mut self,
        cfg: &BenchConfig,
        rate: Option<u64>,
        server: &Running,
    ) -> Result<PhaseResult> {
        let before = (
            server.pid().map(cpustat::task_totals),
            server.backend_pid().map(cpustat::task_totals),
        );
        let mut p = self.phase(cfg, rate, cfg.warmup, cfg.window, cfg.drain)?;
        let answered = p.total.answered;
        let per_reply = |v: u64| (answered > 0).then(|| v as f64 / answered as f64);
        if let (Some(pid), Some(b)) = (server.pid(), before.0) {
            let d = b.since(cpustat::task_totals(pid));
            p.server_switches_per_reply = per_reply(d.voluntary + d.involuntary);
            p.server_voluntary_per_reply = per_reply(d.voluntary);
            p.server_cpu_us_per_reply = per_reply(d.cpu_ns).map(|ns| ns / 1e3);
        }
        if let (Some(pid), Some(b)) = (server.backend_pid(), before.1) {
            let d = b.since(cpustat::task_totals(pid));
            p.backend_cpu_us_per_reply = per_reply(d.cpu_ns).map(|ns| ns / 1e3);
        }
        Ok(p)
    }
}

/// The phases `kind` runs in a `run` of `cfg`: the proxies' rates for a
/// proxy, the echo rates otherwise; the reflector (the floor of both) gets
/// the union when proxies run; the raw AF_XDP turnaround spins, so it only
/// gets `max` unless it runs alone.
pub fn phases_of(cfg: &BenchConfig, kind: Kind) -> Vec<Option<u64>> {
    let alone = cfg.servers.len() == 1;
    let with_proxies = kind == Kind::Reflector && cfg.servers.iter().any(|k| k.is_proxy());
    let mut phases = if kind.is_proxy() {
        cfg.proxy_phases.clone()
    } else {
        cfg.phases.clone()
    };
    if with_proxies {
        for p in &cfg.proxy_phases {
            if !phases.contains(p) {
                phases.push(*p);
            }
        }
    }
    phases
        .into_iter()
        .filter(|r| alone || kind != Kind::Afxdp || r.is_none())
        .collect()
}

/// Runs the benchmark. `stop` is the Ctrl-C flag.
pub fn run(cfg: &BenchConfig, stop: &'static AtomicBool) -> Result<Outcome> {
    let mut bed = Bed::open(cfg, stop)?;
    let env = bed.env.clone();
    let mut out = Vec::new();
    for run in 1..=cfg.runs {
        for &kind in &cfg.servers {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                bail!("interrupted");
            }
            out.push(bed.serve(cfg, run, kind, &env, &phases_of(cfg, kind))?);
        }
    }
    let generator_rx = bed.generator_rx();
    let desc = bed.desc.clone();
    drop(bed);
    Ok(Outcome {
        runs: out,
        bed: desc,
        generator_rx,
    })
}

/// "load 1.20 0.90 0.50, 35% of the CPUs busy over 1 s".
pub fn machine_load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let busy = (|| -> Option<f64> {
        let a = cpustat::sample().ok()?;
        std::thread::sleep(Duration::from_secs(1));
        let b = cpustat::sample().ok()?;
        let d = cpustat::delta(&a, &b, cpustat::ticks_per_sec());
        Some(d.busy_secs / d.per_cpu_busy.len().max(1) as f64 * 100.0)
    })();
    format!(
        "load average {}, {} of the CPUs busy over 1 s",
        load.join(" "),
        busy.map_or("?".into(), |b| format!("{b:.0}%"))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BenchConfig {
        BenchConfig {
            servers: vec![Kind::Steer],
            runs: 1,
            phases: vec![None],
            proxy_phases: vec![None],
            flows: 64,
            port: 11111,
            sport_base: 40000,
            gen_cpu: 0,
            server_cpus: vec![1],
            weights: Vec::new(),
            queues: 2,
            warmup: Duration::from_millis(300),
            window: Duration::from_secs(1),
            drain: Duration::from_millis(200),
            tick: Duration::from_micros(100),
            arrivals: Arrivals::Smooth,
            retries: 2,
            steer_cmd: vec!["steer".into(), "echo".into()],
            steer_bin: "steer".into(),
            rx_on_receiver: false,
            proxy_runtime: "worker".into(),
            log_dir: PathBuf::from("/tmp"),
        }
    }

    fn err(c: &BenchConfig, ncpu: usize, shared: bool) -> String {
        c.check(ncpu, shared).unwrap_err().to_string()
    }

    #[test]
    fn settings_are_checked_against_each_other_and_the_machine() {
        assert!(cfg().check(2, false).is_ok());
        assert!(err(&cfg(), 1, false).contains("CPU 1 does not exist here (1 CPUs)"));
        let mut c = cfg();
        c.server_cpus = vec![0, 1];
        assert!(err(&c, 2, false).contains("also a server CPU"));
        assert!(c.check(2, true).is_ok(), "allowed with --gen-on-server-cpu");
        let mut c = cfg();
        c.weights = vec![1, 0];
        assert!(err(&c, 2, false).contains("--weights"));
        c.weights = vec![10_000, 1];
        assert!(c.check(2, false).is_ok());
        for (flows, base, ok) in [
            (0, 40000, false),
            (4096, 40000, true),
            (4097, 1000, false),
            (100, 65436, false),
            (99, 65436, true),
        ] {
            let mut c = cfg();
            (c.flows, c.sport_base) = (flows, base);
            assert_eq!(c.check(2, false).is_ok(), ok, "{flows} flows from {base}");
        }
        for (q, ok) in [(0, false), (1, true), (64, true), (65, false)] {
            let mut c = cfg();
            c.queues = q;
            assert_eq!(c.check(2, false).is_ok(), ok, "{q} queues");
        }
        for (w, ok) in [(0.05, false), (0.1, true), (600.0, true), (601.0, false)] {
            let mut c = cfg();
            c.window = Duration::from_secs_f64(w);
            assert_eq!(c.check(2, false).is_ok(), ok, "{w} s window");
        }
    }
}
