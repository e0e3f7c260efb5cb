//! `steer proxy`: a UDP forwarder on steer. Client datagrams arrive over
//! AF_XDP, each flow is handed to a tokio task that forwards it to the
//! backend through a kernel UDP socket and relays the backend's replies back
//! on the flow.
//!
//! Reading a flow records the task's CPU, so steer steers the flow's next
//! packets to the worker on that CPU (under `--policy llc` only when the
//! task crossed an LLC). Three task layouts:
//! - `multi`: one tokio multi-thread runtime (work-stealing; tasks move);
//! - `per-core`: one current_thread runtime pinned to each worker CPU; a
//!   flow's task runs on the CPU whose worker received the flow;
//! - `worker`: the flow's task runs on the engine's worker thread itself
//!   (thread-per-core: no thread hop between the AF_XDP ring and the task).
//!
//! The layout is chosen at start (`--runtime`, with `--policy`) and switched
//! at run time by lines on stdin: `policy llc|always`, `runtime
//! multi|per-core|worker` (new flows use the new layout), `stats`, `quit`.
//! Started as `worker`, the engine's workers accept every flow and hand it
//! to the layout of the moment; started as `multi` or `per-core`, the
//! engine has no tasks on its workers and `runtime worker` is refused.
//!
//! Flow state is bounded: the engine's flow budget (`--max-flows`,
//! `--max-flows-per-worker`, `--new-flows-per-source`; derived from
//! `RLIMIT_NOFILE`, raised to its hard limit at start, and from memory)
//! admits, evicts and refuses flows, and each flow's backend socket takes a
//! permit from a pool of that size, so a spray of new flows can exhaust
//! neither descriptors nor memory. A flow costs a task, a socket and the
//! datagrams it queues: the backend's replies are read into one buffer per
//! thread, not one per flow.
//!
//! `--io kernel` runs the same forwarder on plain tokio sockets instead
//! ([`kernel`]): the baseline a proxy author would write without steer
//! (unbounded, as such a proxy usually is).

mod kernel;

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use clap::{Args, ValueEnum};
use steer_core::cpu::CpuId;
use steer_core::policy::Policy;
use steer_engine::flows::{
    AcceptMode, Flow, FlowBudget, FlowListener, FlowOptions, HostResources, RESERVED_FDS,
};
use steer_xdp::Proto;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::args::EngineArgs;

/// How client datagrams reach the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Io {
    /// steer: AF_XDP, flows delivered to the task that reads them.
    Steer,
    /// Plain tokio: a `SO_REUSEPORT` socket per CPU, the kernel's RPS/RFS.
    Kernel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// One multi-thread runtime.
    Multi,
    /// One current_thread runtime per worker CPU.
    PerCore,
    /// The engine's worker threads run the flows' tasks.
    Worker,
}

impl Layout {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Layout::PerCore,
            2 => Layout::Worker,
            _ => Layout::Multi,
        }
    }
}

/// `steer proxy` arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    steer proxy -i eth1 -p 7000 --backend 127.0.0.1:11111\n  \
    steer proxy -i eth1 -p 7000 --backend 10.0.0.2:53 --runtime per-core --policy always\n  \
    steer proxy -i eth1 -p 7000 --backend 127.0.0.1:11111 --runtime worker --cpus 1   # tasks on steer's workers\n  \
    steer proxy -i eth1 -p 7000 --backend 127.0.0.1:11111 --io kernel --cpus 1   # the same, without steer\n\n\
    Commands on stdin: policy llc|always, runtime multi|per-core|worker, stats, quit")]
pub struct ProxyArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The UDP port clients send to.
    #[arg(long, short = 'p', value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// The backend to forward to (a kernel UDP service).
    #[arg(long)]
    pub backend: SocketAddr,
    /// Task layout at start. `worker` (the default) costs the least per
    /// datagram, has the shortest tail and can switch to the others at run
    /// time; started as `multi` or `per-core` it cannot switch to `worker`.
    #[arg(long, value_enum, default_value = "worker")]
    pub runtime: Layout,
    /// `steer` (AF_XDP) or `kernel` (plain tokio sockets with SO_REUSEPORT on
    /// the interface, one pinned runtime per `--cpus` CPU; engine flags other
    /// than `--interface`, `--cpus` and `--no-pin` do not apply).
    #[arg(long, value_enum, default_value = "steer")]
    pub io: Io,
    /// Close a flow idle this many seconds.
    #[arg(long, default_value_t = 30.0, value_parser = crate::args::positive_seconds)]
    pub idle_timeout: f64,
    /// Most client flows open at once, each with its backend socket
    /// (default: what RLIMIT_NOFILE, raised to its hard limit, and memory
    /// allow). At the limit, flows with no two-way traffic are evicted
    /// first, then the least recently active, else new flows are refused.
    /// `--io steer` only.
    #[arg(long, value_name = "N")]
    pub max_flows: Option<usize>,
    /// Most flows open at once among those one worker received first
    /// (default: 1.5 even shares of --max-flows).
    #[arg(long, value_name = "N")]
    pub max_flows_per_worker: Option<usize>,
    /// New flows one source address (an IPv6 /64) may open per second,
    /// with a burst of twice that; 0: no limit (default: a sixteenth of
    /// --max-flows, at least 100).
    #[arg(long, value_name = "PER_SECOND")]
    pub new_flows_per_source: Option<u32>,
    /// Open flows replaced by new ones per second, at most, once the
    /// budget is full; past it new flows are refused, so a spray cannot
    /// spend the CPU on replacing flows; a flow's first datagram gets a
    /// fifth of it, a client retrying a refused flow the whole; 0: no
    /// limit (default: a quarter of --max-flows, at least 100).
    #[arg(long, value_name = "PER_SECOND")]
    pub evictions_per_second: Option<u32>,
    /// New flows a worker may have waiting for their task's first read (a
    /// SYN backlog's analog); more are refused until they start, so a
    /// spray never queues more than this ahead of the established flows.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_starting: u32,
    /// While the flow budget is full, drop every new flow's first datagram
    /// in the XDP program (before it costs a worker anything) and let its
    /// retry through: a spray of one-datagram flows then costs the proxy
    /// nothing, and clients that retry still get in. `off`: the workers
    /// see and refuse every new flow.
    #[arg(long, value_enum, default_value = "on")]
    pub xdp_gate: crate::args::OnOff,
    /// Stop after this many seconds (default: SIGINT/SIGTERM or `quit`).
    #[arg(long, value_parser = crate::args::seconds)]
    pub duration: Option<f64>,
    /// Write the final counters here on exit.
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
}

impl ProxyArgs {
    /// The flow budget the flags ask for (unset: derived at start).
    fn budget(&self) -> anyhow::Result<FlowBudget> {
        if self.max_flows == Some(0) || self.max_flows_per_worker == Some(0) {
            anyhow::bail!("--max-flows and --max-flows-per-worker take at least 1");
        }
        Ok(FlowBudget {
            max_flows: self.max_flows.unwrap_or(0),
            max_flows_per_worker: self.max_flows_per_worker.unwrap_or(0),
            new_flows_per_source: match self.new_flows_per_source {
                None => 0,
                Some(0) => u32::MAX,
                Some(n) => n,
            },
            fds_per_flow: 1,
            evictions_per_second: match self.evictions_per_second {
                None => 0,
                Some(0) => u32::MAX,
                Some(n) => n,
            },
        })
    }
}

/// Forwarding counters.
#[derive(Default)]
struct Relayed {
    to_backend: AtomicU64,
    to_client: AtomicU64,
    send_errors: AtomicU64,
    flows_multi: AtomicU64,
    flows_per_core: AtomicU64,
    flows_worker: AtomicU64,
}

impl Relayed {
    /// Counts one send: in `sent` when it went out, as a send error if not.
    fn count(&self, ok: bool, sent: &AtomicU64) {
        if ok {
            sent.fetch_add(1, Ordering::Relaxed);
        } else {
            self.send_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "flows_multi": self.flows_multi.load(Ordering::Relaxed),
            "flows_per_core": self.flows_per_core.load(Ordering::Relaxed),
            "flows_worker": self.flows_worker.load(Ordering::Relaxed),
            "to_backend": self.to_backend.load(Ordering::Relaxed),
            "to_client": self.to_client.load(Ordering::Relaxed),
            "send_errors": self.send_errors.load(Ordering::Relaxed),
        })
    }
}

/// A UDP socket connected to `backend`, from an ephemeral port.
async fn backend_socket(backend: SocketAddr) -> std::io::Result<UdpSocket> {
    let local: SocketAddr = if backend.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(backend).await?;
    Ok(socket)
}

/// `--io kernel`: the forwarder on plain tokio sockets.
fn run_kernel(args: &ProxyArgs) -> anyhow::Result<()> {
    // Looked up first: an unknown user fails before anything is bound.
    let run_as = args.engine.privileges.run_as()?;
    let stop = steer_xdp::shutdown::install()?;
    let cpus: Vec<usize> = match &args.engine.cpus {
        Some(set) => set.iter().collect(),
        None => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    };
    let relayed = Arc::new(Relayed::default());
    let idle = Duration::from_secs_f64(args.idle_timeout.max(0.001));
    let started = std::time::Instant::now();
    let duration = args.duration;
    // `quit` on stdin stops it, as it stops the steer proxy.
    let done = Arc::new(AtomicBool::new(false));
    {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            // End of input (stdin closed or /dev/null) is not a quit.
            for line in std::io::stdin().lock().lines() {
                match line.as_deref().map(str::trim) {
                    Ok("quit") => {
                        done.store(true, Ordering::Relaxed);
                        break;
                    }
                    Ok(_) => eprintln!("steer proxy (io kernel): commands: quit"),
                    Err(_) => break,
                }
            }
        });
    }
    kernel::serve(
        &args.engine.interface,
        args.port,
        args.backend,
        &cpus,
        !args.engine.no_pin,
        idle,
        Arc::clone(&relayed),
        move || {
            stop.load(Ordering::Relaxed)
                || done.load(Ordering::Relaxed)
                || duration.is_some_and(|d| started.elapsed().as_secs_f64() >= d)
        },
        // Once the sockets are bound nothing privileged is left to do:
        // every capability goes (the user too, with --user), then the
        // threads start under the allowlist.
        || {
            let keep_all = args.engine.keep_capabilities;
            let keep = if keep_all {
                steer_xdp::privileges::permitted()?
            } else {
                Default::default()
            };
            match run_as {
                Some(user) => user.switch(&keep)?,
                None if !keep_all => steer_xdp::privileges::drop_all_but(&keep)?,
                None => {}
            }
            args.engine.privileges.apply_seccomp()
        },
    )?;
    let r = &relayed;
    let _ = writeln!(
        std::io::stdout(),
        "steer proxy (io kernel): flows {}, to backend {}, to clients {}, send errors {}",
        r.flows_multi.load(Ordering::Relaxed),
        r.to_backend.load(Ordering::Relaxed),
        r.to_client.load(Ordering::Relaxed),
        r.send_errors.load(Ordering::Relaxed),
    );
    if let Some(path) = &args.stats_json {
        let v = serde_json::json!({ "io": "kernel", "proxy": r.json() });
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")?;
    }
    Ok(())
}

/// Where a per-core runtime's flows come from: its CPU's listener, or (when
/// the engine's workers accept) the flows a worker hands it.
enum Incoming {
    Listener(FlowListener),
    Handed(mpsc::UnboundedReceiver<Flow>),
}

impl Incoming {
    async fn next(&mut self) -> Option<Flow> {
        match self {
            Incoming::Listener(l) => l.accept().await,
            Incoming::Handed(rx) => rx.recv().await,
        }
    }
}

/// The per-core runtimes' inboxes, by CPU (filled once the engine runs).
type PerCoreInboxes = Arc<Mutex<HashMap<CpuId, mpsc::UnboundedSender<Flow>>>>;

/// What every acceptor needs to start a flow's relay in the layout of the
/// moment.
#[derive(Clone)]
struct Relays {
    layout: Arc<AtomicU8>,
    relayed: Arc<Relayed>,
    /// The multi-thread runtime, built once the engine has started: its
    /// threads are then born without the capabilities the engine dropped.
    multi: Arc<OnceLock<tokio::runtime::Handle>>,
    per_core: PerCoreInboxes,
    backend: SocketAddr,
    idle: Duration,
    /// One permit per backend socket (set once the engine has started).
    permits: Arc<OnceLock<Arc<Semaphore>>>,
}

impl Relays {
    /// What a relay needs.
    fn relay(&self, flow: Flow) -> impl std::future::Future<Output = ()> + Send + 'static {
        let permits = self.permits.get().cloned();
        relay(
            flow,
            self.backend,
            self.idle,
            Arc::clone(&self.relayed),
            permits,
        )
    }

    /// Runs `flow`'s relay on the calling thread's `LocalSet`.
    fn run_here(&self, flow: Flow) {
        tokio::task::spawn_local(self.relay(flow));
    }

    /// Starts `flow`'s relay, accepted on `cpu`; `here` spawns on the
    /// calling thread's `LocalSet` (a per-core runtime or a worker).
    fn start(&self, cpu: CpuId, flow: Flow, here: Layout) {
        let relayed = Arc::clone(&self.relayed);
        let layout = Layout::from_u8(self.layout.load(Ordering::Relaxed));
        match layout {
            Layout::Multi => match self.multi.get() {
                Some(multi) => {
                    relayed.flows_multi.fetch_add(1, Ordering::Relaxed);
                    multi.spawn(self.relay(flow));
                }
                // Accepted in the microseconds between the engine's start
                // and the multi runtime's: relayed where it was accepted.
                None => {
                    match here {
                        Layout::Worker => &relayed.flows_worker,
                        _ => &relayed.flows_per_core,
                    }
                    .fetch_add(1, Ordering::Relaxed);
                    self.run_here(flow);
                }
            },
            l if l == here => {
                let counter = match l {
                    Layout::Worker => &relayed.flows_worker,
                    _ => &relayed.flows_per_core,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                self.run_here(flow);
            }
            Layout::PerCore => {
                let inbox = self
                    .per_core
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get(&cpu)
                    .cloned();
                match inbox.map(|i| i.send(flow)) {
                    Some(Ok(())) => {
                        relayed.flows_per_core.fetch_add(1, Ordering::Relaxed);
                    }
                    // No per-core runtime (stopping): the flow is closed.
                    _ => {
                        relayed.send_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            // Refused by the `runtime` command when the workers run no tasks.
            Layout::Worker => {
                relayed.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

pub fn run(args: &ProxyArgs) -> anyhow::Result<()> {
    if args.io == Io::Kernel {
        return run_kernel(args);
    }
    let stop = steer_xdp::shutdown::install()?;
    let on_workers = args.runtime == Layout::Worker;
    let relays = Relays {
        layout: Arc::new(AtomicU8::new(args.runtime as u8)),
        relayed: Arc::new(Relayed::default()),
        multi: Arc::default(),
        per_core: Arc::default(),
        backend: args.backend,
        idle: Duration::from_secs_f64(args.idle_timeout.max(0.001)),
        permits: Arc::default(),
    };
    let options = FlowOptions {
        budget: args.budget()?,
        max_starting: args.max_starting as usize,
        xdp_gate: args.xdp_gate.is_on(),
        ..FlowOptions::default()
    };
    let builder = args.engine.builder()?.own(Proto::Udp, args.port);
    let engine = if on_workers {
        // Each worker accepts the flows its CPU receives, on its own thread.
        let relays = relays.clone();
        builder.deliver_flows_on_workers(options, move |cpu, listener| {
            let relays = relays.clone();
            async move {
                while let Some(flow) = listener.accept().await {
                    relays.start(cpu, flow, Layout::Worker);
                }
            }
        })
    } else {
        builder.deliver_flows(FlowOptions {
            accept: AcceptMode::PerCpu,
            ..options
        })
    }
    .start()?;
    // Backend sockets: one per open flow, never more than the descriptors
    // left once the engine is up (less the engine's reserve).
    let limits = engine
        .flow_limits()
        .ok_or_else(|| anyhow::anyhow!("flow delivery is not on"))?;
    let host = HostResources::measure(false);
    let fds_left = host
        .nofile
        .saturating_sub(host.fds_open)
        .saturating_sub(RESERVED_FDS);
    let sockets = limits
        .max_flows
        .min(usize::try_from(fds_left).unwrap_or(usize::MAX))
        .max(1);
    let _ = relays.permits.set(Arc::new(Semaphore::new(sockets)));
    // The budget holds no more flows than there are backend sockets: a
    // full table then replaces flows (and closes the XDP gate) instead of
    // admitting flows that would find no socket.
    let limits = engine.limit_flows(sockets).unwrap_or(limits);
    // Every thread from here on starts without the capabilities the engine
    // dropped at start.
    let multi = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("proxy-multi")
        .build()?;
    let _ = relays.multi.set(multi.handle().clone());
    let done = Arc::new(AtomicBool::new(false));

    // A current_thread runtime pinned to each worker CPU (the engine's
    // worker CPUs, `--cpus`, not every online CPU): it accepts its CPU's
    // flows, or takes those a worker hands it.
    let cpus: Vec<CpuId> = engine.worker_states().into_iter().map(|(c, _)| c).collect();
    let mut per_core = Vec::new();
    for &cpu in &cpus {
        let incoming = if on_workers {
            let (tx, rx) = mpsc::unbounded_channel();
            relays
                .per_core
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(cpu, tx);
            Incoming::Handed(rx)
        } else {
            Incoming::Listener(
                engine
                    .listener_for(cpu)
                    .ok_or_else(|| anyhow::anyhow!("no listener for CPU {cpu}"))?,
            )
        };
        let relays = relays.clone();
        let pin = !args.engine.no_pin;
        per_core.push(spawn_local_runtime(
            format!("proxy-core{cpu}"),
            pin.then_some(cpu),
            move || async move {
                let mut incoming = incoming;
                while let Some(flow) = incoming.next().await {
                    match incoming {
                        Incoming::Listener(_) => relays.start(cpu, flow, Layout::PerCore),
                        // Counted by the worker that handed it over.
                        Incoming::Handed(_) => relays.run_here(flow),
                    }
                }
                Ok(())
            },
        )?);
    }
    // Set up: from here every thread runs under the allowlist.
    args.engine.privileges.apply_seccomp()?;
    println!(
        "steer proxy: ready on {} udp port {} -> {}, policy {}, runtime {:?}, max flows {} \
         ({} per worker, {} backend sockets), new flows per source {}/s",
        args.engine.interface,
        args.port,
        args.backend,
        args.engine.policy,
        args.runtime,
        limits.max_flows,
        limits.max_flows_per_worker,
        sockets,
        if limits.new_flows_per_source.is_finite() {
            format!("{:.0}", limits.new_flows_per_source)
        } else {
            "unlimited".into()
        },
    );
    crate::args::print_endpoints("proxy", &engine, &args.engine.interface);

    // Control lines on stdin.
    {
        let (layout, done) = (Arc::clone(&relays.layout), Arc::clone(&done));
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
                        Err(e) => eprintln!("steer proxy: {e}"),
                    },
                    ["runtime", r] => match Layout::from_str(r, true) {
                        Ok(Layout::Worker) if !on_workers => eprintln!(
                            "steer proxy: runtime worker: the workers run no tasks; start with \
                             --runtime worker"
                        ),
                        Ok(l) => {
                            layout.store(l as u8, Ordering::Relaxed);
                            println!("runtime {l:?}");
                        }
                        Err(e) => eprintln!("steer proxy: runtime: {e}"),
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
                        "steer proxy: commands: policy llc|always, runtime multi|per-core|worker, \
                         stats, quit"
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
        if let Err(e) = crate::args::check_workers(&engine, &args.engine) {
            engine.stop()?;
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let flow_stats = engine.flow_stats().unwrap_or_default();
    let report = engine.stop()?;
    // The per-core runtimes end with their listener, or their inbox.
    relays
        .per_core
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clear();
    for t in per_core {
        let _ = t.join();
    }
    multi.shutdown_timeout(Duration::from_secs(1));
    let r = &relays.relayed;
    // stdout may be gone (a closed pipe) by now: report without panicking.
    let _ = writeln!(
        std::io::stdout(),
        "steer proxy: flows {} (multi {}, per-core {}, worker {}), to backend {}, to clients {}, send errors {}, steering updates {}, desired writes {} (suppressed {})",
        flow_stats.accepted,
        r.flows_multi.load(Ordering::Relaxed),
        r.flows_per_core.load(Ordering::Relaxed),
        r.flows_worker.load(Ordering::Relaxed),
        r.to_backend.load(Ordering::Relaxed),
        r.to_client.load(Ordering::Relaxed),
        r.send_errors.load(Ordering::Relaxed),
        report.stats.steering_updates(),
        report.stats.desired.updates(),
        report.stats.desired.suppressed,
    );
    crate::args::print_trace("proxy", &report);
    if let Some(path) = &args.stats_json {
        let mut v = report.to_json_value();
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("proxy".into(), {
                let mut p = r.json();
                p["flows"] = flow_stats.accepted.into();
                p["accept_drops"] = flow_stats.accept_drops.into();
                p
            });
            m.insert(
                "flows".into(),
                serde_json::to_value(flow_stats).unwrap_or_default(),
            );
        }
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")?;
    }
    if !report.census_ok() {
        anyhow::bail!("frame accounting does not balance: {:?}", report.census);
    }
    Ok(())
}

thread_local! {
    /// Where a thread reads backend replies: one buffer per thread, not per
    /// flow (a flow that never hears back costs no 64 KiB).
    static REPLY_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0u8; 65536]);
}

/// How long a new flow waits for a backend socket permit (held by flows
/// evicted a moment ago whose tasks have not ended yet) before giving up.
const PERMIT_WAIT: Duration = Duration::from_millis(500);

/// Forwards one flow to the backend and its replies back, until the flow
/// is idle for `idle`, evicted, or the engine stops. Its backend socket
/// takes one of `permits` for its life.
async fn relay(
    mut flow: Flow,
    backend: SocketAddr,
    idle: Duration,
    relayed: Arc<Relayed>,
    permits: Option<Arc<Semaphore>>,
) {
    let _permit: Option<OwnedSemaphorePermit> = match permits {
        Some(p) => match tokio::time::timeout(PERMIT_WAIT, p.acquire_owned()).await {
            Ok(Ok(permit)) => Some(permit),
            _ => {
                flow.count_backend_error();
                relayed.send_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        },
        None => None,
    };
    let Ok(socket) = backend_socket(backend).await else {
        flow.count_backend_error();
        relayed.send_errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let writer = flow.writer();
    loop {
        tokio::select! {
            d = tokio::time::timeout(idle, flow.recv()) => match d {
                Ok(Some(d)) => relayed.count(socket.send(&d).await.is_ok(), &relayed.to_backend),
                // Idle, evicted, or the engine stopped: dropping the flow
                // closes it.
                Ok(None) | Err(_) => break,
            },
            ready = socket.readable() => {
                if ready.is_err() {
                    relayed.count(false, &relayed.to_client);
                    continue;
                }
                // Everything the backend has sent, through this thread's buffer.
                loop {
                    let got = REPLY_BUF.with(|buf| {
                        let mut buf = buf.borrow_mut();
                        socket
                            .try_recv(&mut buf)
                            .map(|n| writer.send(&buf[..n]).is_ok())
                    });
                    match got {
                        Ok(sent) => relayed.count(sent, &relayed.to_client),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            relayed.count(false, &relayed.to_client);
                            break;
                        }
                    }
                }
            },
        }
    }
}

/// Runs the future `task` makes on a new thread named `name` (pinned to
/// `cpu` when given; a failed pin is not an error) in a current-thread tokio
/// runtime and a `LocalSet`, so the future need not be `Send`; the thread
/// returns what it returns.
pub(crate) fn spawn_local_runtime<F, Fut>(
    name: String,
    cpu: Option<usize>,
    task: F,
) -> std::io::Result<std::thread::JoinHandle<anyhow::Result<()>>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + 'static,
{
    std::thread::Builder::new().name(name).spawn(move || {
        if let Some(cpu) = cpu {
            let _ = steer_topology::thread::pin_current(cpu);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        tokio::task::LocalSet::new().block_on(&rt, task())
    })
}
