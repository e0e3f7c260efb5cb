//! [`EngineBuilder::start`]: the start pipeline. Its steps run in this
//! order, each a function of its own:
//!
//! 1. [`check`]: settings that cannot work are refused before anything is
//!    touched;
//! 2. [`claim`]: privileges, the interface, its owner lock, the stats
//!    socket and the metrics listener (the errors that say what to do);
//! 3. [`open_port`]: the XDP program and the AF_XDP sockets;
//! 4. [`drop_privileges`]: before any thread starts, so every thread
//!    inherits what is left;
//! 5. [`build_tables`]: the shared tables, the spare pool, the counters,
//!    the trace and the application;
//! 6. [`build_workers`]: each worker's sleeper or task loop, its setup and
//!    its rx sources;
//! 7. [`run`]: the runtime, the publisher, the health and hotplug
//!    watchers;
//! 8. [`observe`]: the stats socket and `/metrics` served.
//!
//! Invariant: a step that fails leaves nothing behind: what the earlier
//! steps made is dropped with it (the lock released, the program detached,
//! the workers stopped), so a failed start can be retried at once.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::runtime::{RpsMode, RuntimeConfig, RuntimeError, RxSource, Setup};
use steer_topology::Topology;
use steer_xdp::frames::{lock, SharedSocket, SparePool, TxResources, UmemPool, XskSource};
use steer_xdp::owner_lock::InterfaceLock;
use steer_xdp::{QueueSocket, RawFrame, Replaced, XdpPort};
use tracing::{info, warn};

use super::app::{Application, EngineParts};
use super::builder::{AppBuilder, EngineBuilder};
use super::counters::EngineCounters;
use super::health::{Health, HealthWatcher};
use super::hotplug::HotplugWatcher;
use super::nic_check;
use super::privileges;
use super::publish::Publisher;
use super::setup::{BuiltHooks, EngineSetup};
use super::slow_path::SlowPath;
use super::steering::FlowSteering;
use super::{Engine, EngineError, Runtime};
use crate::observe::{
    bind_metrics, Controlled, Controls, Observer, Snapshot, StatsAccess, StatsEndpoint,
};
use crate::sleep::MioSleeper;
use crate::tasks::WorkerTasks;
use crate::trace::{TraceWriter, TracedSource};

impl EngineBuilder {
    /// Opens the port and starts the workers, in order: settings checked,
    /// the interface claimed (owner lock, stats socket, metrics listener),
    /// the port opened, privileges dropped, the shared tables and the
    /// application built, the workers built and started, the stats socket
    /// and metrics served. A step that fails leaves nothing behind.
    pub fn start(self) -> Result<Engine, EngineError> {
        let (mut b, build_app) = check(self)?;
        let host = Host::of(&mut b)?;
        let claim = claim(&b)?;
        let port = open_port(&mut b, &claim)?;
        // Bound before the privileges go (a port below 1024 needs them).
        let slow = Arc::new(open_slow_path(&b, &host));
        // Built while the privileges last (a hook may open files, as the
        // ntuple hook's record of its rules).
        let hooks = build_hooks(&b, &port);
        drop_privileges(&mut b, &port, &claim)?;
        let tables = build_tables(&mut b, &host, port, build_app, &slow)?;
        let workers = build_workers(&b, &host, &tables, &slow, hooks)?;
        let controls = Controls::new(tables.shared.clone(), b.hasher.clone(), host.cpus);
        let engine = run(b, host, tables, workers, slow)?;
        observe(engine, claim, controls)
    }
}

/// Step 1: refuses what cannot work, before anything is touched; hands
/// back the settings and the application's builder.
fn check(mut b: EngineBuilder) -> Result<(EngineBuilder, AppBuilder), EngineError> {
    let Some(build_app) = b.app.take() else {
        return Err(EngineError::Config(
            "no application: give a packet handler (EngineBuilder::handler) or flow \
             delivery (EngineBuilder::deliver_flows)"
                .into(),
        ));
    };
    if b.port.owned.is_empty() {
        return Err(EngineError::Config(
            "no owned traffic: name at least one protocol and port (EngineBuilder::own)".into(),
        ));
    }
    if steer_core::dispatch::FlowLimit::new(b.runtime.flow_limit_buckets).is_none() {
        return Err(RuntimeError::BadFlowLimit(b.runtime.flow_limit_buckets).into());
    }
    if let Some((path, 0)) = &b.trace {
        return Err(EngineError::Config(format!(
            "record_trace({}): max_events must be at least 1",
            path.display()
        )));
    }
    Ok((b, build_app))
}

/// The machine the engine runs on: its topology and the workers' CPUs.
struct Host {
    topology: Topology,
    layout: Arc<CpuLayout>,
    cpus: CpuSet,
    cpu_list: Vec<CpuId>,
}

impl Host {
    /// The topology given or the live one; the CPUs given or every online
    /// one (written into the runtime's settings).
    fn of(b: &mut EngineBuilder) -> Result<Self, EngineError> {
        let topology = match b.topology.take() {
            Some(t) => t,
            None => Topology::live()?,
        };
        let layout = topology.layout();
        let cpus = b.cpus.unwrap_or_else(|| topology.online_cpus());
        b.runtime.cpus = cpus;
        Ok(Self {
            layout,
            cpu_list: cpus.iter().collect(),
            cpus,
            topology,
        })
    }
}

/// What step 2 holds: the interface's owner lock (kept while the engine
/// runs), the stats socket and metrics listener, not yet served.
struct Claim {
    _owner_lock: Arc<InterfaceLock>,
    endpoint: Option<StatsEndpoint>,
    metrics: Option<std::net::TcpListener>,
    /// A dead engine's program or socket may be replaced.
    replace_stale: bool,
    stale_socket: bool,
}

/// Step 2: the checks that say what to do (privileges, the interface, the
/// receive hash), then one owner per interface, before the stats socket
/// and the program: while another steer process serves the interface this
/// fails naming it; taken fresh, whatever a dead run left is replaced.
fn claim(b: &EngineBuilder) -> Result<Claim, EngineError> {
    let interface = &b.port.interface;
    steer_xdp::check_privileges()?;
    steer_xdp::ifindex(interface)?;
    if b.use_rx_hash {
        check_rx_hash_offered(interface)?;
    }
    // The port shares the lock and holds it while its program is attached.
    let (owner_lock, lock_shared) = InterfaceLock::acquire_noting(interface)?;
    let access = match &b.stats_group {
        Some(name) => StatsAccess::group(name)?,
        None => StatsAccess::Owner,
    };
    let endpoint = match &b.stats_dir {
        Some(dir) => Some(StatsEndpoint::claim_for(dir, interface, access)?),
        None => None,
    };
    // A socket that no longer answers: whatever it left is nobody's.
    let stale_socket = endpoint.as_ref().is_some_and(StatsEndpoint::replaced_stale);
    let metrics = match b.metrics {
        Some(addr) => {
            Some(bind_metrics(addr).map_err(|source| EngineError::Metrics { addr, source })?)
        }
        None => None,
    };
    Ok(Claim {
        _owner_lock: owner_lock,
        endpoint,
        metrics,
        replace_stale: !lock_shared || stale_socket,
        stale_socket,
    })
}

/// Step 3: the XDP program and the sockets of every rx queue.
fn open_port(b: &mut EngineBuilder, claim: &Claim) -> Result<XdpPort, EngineError> {
    let mut config = b.port.clone();
    if let Some(usecs) = b.prefer_busy_poll {
        let budget = u32::try_from(b.runtime.batch).unwrap_or(u32::MAX);
        config = config.busy_poll(usecs, budget);
    }
    if claim.replace_stale {
        config = config.replace_stale(true);
    }
    let interface = config.interface.clone();
    let mut port = XdpPort::open(config)?;
    if b.use_rx_hash && !port.program().dev_bound() {
        return Err(EngineError::Config(format!(
            "receive hash (use_rx_hash, --rx-hash): the XDP program on {interface} could not \
             be bound to the device (generic XDP mode gives no receive hash): attach in \
             native mode, or turn the receive hash off"
        )));
    }
    log_takeover(&interface, claim.stale_socket, port.replaced_program());
    Ok(port)
}

/// Step 4: another user, or fewer capabilities, before the engine starts
/// any thread: they inherit the rest.
/// Step 3, after the port: the slow path's kernel sockets on the owned
/// UDP ports (fragmented datagrams, reassembled by the kernel), one inbox
/// per worker.
fn open_slow_path(b: &EngineBuilder, host: &Host) -> SlowPath {
    let mut ports: Vec<u16> = b
        .port
        .owned
        .iter()
        .filter(|(proto, _)| *proto == steer_xdp::Proto::Udp)
        .map(|&(_, port)| port)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    SlowPath::open(&ports, &b.port.interface, &host.cpu_list)
}

/// The MTU of `interface` (sysfs), 0 when it cannot be read.
fn interface_mtu(interface: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{interface}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Step 3, after the port: each rx queue's steering hook, by queue.
fn build_hooks(b: &EngineBuilder, port: &XdpPort) -> BuiltHooks {
    let hooks = match &b.hooks {
        Some(factory) => (0..port.sockets().len())
            .map(|rxq| Some(factory(rxq as u32)))
            .collect(),
        None => Vec::new(),
    };
    Mutex::new(hooks)
}

fn drop_privileges(
    b: &mut EngineBuilder,
    port: &XdpPort,
    claim: &Claim,
) -> Result<(), EngineError> {
    let interface = &b.port.interface;
    let keep = privileges::needed_at_run_time(
        port.attach_kind(),
        port.program_dispatched(),
        b.hooks.is_some(),
    );
    let failed = |e: &dyn std::fmt::Display| EngineError::Privileges(e.to_string());
    if let Some(user) = b.run_as.take() {
        if let Some(endpoint) = &claim.endpoint {
            endpoint.hand_to(user.uid, user.gid)?;
        }
        let keep = if b.drop_privileges {
            keep
        } else {
            steer_xdp::privileges::permitted().map_err(|e| failed(&e))?
        };
        user.switch(&keep).map_err(|e| failed(&e))?;
        info!(interface = %interface, uid = user.uid, gid = user.gid, kept = ?keep, "running as another user");
    } else if b.drop_privileges {
        steer_xdp::privileges::drop_all_but(&keep).map_err(|e| failed(&e))?;
        info!(interface = %interface, kept = ?keep, "capabilities dropped");
    }
    Ok(())
}

/// What step 5 makes: the port and its sockets, the tables and pools the
/// workers share, the trace and the application.
struct Tables {
    port: XdpPort,
    sockets: Vec<SharedSocket>,
    fds: Vec<i32>,
    total_frames: usize,
    spare: Arc<SparePool>,
    umem: steer_xdp::UmemView,
    counters: Arc<EngineCounters>,
    shared: steer_core::dispatch::Shared,
    trace: Option<TraceWriter>,
    sink: Option<Arc<crate::trace::TraceSink>>,
    app: Arc<dyn Application>,
    app_any: Arc<dyn std::any::Any + Send + Sync>,
}

/// Step 5: the sockets shared, the spare pool and counters, the shared
/// tables, the trace, and the application built on them.
fn build_tables(
    b: &mut EngineBuilder,
    host: &Host,
    mut port: XdpPort,
    build_app: AppBuilder,
    slow: &SlowPath,
) -> Result<Tables, EngineError> {
    let total_frames = port.total_frames() as usize;
    let sockets: Vec<QueueSocket> = port.take_sockets();
    b.runtime.rps = b.rps.unwrap_or(if sockets.len() >= host.cpus.len() {
        RpsMode::Local
    } else {
        RpsMode::Spread
    });
    let umem = sockets[0].umem();
    let fds: Vec<i32> = sockets.iter().map(|s| s.as_raw_fd()).collect();
    let sockets: Vec<SharedSocket> = sockets
        .into_iter()
        .map(|s| Arc::new(Mutex::new(s)))
        .collect();
    let reserve = total_frames.checked_div(b.reply_reserve_div).unwrap_or(0);
    let spare = Arc::new(SparePool::new(total_frames, reserve));
    let counters = Arc::new(EngineCounters::new(host.layout.nr_cpus()));
    let shared = b.runtime.shared(Arc::clone(&host.layout))?;
    let trace = match &b.trace {
        Some((path, max)) => Some(
            TraceWriter::create(
                path,
                *max,
                &trace_header(&host.topology, &b.runtime, sockets.len()),
                CpuSet::first(host.layout.nr_cpus()),
            )
            .map_err(|e| {
                EngineError::Config(format!("cannot write the trace to {}: {e}", path.display()))
            })?,
        ),
        None => None,
    };
    let sink = trace.as_ref().map(TraceWriter::sink);
    let gate = match port.program().admission_gate() {
        Ok(gate) => Some(gate),
        Err(e) => {
            warn!(error = %e, "no XDP new-flow gate: a full flow budget refuses new flows in the workers");
            None
        }
    };
    let (app, app_any) = build_app(&EngineParts {
        shared: shared.clone(),
        cpus: host.cpu_list.clone(),
        hasher: b.hasher.clone(),
        tx: TxResources {
            sockets: sockets.clone(),
            spare: Arc::clone(&spare),
            umem: umem.clone(),
            multi_buffer: port.modes().multi_buffer,
        },
        trace: sink.clone(),
        kernel: slow.sender(),
        mtu: interface_mtu(&b.port.interface),
        gate,
    });
    Ok(Tables {
        port,
        sockets,
        fds,
        total_frames,
        spare,
        umem,
        counters,
        shared,
        trace,
        sink,
        app,
        app_any,
    })
}

/// What step 6 makes: the workers' setup and their rx sources.
struct Workers {
    setup: Arc<EngineSetup>,
    sources: Vec<Box<dyn RxSource<RawFrame>>>,
    stopping: Arc<AtomicBool>,
    start_warnings: Vec<String>,
}

/// Step 6: each worker sleeps on its doorbell and on the sockets it polls,
/// in a mio poll or in its own tokio runtime when it runs tasks; its setup
/// (pool, tx sockets, steering, hooks) and each rx queue's source; the
/// NIC checked against the queues opened.
fn build_workers(
    b: &EngineBuilder,
    host: &Host,
    t: &Tables,
    slow: &Arc<SlowPath>,
    built_hooks: BuiltHooks,
) -> Result<Workers, EngineError> {
    let n = host.cpu_list.len();
    let mut sleepers = Vec::with_capacity(n);
    let mut tasks = Vec::new();
    for (j, &cpu) in host.cpu_list.iter().enumerate() {
        if t.app.tasks_on_workers() {
            // Its event loop watches duplicates of the sockets' fds.
            let own = t
                .sockets
                .iter()
                .enumerate()
                .filter(|(i, _)| i % n == j)
                .map(|(_, s)| lock(s).as_fd().try_clone_to_owned())
                .collect::<std::io::Result<Vec<_>>>()?;
            tasks.push((cpu, WorkerTasks::new(own)?));
            continue;
        }
        let sleeper = Arc::new(MioSleeper::new()?);
        for (i, &fd) in t.fds.iter().enumerate() {
            if i % n == j {
                sleeper.watch_readable(fd, i)?;
            }
        }
        sleepers.push((cpu, sleeper));
    }
    let stopping = Arc::new(AtomicBool::new(false));
    let steering = Arc::new(FlowSteering::new(
        t.shared.clone(),
        b.hasher.clone(),
        host.cpus,
        t.sink.clone(),
    ));
    let ring_size = b.port.ring_size as usize;
    let setup = Arc::new(EngineSetup {
        topology: host.topology.clone(),
        pin: b.pin,
        slice: b.worker_slice,
        hasher: b.hasher.clone(),
        use_rx_hash: b.use_rx_hash,
        pool: UmemPool::new(t.umem.clone(), Arc::clone(&t.spare), b.use_rx_hash),
        tx_sockets: t.sockets.clone(),
        zero_copy: t.port.modes().bind == steer_xdp::BindMode::ZeroCopy,
        cpus: host.cpu_list.clone(),
        ring_size,
        app: Arc::clone(&t.app),
        counters: Arc::clone(&t.counters),
        sleepers,
        tasks: Mutex::new(tasks),
        stopping: Arc::clone(&stopping),
        steering,
        hooks: b.hooks.clone(),
        built_hooks,
        slow: Arc::clone(slow),
    });
    let sources = t
        .sockets
        .iter()
        .enumerate()
        .map(|(rxq, s)| {
            let source = XskSource::new(Arc::clone(s), Arc::clone(&t.spare), ring_size);
            match &t.sink {
                // Recording: the same classifier as the queue's dispatcher.
                Some(sink) => Box::new(TracedSource::new(
                    source,
                    setup.pool.clone(),
                    setup.classifier(rxq as u32),
                    rxq as u32,
                    Arc::clone(sink),
                )) as Box<dyn RxSource<RawFrame>>,
                None => Box::new(source) as Box<dyn RxSource<RawFrame>>,
            }
        })
        .collect();
    // Each opened rx queue and the CPU whose worker dispatches it.
    let opened: Vec<(u32, CpuId)> = t
        .sockets
        .iter()
        .enumerate()
        .map(|(i, s)| (lock(s).queue(), host.cpu_list[i % n]))
        .collect();
    let interface = &b.port.interface;
    let start_warnings = nic_check::check(interface, &nic_check::gather(interface), &opened);
    for w in &start_warnings {
        warn!("{w}");
    }
    Ok(Workers {
        setup,
        sources,
        stopping,
        start_warnings,
    })
}

/// Step 7: the runtime started on the workers, the publisher of its
/// numbers, and the health and hotplug watchers; the engine assembled.
/// The workers' runtime settings: the builder's, except that the default
/// coalescing is off for an application whose tasks run on the workers
/// (its naps are on a timer, and the tasks' own I/O would wait them out)
/// unless the builder chose it.
fn worker_runtime(mut cfg: RuntimeConfig, tasks_on_workers: bool, chosen: bool) -> RuntimeConfig {
    if tasks_on_workers && !chosen {
        cfg.coalesce = None;
    }
    cfg
}

fn run(
    b: EngineBuilder,
    host: Host,
    mut t: Tables,
    w: Workers,
    slow: Arc<SlowPath>,
) -> Result<Engine, EngineError> {
    let interface = b.port.interface.clone();
    let switches = Arc::clone(&t.shared.switches);
    let cfg = worker_runtime(b.runtime, t.app.tasks_on_workers(), b.coalesce_chosen);
    let runtime = Runtime::start(cfg, t.shared.clone(), w.setup, w.sources)?;
    slow.start_reader(b.hasher.clone(), t.shared.clone(), |cpu| {
        runtime.doorbell(cpu)
    })?;
    let workers = runtime.worker_states_handle();
    let publisher = Arc::new(Publisher {
        interface: interface.clone(),
        cpus: host.cpus,
        shared: t.shared,
        counters: Arc::clone(&t.counters),
        sockets: t.sockets.clone(),
        total_frames: t.total_frames as u32,
        modes: t.port.modes(),
        started: Instant::now(),
        app: Arc::clone(&t.app),
        workers: workers.clone(),
        slow: Arc::clone(&slow),
    });
    let health_state = Arc::new(Health::default());
    let switch = match t.port.program().owned_action_switch() {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(error = %e, "no way to fail open if every worker dies");
            None
        }
    };
    let release = {
        let slow = Arc::clone(&slow);
        Box::new(move || slow.release())
    };
    let health = HealthWatcher::start(
        interface.clone(),
        workers,
        switch,
        b.on_worker_loss,
        Arc::clone(&health_state),
        release,
    )?;
    let hotplug = match b.hotplug_watch {
        Some(every) => HotplugWatcher::start(&host.topology, every, switches)?,
        None => None,
    };
    info!(
        interface = %interface,
        modes = ?t.port.modes(),
        queues = t.sockets.len(),
        cpus = %host.cpus,
        "steer engine running"
    );
    Ok(Engine {
        runtime: Some(runtime),
        app: t.app,
        app_any: t.app_any,
        port: t.port,
        sockets: t.sockets,
        spare: t.spare,
        counters: t.counters,
        topology: host.topology,
        cpus: host.cpus,
        started: Instant::now(),
        trace: t.trace,
        hotplug,
        health: Some(health),
        health_state,
        start_warnings: w.start_warnings,
        publisher: Some(publisher),
        observer: None,
        metrics_addr: None,
        stats_path: None,
        stopping: w.stopping,
        slow,
    })
}

/// Step 8: the stats socket and `/metrics` served from the publisher's
/// snapshots, with `steer ctl`'s live changes (`controls`, on the same
/// tables and switches).
fn observe(mut engine: Engine, claim: Claim, controls: Controls) -> Result<Engine, EngineError> {
    let Claim {
        _owner_lock,
        endpoint,
        metrics,
        ..
    } = claim;
    engine.metrics_addr = metrics.as_ref().and_then(|m| m.local_addr().ok());
    engine.stats_path = endpoint.as_ref().map(|e| e.path().to_path_buf());
    if endpoint.is_some() || metrics.is_some() {
        let publisher = engine.publisher.clone().expect("set by run");
        let snapshot: Snapshot = Arc::new(Controlled {
            snapshot: move || publisher.snapshot(),
            controls,
        });
        // On failure the engine is dropped, which stops it.
        engine.observer = Some(Observer::start(endpoint, metrics, snapshot)?);
    }
    Ok(engine)
}
/// Refuses [`EngineBuilder::use_rx_hash`] on a device whose driver gives
/// XDP programs no receive hash (the kernel's netdev netlink family says).
fn check_rx_hash_offered(interface: &str) -> Result<(), EngineError> {
    match steer_xdp::nic::xdp_device_info(interface) {
        Ok(info) if info.rx_hash() => Ok(()),
        Ok(_) => Err(EngineError::Config(format!(
            "receive hash (use_rx_hash, --rx-hash): {interface}'s driver gives XDP programs no receive hash (no rx-hash \
             kfunc): turn the receive hash off and let steer hash flows itself"
        ))),
        Err(steer_xdp::XdpError::UnknownInterface { name }) => {
            Err(steer_xdp::XdpError::UnknownInterface { name }.into())
        }
        Err(e) => Err(EngineError::Config(format!(
            "receive hash (use_rx_hash, --rx-hash): cannot tell whether {interface}'s driver gives XDP programs its \
             receive hash ({e}); it needs Linux >= 6.3: turn the receive hash off"
        ))),
    }
}

/// Says in one line that this engine took over from one that is gone, and
/// what it replaced.
fn log_takeover(interface: &str, stale_socket: bool, program: Option<Replaced>) {
    let who = match program.and_then(|p| p.owner) {
        Some(o) => format!("the steer engine (pid {}) that served it is gone", o.pid),
        None => "the steer engine that served it is gone".to_string(),
    };
    let what = match (stale_socket, program) {
        (true, Some(p)) => format!(
            "replaced its stats socket and its XDP program (id {})",
            p.id
        ),
        (false, Some(p)) => format!("replaced its XDP program (id {})", p.id),
        (true, None) => "replaced its stats socket (its XDP program went with it)".to_string(),
        (false, None) => return,
    };
    warn!(interface, "took over {interface}: {who}; {what}");
}

/// The trace's header: the machine (its LLCs, offline CPUs) and the
/// engine's settings, so a replay reproduces this engine by default.
fn trace_header(topology: &Topology, cfg: &RuntimeConfig, queues: usize) -> String {
    let llcs: Vec<String> = topology
        .llcs()
        .iter()
        .filter(|s| !s.is_empty())
        .map(ToString::to_string)
        .collect();
    let mut h = format!(
        "# steer trace, recorded by a running engine ({} topology); replay it with\n\
         # `steer replay --policy both --table FILE`\n\
         llcs {}\n",
        topology.source().name(),
        llcs.join(" ")
    );
    let layout = topology.layout();
    for cpu in (0..layout.nr_cpus()).filter(|&c| layout.llc_of(c).is_some() && !layout.is_online(c))
    {
        h.push_str(&format!("off {cpu}\n"));
    }
    h.push_str(&format!(
        "table {}\nengine workers={} queues={queues} rps={} fast_path={} rx_table={} ring={} idle_ms={}\n",
        cfg.desired_entries,
        cfg.cpus,
        match cfg.rps {
            RpsMode::Local => "local",
            RpsMode::Spread => "spread",
        },
        if cfg.fast_path { "on" } else { "off" },
        cfg.rx_table_entries,
        cfg.ring_capacity,
        cfg.flow_idle_ms,
    ));
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn tasks_on_the_workers_turn_the_default_coalescing_off_not_a_chosen_one() {
        use steer_core::runtime::{Coalesce, RuntimeConfig};
        let on = RuntimeConfig {
            coalesce: Some(Coalesce::default()),
            ..RuntimeConfig::default()
        };
        assert!(super::worker_runtime(on.clone(), false, false)
            .coalesce
            .is_some());
        assert!(super::worker_runtime(on.clone(), true, false)
            .coalesce
            .is_none());
        assert!(super::worker_runtime(on, true, true).coalesce.is_some());
    }

    use super::*;
    use crate::engine::{PacketContext, Verdict};
    use steer_xdp::Proto;

    fn dropper(b: EngineBuilder) -> EngineBuilder {
        b.handler(|_| Box::new(|_: &mut [u8], _: &PacketContext| Verdict::Drop))
    }

    fn refused(b: EngineBuilder) -> String {
        match check(b) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn check_refuses_what_cannot_work_and_touches_nothing() {
        let e = refused(Engine::builder("nonexistent0").own(Proto::Udp, 7));
        assert!(e.contains("no application"), "{e}");
        let e = refused(dropper(Engine::builder("nonexistent0")));
        assert!(e.contains("no owned traffic"), "{e}");
        let e = refused(dropper(Engine::builder("nonexistent0").own(Proto::Udp, 7)).flow_limit(3));
        assert!(e.contains('3'), "{e}");
        let b = dropper(Engine::builder("nonexistent0").own(Proto::Udp, 7))
            .record_trace("/nonexistent/trace", 0);
        let e = refused(b);
        assert!(e.contains("max_events must be at least 1"), "{e}");
        // What passes hands the application's builder back, taken out.
        let (b, _app) = check(dropper(Engine::builder("nonexistent0").own(Proto::Udp, 7))).unwrap();
        assert!(b.app.is_none());
    }

    #[test]
    fn the_host_is_the_model_given_and_its_online_cpus() {
        let model = Topology::synthetic("pack:1 l3:2 core:2 pu:1").unwrap();
        let mut b = Engine::builder("nonexistent0").topology(model);
        let host = Host::of(&mut b).unwrap();
        assert_eq!(host.cpu_list, vec![0, 1, 2, 3]);
        assert_eq!(
            b.runtime.cpus, host.cpus,
            "the runtime runs on the host's CPUs"
        );
        let model = Topology::synthetic("pack:1 l3:2 core:2 pu:1").unwrap();
        let mut b = Engine::builder("nonexistent0")
            .topology(model)
            .cpus(CpuSet::from_iter([1, 3]));
        assert_eq!(Host::of(&mut b).unwrap().cpu_list, vec![1, 3]);
    }

    #[test]
    fn claim_names_an_unknown_interface_before_taking_anything() {
        let b = dropper(Engine::builder("nonexistent0").own(Proto::Udp, 7));
        let e = match claim(&b) {
            Ok(_) => panic!("claimed"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("nonexistent0"), "{e}");
    }
}
