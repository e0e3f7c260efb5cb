//! `steer tcp-echo`: a tokio TCP echo server on the kernel's sockets, with
//! steer steering them (`--steer kernel-sockets`, the default) or not
//! (`--steer none`, plain kernel RPS/RFS). Every read of a connection is
//! recorded: the LLC rule decides whether the move is written, a write
//! updates the XDP RFS program's map (the costly update). Once a second it
//! prints the records, the updates and their cost, and where the steered
//! frames landed (per CPU); at the end a summary, also as JSON. Stops at
//! SIGINT/SIGTERM with the program detached.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::json;
use steer_core::policy::WriteReason;
use steer_kernel::{KernelStats, KernelSteering, Proto};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::kernel_args::{delta, KernelSteeringArgs};

/// Who steers the connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SteerMode {
    /// steer's flow table, through the XDP RFS program and a cpumap.
    KernelSockets,
    /// Nobody: the kernel's own path (its RPS/RFS if configured).
    None,
}

/// `steer tcp-echo` arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    steer tcp-echo -i eth1 -p 7000                   echo, connections steered to their reader's CPU\n  \
    steer tcp-echo -i eth1 -p 7000 --policy always   every change of CPU updates the map\n  \
    steer tcp-echo -p 7000 --steer none              the kernel alone, for comparison")]
pub struct TcpEchoArgs {
    /// The interface the connections arrive on (needed to steer them).
    #[arg(long, short = 'i')]
    pub interface: Option<String>,
    /// TCP port to serve.
    #[arg(long, short = 'p', value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Who steers the connections.
    #[arg(long, value_enum, default_value = "kernel-sockets")]
    pub steer: SteerMode,
    /// tokio worker threads (default: one per CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// The steering's flags.
    #[command(flatten)]
    pub steering: KernelSteeringArgs,
}

/// What the connection tasks count.
#[derive(Debug, Default)]
struct Served {
    connections: AtomicU64,
    reads: AtomicU64,
    bytes: AtomicU64,
    record_errors: AtomicU64,
}

/// The TCP listener on `port` of every address (IPv6 and IPv4, or IPv4
/// alone where IPv6 is off), non-blocking for tokio.
fn bind_listener(port: u16) -> anyhow::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(("::", port))
        .or_else(|_| std::net::TcpListener::bind(("0.0.0.0", port)))
        .with_context(|| format!("binding TCP port {port}"))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// `processed` per CPU from /proc/net/softnet_stat (packets each CPU's
/// network stack handled, whatever the namespace).
fn softnet_processed() -> Vec<u64> {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|v| u64::from_str_radix(v, 16).ok())
                .unwrap_or(0)
        })
        .collect()
}

async fn serve(
    listener: tokio::net::TcpListener,
    steering: Option<Arc<KernelSteering>>,
    served: Arc<Served>,
) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            // Out of descriptors or similar: let connections close first.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        served.connections.fetch_add(1, Ordering::Relaxed);
        let (steering, served) = (steering.clone(), served.clone());
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let mut steered = steering.as_ref().map(|s| (s.flow(&stream), s.recorder()));
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if let Some((Ok(flow), rec)) = steered.as_mut() {
                    if rec.record_flow(flow).is_err() {
                        served.record_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                served.reads.fetch_add(1, Ordering::Relaxed);
                served.bytes.fetch_add(n as u64, Ordering::Relaxed);
                if stream.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
    }
}

fn row(stats: &KernelStats, previous: &KernelStats, landed: &[u64], secs: f64) -> String {
    let written = stats.records.updates() - previous.records.updates();
    let suppressed = stats.records.suppressed - previous.records.suppressed;
    let updates = stats.updates - previous.updates;
    let csum = stats.csum_errors.since(previous.csum_errors);
    let completed = stats.program.map_or(0, |p| p.csum_completed)
        - previous.program.map_or(0, |p| p.csum_completed);
    format!(
        "records written {written} suppressed {suppressed} | map updates {updates} ({:.0}/s, p50 {} ns) | flows {} | landed per CPU {landed:?} | csum completed {completed}, errors tcp {} udp {}",
        updates as f64 / secs,
        stats.update_times.p50_ns,
        stats.flows,
        csum.tcp,
        csum.udp,
    )
}

fn summary(
    args: &TcpEchoArgs,
    elapsed: f64,
    served: &Served,
    stats: Option<&KernelStats>,
    landed: &[u64],
    softnet: &[u64],
) -> serde_json::Value {
    let mut v = json!({
        "steer": match args.steer { SteerMode::KernelSockets => "kernel-sockets", SteerMode::None => "none" },
        "policy": args.steering.policy.name(),
        "topology": args.steering.topology_name(),
        "elapsed_s": elapsed,
        "connections": served.connections.load(Ordering::Relaxed),
        "reads": served.reads.load(Ordering::Relaxed),
        "bytes": served.bytes.load(Ordering::Relaxed),
        "softnet_processed_per_cpu": softnet,
    });
    if let Some(s) = stats {
        let mut written = serde_json::Map::new();
        for r in WriteReason::ALL {
            written.insert(r.name().into(), json!(s.records.written(r)));
        }
        v["records"] = json!({
            "written": s.records.updates(),
            "written_by_reason": written,
            "suppressed": s.records.suppressed,
            "errors": served.record_errors.load(Ordering::Relaxed),
        });
        v["map_updates"] = json!(s.updates);
        v["map_updates_per_s"] = json!(s.updates as f64 / elapsed.max(1e-9));
        v["map_update_ns"] = json!({
            "count": s.update_times.count,
            "mean": s.update_times.mean_ns,
            "p50": s.update_times.p50_ns,
            "p99": s.update_times.p99_ns,
            "max": s.update_times.max_ns,
        });
        v["map_update_errors"] = json!(s.update_errors);
        v["flows_removed"] = json!(s.removed);
        v["landed_per_cpu"] = json!(landed);
        v["csum_errors"] = json!({ "tcp": s.csum_errors.tcp, "udp": s.csum_errors.udp });
        if let Some(p) = s.program {
            v["program"] = json!({
                "redirected": p.redirected,
                "untracked": p.untracked,
                "moves": p.moves,
                "held_back": p.held_back,
                "forced": p.forced,
                "queue_drops": p.queue_drops,
                "redirect_errors": p.redirect_errors,
                "csum_completed": p.csum_completed,
                "csum_passed": p.csum_passed,
            });
        }
    }
    v
}

pub fn run(args: &TcpEchoArgs) -> anyhow::Result<ExitCode> {
    let stop = steer_xdp::shutdown::install()?;
    let interface = match args.steer {
        SteerMode::None => None,
        SteerMode::KernelSockets => Some(args.interface.as_deref().context(
            "--steer kernel-sockets needs the interface the connections arrive on: add -i IF",
        )?),
    };
    // The user first (an unknown one fails before anything is touched),
    // the interface (another steer serving it is named), then the port,
    // bound before the capabilities go (below 1024 it needs one).
    let run_as = args.steering.privileges.run_as()?;
    let owner = interface
        .map(steer_xdp::owner_lock::InterfaceLock::acquire_noting)
        .transpose()?;
    let listener = bind_listener(args.port)?;
    let steering = match interface {
        None => None,
        Some(interface) => {
            // Taken fresh, the lock says no steer process serves the
            // interface: what a dead run left is replaced.
            let fresh = owner.as_ref().is_some_and(|(_, shared)| !shared);
            let b = args
                .steering
                .builder(interface, fresh)?
                .own(Proto::Tcp, args.port);
            Some(Arc::new(b.start()?))
        }
    };
    if steering.is_none() {
        // The kernel's own path: nothing privileged is left to do.
        let keep = if args.steering.keep_capabilities {
            steer_xdp::privileges::permitted().context("reading the capabilities")?
        } else {
            Default::default()
        };
        match run_as {
            Some(user) => user.switch(&keep)?,
            None if !args.steering.keep_capabilities => {
                steer_xdp::privileges::drop_all_but(&keep).context("dropping capabilities")?
            }
            None => {}
        }
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    let served = Arc::new(Served::default());
    let listener = runtime
        .block_on(async { tokio::net::TcpListener::from_std(listener) })
        .context("registering the listener")?;
    runtime.spawn(serve(listener, steering.clone(), served.clone()));
    // Set up: from here every thread runs under the allowlist.
    args.steering.privileges.apply_seccomp()?;
    println!(
        "steer tcp-echo: ready on tcp port {}, steer {}, policy {}, {} tokio threads{}",
        args.port,
        if steering.is_some() {
            "kernel-sockets"
        } else {
            "none"
        },
        args.steering.policy,
        threads,
        steering
            .as_ref()
            .and_then(|s| s.program())
            .map_or(String::new(), |p| format!(", xdp {:?}", p.mode())),
    );

    let landed = |s: &KernelSteering| {
        s.program()
            .and_then(|p| p.landed_per_cpu().ok())
            .unwrap_or_default()
    };
    let started = Instant::now();
    let softnet_start = softnet_processed();
    let landed_start = steering.as_deref().map(landed).unwrap_or_default();
    let mut previous = steering.as_ref().map(|s| (s.stats(), landed(s)));
    args.steering.run_live(stop, started, || {
        if let (Some(s), Some((prev, prev_landed))) = (&steering, &previous) {
            let (stats, l) = (s.stats(), landed(s));
            if !args.steering.run.no_table {
                println!("{}", row(&stats, prev, &delta(&l, prev_landed), 1.0));
            }
            previous = Some((stats, l));
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let stats = steering.as_ref().map(|s| s.stats());
    let landed_total = steering
        .as_deref()
        .map(|s| delta(&landed(s), &landed_start))
        .unwrap_or_default();
    runtime.shutdown_timeout(Duration::from_millis(200));
    let softnet = delta(&softnet_processed(), &softnet_start);
    if let Some(s) = steering {
        match Arc::try_unwrap(s) {
            Ok(s) => s.stop(),
            Err(s) => drop(s),
        }
    }
    let report = summary(
        args,
        elapsed,
        &served,
        stats.as_ref(),
        &landed_total,
        &softnet,
    );
    println!(
        "steer tcp-echo: stopped after {elapsed:.1} s: {} connections, {} reads{}",
        report["connections"],
        report["reads"],
        stats.map_or(String::new(), |s| format!(
            ", records written {} suppressed {}, map updates {} ({:.0}/s, mean {} ns, p99 {} ns), landed per CPU {:?}, partial checksums completed {}, checksum errors tcp {} udp {}",
            s.records.updates(),
            s.records.suppressed,
            s.updates,
            s.updates as f64 / elapsed.max(1e-9),
            s.update_times.mean_ns,
            s.update_times.p99_ns,
            landed_total,
            s.program.map_or(0, |p| p.csum_completed),
            s.csum_errors.tcp,
            s.csum_errors.udp,
        )),
    );
    if let Some(path) = &args.steering.run.stats_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
