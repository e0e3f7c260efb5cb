//! `steer demo`: steering made visible. An engine on the host end of a
//! veth pair hands each UDP flow to a consumer thread (as `steer proxy`
//! hands flows to tasks); clients in the peer's namespace send numbered
//! datagrams and count the echoes; the demo moves every consumer to the
//! next CPU on a schedule. Two phases on one engine, with a model topology
//! of two LLCs whose first LLC holds the worker CPUs:
//!
//! 1. `always` (the kernel's RFS rule): flows are consumed on another CPU
//!    than the rx queue's (steered in/out), and each consumer move moves
//!    its flow (a steering update);
//! 2. `llc`: the same moves stay within an LLC, so the rule keeps each flow
//!    where it is (suppressed), and the updates stop.
//!
//! It prints a line a second (or, with `--snapshots`, the `steer top
//! --once` screen), then the summary of both phases; `--check` fails
//! unless the summary shows steering, moves and suppressed moves. The
//! namespace and veth pair are `scripts/demo.sh`'s.

mod clients;
mod consumers;
mod summary;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use clap::Args;
use steer_core::cpu::CpuSet;
use steer_core::policy::Policy;
use steer_engine::engine::Engine;
use steer_engine::flows::FlowOptions;
use steer_engine::observe::DEFAULT_RUN_DIR;
use steer_topology::Topology;
use steer_xdp::Proto;

use crate::top::TopView;
use clients::{Clients, Shed};
use consumers::Consumers;
use summary::PhaseSummary;

/// `steer demo` arguments.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples (scripts/demo.sh builds the namespace and runs this):\n  \
    steer demo -i steer-1-h --netns steer-1 --server 198.19.1.1\n  \
    steer demo -i steer-1-h --netns steer-1 --server 198.19.1.1 --seconds 2 --check"
)]
pub struct DemoArgs {
    /// The interface to serve on (the host end of the veth pair).
    #[arg(long, short = 'i')]
    pub interface: String,
    /// The network namespace (under /run/netns) the clients send from.
    #[arg(long)]
    pub netns: String,
    /// The interface's IPv4 address, where the clients send.
    #[arg(long)]
    pub server: Ipv4Addr,
    /// The UDP port served.
    #[arg(long, short = 'p', default_value_t = 11111, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Flows (one client socket and one consumer thread each).
    #[arg(long, default_value_t = 8)]
    pub flows: usize,
    /// Datagrams a second per flow.
    #[arg(long, default_value_t = 1000.0, value_parser = crate::args::positive_rate)]
    pub rate: f64,
    /// Seconds per phase.
    #[arg(long, default_value_t = 6.0, value_parser = crate::args::seconds)]
    pub seconds: f64,
    /// Seconds between consumer moves.
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::positive_seconds)]
    pub move_every: f64,
    /// The topology model the LLC rule uses: by default two LLCs of two
    /// CPUs, CPUs 0 and 1 (the workers) in the first.
    #[arg(long, default_value = "pack:1 l3:2 core:2 pu:1")]
    pub topology: String,
    /// Worker CPUs (the consumers move between them).
    #[arg(long, default_value = "0-1", value_parser = crate::args::cpu_list)]
    pub cpus: CpuSet,
    /// Print the `steer top --once` screen every second instead of a line.
    #[arg(long)]
    pub snapshots: bool,
    /// Exit 3 unless the summary shows steered packets and moves under
    /// `always`, and suppressed moves under `llc` with 2 or more LLCs.
    #[arg(long)]
    pub check: bool,
    /// Write the summary as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Directory of the stats socket (`steer top` reads it).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_RUN_DIR)]
    pub run_dir: PathBuf,
    /// Keep every capability after set-up (by default the engine and the
    /// clients drop them all once set up).
    #[arg(long)]
    pub keep_capabilities: bool,
    /// `--user`, `--group`, `--seccomp`.
    #[command(flatten)]
    pub privileges: crate::least_privilege::PrivilegeArgs,
}

pub fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    // Looked up first: an unknown user fails before anything is touched.
    let run_as = args.privileges.run_as()?;
    let stop = steer_xdp::shutdown::install()?;
    let model = Topology::synthetic(&args.topology)?;
    let llcs: Vec<String> = model
        .llcs()
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| format!("{{{s}}}"))
        .collect();
    let worker_llcs = model
        .llcs()
        .iter()
        .filter(|l| args.cpus.iter().any(|c| l.contains(c)))
        .count();
    // The clients first: joining their namespace needs a capability the
    // engine drops at start. They wait for `go`.
    let clients = Clients::start(
        &args.netns,
        SocketAddr::new(args.server.into(), args.port),
        args.flows,
        args.rate,
        match (args.keep_capabilities, run_as.is_some()) {
            (true, _) => Shed::Nothing,
            (false, true) => Shed::Bounding,
            (false, false) => Shed::All,
        },
    )?;
    let mut builder = Engine::builder(&args.interface)
        .own(Proto::Udp, args.port)
        .topology(model)
        .cpus(args.cpus)
        .policy(Policy::Always)
        .frames(4096, 1024)
        .stats_dir(&args.run_dir)
        .drop_privileges(!args.keep_capabilities)
        .deliver_flows(FlowOptions::default());
    if let Some(user) = run_as {
        builder = builder.run_as(user);
    }
    let engine = builder.start()?;
    println!(
        "steer demo: engine on {} udp port {}, workers on CPUs {}; topology model {:?}: LLCs {}",
        args.interface,
        args.port,
        args.cpus,
        args.topology,
        llcs.join(" ")
    );
    println!(
        "steer demo: watch it with `steer top {}`; {} flows at {}/s each, consumers move every {} s",
        args.interface, args.flows, args.rate, args.move_every
    );
    let listener = engine
        .listener()
        .ok_or_else(|| anyhow::anyhow!("flow delivery is off"))?;
    let consumers = Consumers::start(listener, args.cpus)?;
    // Set up: from here every thread runs under the allowlist.
    args.privileges.apply_seccomp()?;
    clients.go();

    // Let every flow arrive and find its consumer before measuring.
    let settle = Instant::now() + Duration::from_secs(3);
    while consumers.flows() < args.flows && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));

    let mut phases = Vec::new();
    let mut view = TopView::new(engine.live_stats());
    for (name, policy, what) in [
        (
            "always",
            Policy::Always,
            "every consumer move rewrites its flow's entry: the flow follows (a steering update)",
        ),
        (
            "llc",
            Policy::LlcAffinity,
            "the consumers move within one LLC: the rule keeps each flow where it is (suppressed)",
        ),
    ] {
        if stop.load(Relaxed) {
            break;
        }
        engine.set_policy(policy);
        println!("\nsteer demo: phase {name}: {what}");
        let start = engine.live_stats();
        let tally0 = clients.tally();
        let began = Instant::now();
        let mut moves = 0;
        let mut next_move = began + Duration::from_secs_f64(args.move_every);
        let mut next_print = began + Duration::from_secs(1);
        let mut last = start.clone();
        while began.elapsed().as_secs_f64() < args.seconds && !stop.load(Relaxed) {
            let now = Instant::now();
            if now >= next_move {
                let n = consumers.move_all();
                moves += n;
                next_move += Duration::from_secs_f64(args.move_every);
                if !args.snapshots {
                    println!("steer demo: moved {n} consumers to their next CPU");
                }
            }
            if now >= next_print {
                next_print += Duration::from_secs(1);
                let live = engine.live_stats();
                if args.snapshots {
                    view.update(live.clone());
                    print!("{}", view.to_text(132));
                } else {
                    let p = PhaseSummary::between(
                        name,
                        &last,
                        &live,
                        (clients.tally(), clients.tally()),
                        0,
                    );
                    println!(
                        "  [{name:<6} {:>4.1} s] rx {:>6}  fast {:>6}  steered {:>6} (out per cpu {})  steering updates {:>3}  suppressed {:>5}",
                        began.elapsed().as_secs_f64(),
                        p.rx,
                        p.fast_path,
                        p.steered,
                        p.steered_out_per_cpu
                            .iter()
                            .map(|(c, n)| format!("{c}:{n}"))
                            .collect::<Vec<_>>()
                            .join(" "),
                        p.steering_updates,
                        p.suppressed
                    );
                }
                last = live;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let end = engine.live_stats();
        phases.push(PhaseSummary::between(
            name,
            &start,
            &end,
            (tally0, clients.tally()),
            moves,
        ));
    }

    let total = clients.stop()?;
    consumers.stop();
    let report = engine.stop()?;

    println!("\n=== summary ===");
    println!(
        "topology model {:?}: LLCs {}; workers on CPUs {}, in {}; {} flows",
        args.topology,
        llcs.join(" "),
        args.cpus,
        if worker_llcs == 1 {
            "one LLC".to_string()
        } else {
            format!("{worker_llcs} LLCs")
        },
        args.flows
    );
    print!("{}", summary::table(&phases));
    println!(
        "steered: packets consumed on another CPU than the one whose rx queue got them; \
         updates: flow moves (steering-hook calls); suppressed: consumer moves the llc rule kept"
    );
    println!(
        "clients: {} sent, {} answered, {} reordered; frames {}",
        total.sent,
        total.answered,
        total.reordered,
        if report.census_ok() {
            "all back"
        } else {
            "NOT all back"
        }
    );
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "topology": args.topology,
            "llcs": llcs,
            "cpus": args.cpus.to_string(),
            "flows": args.flows,
            "phases": phases,
            "clients": {"sent": total.sent, "answered": total.answered, "reordered": total.reordered},
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    if args.check {
        if let Err(why) = summary::check(&phases, llcs.len()) {
            eprintln!("steer demo: check failed: {why}");
            return Ok(ExitCode::from(3));
        }
        println!("steer demo: check passed: steered, moved under always; suppressed under llc with 2 LLCs");
    }
    Ok(ExitCode::SUCCESS)
}
