//! A UDP forwarder on steer: client datagrams arrive over AF_XDP, each flow
//! is handed to a tokio task that forwards it to the backend through a
//! kernel UDP socket and relays the backend's replies back on the flow.
//!
//! Reading a flow records the task's CPU, so steer steers the flow's next
//! packets to the worker on that CPU (under `--policy llc` only when the
//! task crossed an LLC). Two task layouts:
//! - `multi`: one tokio multi-thread runtime (work-stealing; tasks move);
//! - `per-core`: one current_thread runtime pinned to each worker CPU; a
//!   flow's task runs on the CPU whose worker received the flow.
//!
//! Both are switchable at start (`--policy`, `--runtime`) and at run time by
//! lines on stdin: `policy llc|always`, `runtime multi|per-core` (new flows
//! use the new layout), `stats`, `quit`.
//!
//! ```text
//! udp_proxy --interface veth0 --port 7000 --backend 127.0.0.1:11111
//! ```

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use steer::core::cpu::CpuId;
use steer::core::policy::Policy;
use steer::engine::Engine;
use steer::flows::{AcceptMode, Flow, FlowOptions};
use steer::xdp::Proto;
use tokio::net::UdpSocket;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Layout {
    /// One multi-thread runtime.
    Multi,
    /// One current_thread runtime per worker CPU.
    PerCore,
}

impl Layout {
    fn from_u8(v: u8) -> Self {
        if v == 1 {
            Layout::PerCore
        } else {
            Layout::Multi
        }
    }
}

/// UDP forwarder over AF_XDP with steer's flow steering.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The interface clients arrive on.
    #[arg(long, short = 'i')]
    interface: String,
    /// The UDP port clients send to.
    #[arg(long, short = 'p')]
    port: u16,
    /// The backend to forward to (a kernel UDP service).
    #[arg(long)]
    backend: SocketAddr,
    /// Desired-table update policy at start.
    #[arg(long, default_value = "llc")]
    policy: Policy,
    /// Task layout at start.
    #[arg(long, value_enum, default_value = "multi")]
    runtime: Layout,
    /// Close a flow idle this many seconds.
    #[arg(long, default_value_t = 30.0)]
    idle_timeout: f64,
    /// Stop after this many seconds (default: SIGINT/SIGTERM or `quit`).
    #[arg(long)]
    duration: Option<f64>,
    /// Write the final counters here on exit.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    /// Use this hwloc synthetic topology for the LLC rule instead of the
    /// machine's (e.g. `pack:2 l3:1 core:1 pu:1`: two CPUs in two LLCs).
    #[arg(long)]
    topology: Option<String>,
    /// Leave the workers and the per-core runtime threads unpinned.
    #[arg(long)]
    no_pin: bool,
    /// Entries of the desired-CPU table (a power of two): flows sharing an
    /// entry overwrite each other's CPU, whatever the policy.
    #[arg(long, default_value_t = 65536)]
    flow_table: usize,
}

/// Forwarding counters.
#[derive(Default)]
struct Relayed {
    to_backend: AtomicU64,
    to_client: AtomicU64,
    send_errors: AtomicU64,
    flows_multi: AtomicU64,
    flows_per_core: AtomicU64,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("udp_proxy: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let stop = steer::xdp::shutdown::install()?;
    let mut builder = Engine::builder(&args.interface)
        .own(Proto::Udp, args.port)
        .policy(args.policy)
        .deliver_flows(FlowOptions {
            accept: AcceptMode::PerCpu,
            ..FlowOptions::default()
        });
    if let Some(spec) = &args.topology {
        builder = builder.topology(steer::topology::Topology::synthetic(spec)?);
    }
    let engine = builder
        .pin_workers(!args.no_pin)
        .flow_tables(args.flow_table, 4096)
        .start()?;
    let layout = Arc::new(AtomicU8::new(args.runtime as u8));
    let relayed = Arc::new(Relayed::default());
    let idle = Duration::from_secs_f64(args.idle_timeout.max(0.001));
    let multi = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("proxy-multi")
        .build()?;
    let done = Arc::new(AtomicBool::new(false));

    // One acceptor per worker CPU, on a current_thread runtime pinned there.
    let cpus: Vec<CpuId> = engine.topology().online_cpus().iter().collect();
    let mut acceptors = Vec::new();
    for &cpu in &cpus {
        let listener = engine
            .listener_for(cpu)
            .ok_or_else(|| anyhow::anyhow!("no listener for CPU {cpu}"))?;
        let (layout, relayed, multi) = (
            Arc::clone(&layout),
            Arc::clone(&relayed),
            multi.handle().clone(),
        );
        let backend = args.backend;
        let pin = !args.no_pin;
        acceptors.push(
            std::thread::Builder::new()
                .name(format!("proxy-core{cpu}"))
                .spawn(move || -> anyhow::Result<()> {
                    if pin {
                        let _ = steer::topology::thread::pin_current(cpu);
                    }
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    let local = tokio::task::LocalSet::new();
                    local.block_on(&rt, async move {
                        while let Some(flow) = listener.accept().await {
                            let relayed = Arc::clone(&relayed);
                            match Layout::from_u8(layout.load(Ordering::Relaxed)) {
                                Layout::PerCore => {
                                    relayed.flows_per_core.fetch_add(1, Ordering::Relaxed);
                                    tokio::task::spawn_local(relay(flow, backend, idle, relayed));
                                }
                                Layout::Multi => {
                                    relayed.flows_multi.fetch_add(1, Ordering::Relaxed);
                                    multi.spawn(relay(flow, backend, idle, relayed));
                                }
                            }
                        }
                    });
                    Ok(())
                })?,
        );
    }
    println!(
        "steer udp_proxy: ready on {} udp port {} -> {}, policy {}, runtime {:?}",
        args.interface, args.port, args.backend, args.policy, args.runtime
    );

    // Control lines on stdin.
    {
        let (layout, done) = (Arc::clone(&layout), Arc::clone(&done));
        let shared = engine.shared().clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["policy", p] => match p.parse::<Policy>() {
                        Ok(p) => {
                            shared.desired.policy().set(p);
                            println!("policy {p}");
                        }
                        Err(e) => eprintln!("udp_proxy: {e}"),
                    },
                    ["runtime", r] => match Layout::from_str(r, true) {
                        Ok(l) => {
                            layout.store(l as u8, Ordering::Relaxed);
                            println!("runtime {l:?}");
                        }
                        Err(e) => eprintln!("udp_proxy: runtime: {e}"),
                    },
                    ["stats"] => {
                        let d = shared.desired.stats();
                        println!(
                            "{{\"desired_table\":{{\"updates\":{},\"suppressed\":{}}},\"stats\":{}}}",
                            d.updates(),
                            d.suppressed,
                            shared.stats.snapshot().to_json()
                        );
                    }
                    ["quit"] => {
                        done.store(true, Ordering::Relaxed);
                        break;
                    }
                    [] => {}
                    _ => eprintln!(
                        "udp_proxy: commands: policy llc|always, runtime multi|per-core, stats, quit"
                    ),
                }
            }
        });
    }

    let started = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) && !done.load(Ordering::Relaxed) {
        if args
            .duration
            .is_some_and(|d| started.elapsed().as_secs_f64() >= d)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let flow_stats = engine.flow_stats().unwrap_or_default();
    let report = engine.stop()?;
    for a in acceptors {
        let _ = a.join();
    }
    multi.shutdown_timeout(Duration::from_secs(1));
    let r = &relayed;
    // stdout may be gone (a closed pipe) by now: report without panicking.
    let _ = writeln!(
        std::io::stdout(),
        "steer udp_proxy: flows {} (multi {}, per-core {}), to backend {}, to clients {}, send errors {}, steering updates {}, desired writes {} (suppressed {})",
        flow_stats.accepted,
        r.flows_multi.load(Ordering::Relaxed),
        r.flows_per_core.load(Ordering::Relaxed),
        r.to_backend.load(Ordering::Relaxed),
        r.to_client.load(Ordering::Relaxed),
        r.send_errors.load(Ordering::Relaxed),
        report.stats.steering_updates(),
        report.stats.desired.updates(),
        report.stats.desired.suppressed,
    );
    if let Some(path) = &args.stats_json {
        let mut v = report.to_json_value();
        if let serde_json::Value::Object(m) = &mut v {
            m.insert(
                "proxy".into(),
                serde_json::json!({
                    "flows": flow_stats.accepted,
                    "accept_drops": flow_stats.accept_drops,
                    "flows_multi": r.flows_multi.load(Ordering::Relaxed),
                    "flows_per_core": r.flows_per_core.load(Ordering::Relaxed),
                    "to_backend": r.to_backend.load(Ordering::Relaxed),
                    "to_client": r.to_client.load(Ordering::Relaxed),
                    "send_errors": r.send_errors.load(Ordering::Relaxed),
                }),
            );
        }
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")?;
    }
    if !report.census_ok() {
        anyhow::bail!("frame accounting does not balance: {:?}", report.census);
    }
    Ok(())
}

/// Forwards one flow to the backend and its replies back, until the flow
/// is idle for `idle` or the engine stops.
async fn relay(mut flow: Flow, backend: SocketAddr, idle: Duration, relayed: Arc<Relayed>) {
    let local: SocketAddr = if backend.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let Ok(socket) = UdpSocket::bind(local).await else {
        relayed.send_errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if socket.connect(backend).await.is_err() {
        relayed.send_errors.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let writer = flow.writer();
    let mut buf = vec![0u8; 65536];
    loop {
        tokio::select! {
            d = tokio::time::timeout(idle, flow.recv()) => match d {
                Ok(Some(d)) => {
                    if socket.send(&d).await.is_ok() {
                        relayed.to_backend.fetch_add(1, Ordering::Relaxed);
                    } else {
                        relayed.send_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // Idle, or the engine stopped: dropping the flow closes it.
                Ok(None) | Err(_) => break,
            },
            n = socket.recv(&mut buf) => match n {
                Ok(n) => {
                    if writer.send(&buf[..n]).is_ok() {
                        relayed.to_client.fetch_add(1, Ordering::Relaxed);
                    } else {
                        relayed.send_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    relayed.send_errors.fetch_add(1, Ordering::Relaxed);
                }
            },
        }
    }
}
