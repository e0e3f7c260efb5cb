//! [`EngineBuilder`]: the engine's settings. What `start` does with them is
//! the start pipeline's (`engine::start`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use steer_core::balance::BalanceConfig;
use steer_core::cpu::{CpuId, CpuSet};
use steer_core::flow::AnyHasher;
use steer_core::hook::SteerHook;
use steer_core::policy::Policy;
use steer_core::runtime::{RestartLimit, RpsMode, RuntimeConfig};
use steer_topology::Topology;
use steer_xdp::privileges::RunAs;
use steer_xdp::{BindMode, PortConfig, Proto, XdpAttach, XdpMode};
use tracing::warn;

use super::app::{Application, EngineParts, FactoryApp};
use super::health::WorkerLoss;
use super::setup::HookFactory;
use super::{PacketHandler, DEFAULT_HOTPLUG_WATCH, DEFAULT_WORKER_SLICE};
use crate::observe::DEFAULT_RUN_DIR;

/// Builds the application layer from the engine's parts; returns it as
/// the engine runs it and as the owner may look it up again
/// ([`Engine::application`](super::Engine::application)).
pub(super) type AppBuilder = Box<
    dyn FnOnce(&EngineParts) -> (Arc<dyn Application>, Arc<dyn std::any::Any + Send + Sync>) + Send,
>;

/// Settings of an [`Engine`](super::Engine); see [`Engine::builder`](super::Engine::builder).
pub struct EngineBuilder {
    pub(super) port: PortConfig,
    pub(super) runtime: RuntimeConfig,
    /// [`coalesce`](Self::coalesce) was called: the choice stands even for
    /// an application whose tasks run on the workers (whose default is no
    /// coalescing).
    pub(super) coalesce_chosen: bool,
    /// `SO_BUSY_POLL` microseconds for preferred busy polling, if on.
    pub(super) prefer_busy_poll: Option<u32>,
    pub(super) cpus: Option<CpuSet>,
    pub(super) topology: Option<Topology>,
    pub(super) pin: bool,
    pub(super) use_rx_hash: bool,
    pub(super) hasher: AnyHasher,
    pub(super) app: Option<AppBuilder>,
    /// One in this many UMEM frames is kept back from receive for replies
    /// the application sends from its own threads (0: none).
    pub(crate) reply_reserve_div: usize,
    pub(super) rps: Option<RpsMode>,
    pub(super) worker_slice: Option<Duration>,
    pub(super) hotplug_watch: Option<Duration>,
    pub(super) on_worker_loss: WorkerLoss,
    /// Record a replayable trace here, at most this many events.
    pub(super) trace: Option<(PathBuf, u64)>,
    /// The directory of the stats socket (`None`: no socket).
    pub(super) stats_dir: Option<PathBuf>,
    /// The group that may read the stats socket besides root.
    pub(super) stats_group: Option<String>,
    /// Serve Prometheus metrics here.
    pub(super) metrics: Option<SocketAddr>,
    /// Drop the capabilities not needed at run time once set up.
    pub(super) drop_privileges: bool,
    /// Run as this user and group once set up.
    pub(super) run_as: Option<RunAs>,
    /// Builds each rx queue's steering hook (default: none).
    pub(super) hooks: Option<HookFactory>,
}

impl std::fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("port", &self.port)
            .field("runtime", &self.runtime)
            .field("cpus", &self.cpus)
            .field("pin", &self.pin)
            .finish_non_exhaustive()
    }
}

impl EngineBuilder {
    pub(super) fn new(interface: &str) -> Self {
        Self {
            port: PortConfig::new(interface),
            runtime: RuntimeConfig {
                // Flows sharing a desired-table entry overwrite each other's
                // CPU under any policy: size it well above the flow count
                // (the kernel's rps_sock_flow_entries is usually 32768).
                desired_entries: 65536,
                // Coalescing while packets come close together, and no
                // spinning before a nap or sleep: on a virtual machine a
                // wake-up per packet costs more than handling it (see
                // `coalesce`).
                coalesce: Some(steer_core::runtime::Coalesce::default()),
                idle_spins: 0,
                ..RuntimeConfig::default()
            },
            coalesce_chosen: false,
            prefer_busy_poll: None,
            cpus: None,
            topology: None,
            pin: true,
            use_rx_hash: false,
            hasher: AnyHasher::default(),
            app: None,
            reply_reserve_div: 0,
            rps: None,
            worker_slice: Some(DEFAULT_WORKER_SLICE),
            hotplug_watch: Some(DEFAULT_HOTPLUG_WATCH),
            on_worker_loss: WorkerLoss::FailOpen,
            trace: None,
            stats_dir: Some(PathBuf::from(DEFAULT_RUN_DIR)),
            stats_group: None,
            metrics: None,
            drop_privileges: false,
            run_as: None,
            hooks: None,
        }
    }

    /// Redirects `proto` traffic to `port` to steer (repeatable); everything
    /// else goes to the kernel.
    pub fn own(mut self, proto: Proto, port: u16) -> Self {
        self.port = self.port.own(proto, port);
        self
    }

    /// The rx queues to open (default: all of the interface's).
    pub fn queues(mut self, queues: impl IntoIterator<Item = u32>) -> Self {
        self.port = self.port.queues(queues);
        self
    }

    /// The CPUs to run workers on (default: every online CPU).
    pub fn cpus(mut self, cpus: CpuSet) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// The topology the LLC rule uses (default: the live machine). With a
    /// model (synthetic, XML) the workers still run on this machine,
    /// pinned to the CPUs of the same numbers (one this machine lacks runs
    /// unpinned, with a warning).
    pub fn topology(mut self, topology: Topology) -> Self {
        self.topology = Some(topology);
        self
    }

    /// Pin each worker to its CPU (default on with the live topology).
    pub fn pin_workers(mut self, on: bool) -> Self {
        self.pin = on;
        self
    }

    /// The desired-table update policy at start (switchable at run time).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.runtime.policy = policy;
        self
    }

    /// The same-CPU fast path at start (switchable at run time).
    pub fn fast_path(mut self, on: bool) -> Self {
        self.runtime.fast_path = on;
        self
    }

    /// The load balancer at start (default off; switchable at run time with
    /// [`Engine::set_balance`](super::Engine::set_balance)): off the hot path it moves flows nobody
    /// claimed (no pin, no recorded reader: the flows of a packet handler)
    /// off overloaded workers by measured busy time, through the same
    /// no-reordering rule as every move. See `docs/balancer.md`.
    ///
    /// ```no_run
    /// use steer_engine::engine::{Engine, Verdict};
    /// let engine = Engine::builder("eth1")
    ///     .own(steer_xdp::Proto::Udp, 7)
    ///     .balance(true)
    ///     .handler(|_cpu| Box::new(|p: &mut [u8], _: &_| Verdict::Transmit(p.len())))
    ///     .start()?;
    /// println!("{:?}", engine.stats().balance);
    /// # Ok::<(), steer_engine::engine::EngineError>(())
    /// ```
    pub fn balance(mut self, on: bool) -> Self {
        self.runtime.balance = on;
        self
    }

    /// The load balancer's settings and the time between its rounds
    /// (default: [`BalanceConfig::default`], 5 ms).
    pub fn balance_config(mut self, config: BalanceConfig, interval: Duration) -> Self {
        self.runtime.balance_config = config;
        self.runtime.balance_interval = interval;
        self
    }

    /// Where flows without a recorded or pinned CPU run (default: `Local`
    /// when there are at least as many rx queues as worker CPUs, so a flow
    /// stays on its rx queue's CPU; `Spread` by flow hash otherwise).
    pub fn rps(mut self, mode: RpsMode) -> Self {
        self.rps = Some(mode);
        self
    }

    /// The scheduling slice each worker thread asks for (default
    /// [`DEFAULT_WORKER_SLICE`]; `None`: the kernel's default, 1.4 ms on a
    /// 2-CPU machine). On Linux >= 6.12 a short slice lets a worker woken
    /// by packets preempt the task running on its CPU instead of waiting
    /// for that task's slice to end, which is what keeps latency low when
    /// workers share CPUs with other busy threads; it does not give the
    /// worker more CPU time. The kernel clamps it to 100 us .. 100 ms, and
    /// older kernels ignore it. Threads under a real-time policy are left
    /// alone.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let engine = steer_engine::engine::Engine::builder("eth1")
    ///     .worker_slice(Some(Duration::from_micros(200)))
    ///     .start()?;
    /// # Ok::<(), steer_engine::engine::EngineError>(())
    /// ```
    pub fn worker_slice(mut self, slice: Option<Duration>) -> Self {
        self.worker_slice = slice;
        self
    }

    /// Turns the per-CPU flow limit on (the kernel's `flow_limit`): when a
    /// worker's ring from a dispatcher is more than half full, a flow that
    /// sent more than half of the recent packets to it is an elephant and
    /// its packets are dropped there, counted as `flow_limit_drops`, so the
    /// other flows sharing the worker keep their place in the ring.
    /// `buckets` is the table of flow counters per target CPU (the
    /// kernel's `net.core.flow_limit_table_len`, 4096 by default there): a
    /// power of two; 0 is refused at start. Switch it at run time with
    /// [`Engine::set_flow_limit`](super::Engine::set_flow_limit). The limit acts only with rings of 256
    /// slots or more (an elephant is recognised after 65 of its packets
    /// above half full).
    ///
    /// ```no_run
    /// let engine = steer_engine::engine::Engine::builder("eth1")
    ///     .own(steer_xdp::Proto::Udp, 53)
    ///     .flow_limit(4096)
    ///     .handler(|_cpu| Box::new(|_p: &mut [u8], _: &steer_engine::engine::PacketContext| {
    ///         steer_engine::engine::Verdict::Consume
    ///     }))
    ///     .start()?;
    /// engine.set_flow_limit(false); // and back on with `true`
    /// # Ok::<(), steer_engine::engine::EngineError>(())
    /// ```
    #[doc(alias = "flow_limit_table_len")]
    pub fn flow_limit(mut self, buckets: usize) -> Self {
        self.runtime.flow_limit = true;
        self.runtime.flow_limit_buckets = buckets;
        self
    }

    /// How often the engine re-reads which CPUs are online, to follow CPU
    /// hotplug (default [`DEFAULT_HOTPLUG_WATCH`]; `None`: not at all). One
    /// small file read per period on a thread of its own: a CPU going
    /// offline is passed over by every dispatcher (its flows move, in
    /// order, to CPUs with a worker) and by the LLC rule; the worker on a
    /// CPU coming back pins itself there again. The file is
    /// `sys/devices/system/cpu/online` under the topology's root: `/` for
    /// the live machine, another tree with
    /// [`Topology::from_sysfs`](steer_topology::Topology::from_sysfs) (tests);
    /// model topologies are not watched.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let engine = steer_engine::engine::Engine::builder("eth1")
    ///     .own(steer_xdp::Proto::Udp, 53)
    ///     .hotplug_watch(Some(Duration::from_millis(20)))
    ///     .handler(|_cpu| Box::new(|_p: &mut [u8], _: &steer_engine::engine::PacketContext| {
    ///         steer_engine::engine::Verdict::Consume
    ///     }))
    ///     .start()?;
    /// # Ok::<(), steer_engine::engine::EngineError>(())
    /// ```
    pub fn hotplug_watch(mut self, every: Option<Duration>) -> Self {
        self.hotplug_watch = every;
        self
    }

    /// How often a worker whose handler panicked is restarted in place
    /// (default: 5 times a minute; [`RestartLimit::NEVER`] gives a worker
    /// up at its first panic). A restart loses only the packet the handler
    /// panicked on; past the limit the worker is given up and its flows
    /// move to the others (then [`EngineBuilder::on_worker_loss`] applies
    /// when none is left).
    ///
    /// ```no_run
    /// use steer_core::runtime::RestartLimit;
    /// use steer_engine::engine::Engine;
    /// let b = Engine::builder("eth1").worker_restarts(RestartLimit::per_minute(10));
    /// # drop(b);
    /// ```
    pub fn worker_restarts(mut self, limit: RestartLimit) -> Self {
        self.runtime.worker_restarts = limit;
        self
    }

    /// What to do when no worker is left to serve (every handler
    /// panicked past its restart limit): fail open (the default: owned traffic goes to the
    /// kernel) or fail closed ([`Engine::workers_lost`](super::Engine::workers_lost) turns true and the
    /// caller stops).
    ///
    /// ```no_run
    /// use steer_engine::engine::{Engine, WorkerLoss};
    /// let b = Engine::builder("eth1").on_worker_loss(WorkerLoss::FailClosed);
    /// # drop(b);
    /// ```
    pub fn on_worker_loss(mut self, what: WorkerLoss) -> Self {
        self.on_worker_loss = what;
        self
    }

    /// Busy-poll (never sleep) instead of sleeping on doorbells and sockets.
    pub fn busy_poll(mut self, on: bool) -> Self {
        self.runtime.busy_poll = on;
        self
    }

    /// Empty rounds a worker spins before it sleeps (more: fewer wake-ups
    /// under bursty load, more CPU burnt while idle).
    pub fn idle_spins(mut self, rounds: u32) -> Self {
        self.runtime.idle_spins = rounds;
        self
    }

    /// Adaptive polling before sleep
    /// ([`AdaptiveSpin`](steer_core::runtime::AdaptiveSpin), off by
    /// default): after its last work a worker keeps polling for a window
    /// that grows after short idle spells and shrinks after long ones (the
    /// guest haltpoll governor's rule), within a CPU budget. Fewer
    /// wake-ups, each of which costs the sender and the halted vCPU, for
    /// polling time. `None`: `idle_spins` empty rounds, then sleep.
    ///
    /// ```no_run
    /// use steer_core::runtime::AdaptiveSpin;
    /// let builder = steer_engine::engine::Engine::builder("veth0")
    ///     .adaptive(Some(AdaptiveSpin::default()));
    /// ```
    pub fn adaptive(mut self, spin: Option<steer_core::runtime::AdaptiveSpin>) -> Self {
        self.runtime.adaptive = spin;
        self
    }

    /// Interrupt deferral after work ([`Defer`](steer_core::runtime::Defer),
    /// off by default): an idle worker that just did work naps on a timer
    /// and polls again before it sleeps until woken. `None`: sleep until
    /// woken at once (every packet after a quiet spell costs its sender a
    /// wake-up).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use steer_core::runtime::Defer;
    /// let builder = steer_engine::engine::Engine::builder("veth0")
    ///     .defer(Some(Defer { nap: Duration::from_micros(100), empty_naps: 2 }));
    /// ```
    pub fn defer(mut self, defer: Option<steer_core::runtime::Defer>) -> Self {
        self.runtime.defer = defer;
        self
    }

    /// Receive coalescing ([`Coalesce`](steer_core::runtime::Coalesce), on
    /// by default with naps of 20 to 200 us sized for batches of 8, except
    /// for an application whose tasks run on the workers, such as a flow
    /// proxy, whose own I/O would wait out the naps): while
    /// packets come close together, an idle worker naps on a timer for a
    /// window sized to gather a batch instead of being woken for each
    /// packet; while they come far apart it sleeps until woken. Takes
    /// precedence over [`defer`](Self::defer). `None`: no naps.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use steer_core::runtime::Coalesce;
    /// let builder = steer_engine::engine::Engine::builder("veth0")
    ///     .coalesce(Some(Coalesce { max_nap: Duration::from_micros(100), ..Coalesce::default() }));
    /// ```
    pub fn coalesce(mut self, coalesce: Option<steer_core::runtime::Coalesce>) -> Self {
        self.runtime.coalesce = coalesce;
        self.coalesce_chosen = true;
        self
    }

    /// Slots of each dispatcher-to-worker ring (a power of two).
    pub fn ring_capacity(mut self, slots: usize) -> Self {
        self.runtime.ring_capacity = slots;
        self
    }

    /// Entries of the desired-CPU table and buckets of each rx-queue table
    /// (powers of two).
    pub fn flow_tables(mut self, desired: usize, per_rx_queue: usize) -> Self {
        self.runtime.desired_entries = desired;
        self.runtime.rx_table_entries = per_rx_queue;
        self
    }

    /// UMEM frames and the size of each AF_XDP ring.
    pub fn frames(mut self, frame_count: u32, xsk_ring_size: u32) -> Self {
        self.port = self.port.frames(frame_count, xsk_ring_size);
        self
    }

    /// Preferred busy polling on every AF_XDP socket (`SO_PREFER_BUSY_POLL`,
    /// `SO_BUSY_POLL` of `usecs`, `SO_BUSY_POLL_BUDGET` of the worker's
    /// batch): the system calls a worker makes anyway (its tx kick, a
    /// fill-ring wake-up, the readiness check before it sleeps) then run
    /// the device's NAPI in the worker's own context, and with the device's
    /// `napi_defer_hard_irqs` and `gro_flush_timeout` set its interrupts stay
    /// off while the worker keeps polling (the kernel's AF_XDP preferred
    /// busy polling). Off by default; it needs a driver with NAPI.
    ///
    /// ```no_run
    /// let builder = steer_engine::engine::Engine::builder("eth1").prefer_busy_poll(Some(20));
    /// ```
    pub fn prefer_busy_poll(mut self, usecs: Option<u32>) -> Self {
        self.prefer_busy_poll = usecs;
        self
    }

    /// Bytes per UMEM frame: 2048 (default) or 4096. A packet longer than
    /// one frame spans several (multi-buffer AF_XDP), which the engine uses
    /// on its own when the interface's MTU does not fit one frame
    /// ([`EngineBuilder::multi_buffer`]).
    pub fn frame_size(mut self, bytes: u32) -> Self {
        self.port = self.port.frame_size(bytes);
        self
    }

    /// Whether packets may span several frames (default
    /// [`MultiBuffer::Auto`](steer_xdp::MultiBuffer::Auto): when the
    /// interface's MTU does not fit one frame). Handlers see such a packet
    /// as one contiguous copy; its reply leaves as a chain of frames.
    pub fn multi_buffer(mut self, mode: steer_xdp::MultiBuffer) -> Self {
        self.port = self.port.multi_buffer(mode);
        self
    }

    /// Packets per poll and per ring drain (the NAPI budget).
    pub fn batch(mut self, packets: usize) -> Self {
        self.runtime.batch = packets;
        self
    }

    /// XDP attach mode (default: native, falling back to generic).
    pub fn xdp_mode(mut self, mode: XdpMode) -> Self {
        self.port = self.port.xdp_mode(mode);
        self
    }

    /// How the XDP program is held (default [`XdpAttach::Link`]: detached
    /// by the kernel when the process ends, however it ends;
    /// [`XdpAttach::Netlink`] stays after a crash until the next engine on
    /// the interface replaces it).
    pub fn xdp_attach(mut self, attach: XdpAttach) -> Self {
        self.port = self.port.attach(attach);
        self
    }

    /// AF_XDP bind mode (default: zero-copy, falling back to copy).
    pub fn bind_mode(mut self, mode: BindMode) -> Self {
        self.port = self.port.bind_mode(mode);
        self
    }

    /// The flow hash the dispatchers steer by (default: keyed, foldhash
    /// with a per-process random seed). A [`ToeplitzHasher`](steer_core::flow::ToeplitzHasher)
    /// reproduces the NIC's RSS hash (give it the NIC's key, `ethtool -x`),
    /// so steer's spreading agrees with the NIC's; the symmetric modes hash
    /// both directions of a flow alike (proxies). Flow delivery records
    /// consumption under the same hash.
    ///
    /// ```no_run
    /// use steer_core::flow::{ToeplitzHasher, SYMMETRIC_RSS_KEY};
    /// let key = SYMMETRIC_RSS_KEY; // or the NIC's key, from `ethtool -x eth1`
    /// let engine = steer_engine::engine::Engine::builder("eth1")
    ///     .own(steer_xdp::Proto::Udp, 53)
    ///     .hasher(ToeplitzHasher::new(&key)?)
    ///     .handler(|_cpu| Box::new(|_p: &mut [u8], _: &steer_engine::engine::PacketContext| {
    ///         steer_engine::engine::Verdict::Consume
    ///     }))
    ///     .start()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn hasher(mut self, hasher: impl Into<AnyHasher>) -> Self {
        self.hasher = hasher.into();
        self
    }

    /// Steer by the NIC's receive (RSS) hash instead of hashing in
    /// software, for packets whose hash covers the 5-tuple (an L3-only
    /// hash is not a flow's: those packets are hashed by the engine's
    /// hasher). Handlers see the hash each packet was steered by in
    /// [`PacketContext::hash`](super::PacketContext::hash), and flow
    /// delivery records consumption under it. Needs a driver whose XDP
    /// programs get the hash (the rx-hash kfunc, Linux >= 6.3; veth has it)
    /// and native XDP mode: [`EngineBuilder::start`] refuses otherwise, in
    /// one line.
    pub fn use_rx_hash(mut self, on: bool) -> Self {
        self.use_rx_hash = on;
        self
    }

    /// A flow entry idle this long may expire (its steering state removed).
    pub fn flow_idle(mut self, idle: Duration) -> Self {
        self.runtime.flow_idle_ms = idle.as_millis().try_into().unwrap_or(u32::MAX as _);
        self
    }

    /// Records what the engine sees as a trace `steer replay` reads: the
    /// machine's LLCs and the engine's settings, then every packet arrival
    /// (flow hash, rx queue, time) and every consumption flow delivery
    /// records (flow, CPU, allowed CPUs, time), at most `max_events` events.
    /// Written off the hot path by a background thread (see
    /// [`crate::trace`]); the counts are in [`EngineReport::trace`](super::EngineReport::trace).
    ///
    /// ```no_run
    /// use steer_engine::engine::Engine;
    /// use steer_engine::flows::FlowOptions;
    /// let engine = Engine::builder("eth1")
    ///     .own(steer_xdp::Proto::Udp, 5353)
    ///     .deliver_flows(FlowOptions::default())
    ///     .record_trace("/tmp/steer.trace", 1_000_000)
    ///     .start()?;
    /// // ... serve; then `steer replay --policy both /tmp/steer.trace`
    /// let report = engine.stop()?;
    /// println!("{:?}", report.trace);
    /// # Ok::<(), steer_engine::engine::EngineError>(())
    /// ```
    pub fn record_trace(mut self, path: impl Into<PathBuf>, max_events: u64) -> Self {
        self.trace = Some((path.into(), max_events));
        self
    }

    /// Where the engine's stats socket goes: `<dir>/<interface>.sock`,
    /// `0600`, read by `steer stats` and `steer top` and by
    /// [`observe::query`](crate::observe::query) (default
    /// [`DEFAULT_RUN_DIR`], `/run/steer`). Engines in different network
    /// namespaces with the same interface name need different directories.
    ///
    /// At start, a socket there that answers means another engine serves
    /// the interface: the start is refused, naming its pid. One that does
    /// not answer was left by an engine that is gone: it is replaced, and so
    /// is the steer XDP program that engine left attached. Without a socket
    /// the program's owner record says the same (see
    /// [`steer_xdp::program`]): a live owner is refused by pid, a dead one's
    /// program replaced.
    pub fn stats_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.stats_dir = Some(dir.into());
        self
    }

    /// Lets the members of group `name` read the stats socket too: it is
    /// then `0660` with that group instead of `0600` (root only). An
    /// unknown group refuses the start. Reading is all they can do: the
    /// socket answers `stats` and nothing else.
    pub fn stats_group(mut self, name: impl Into<String>) -> Self {
        self.stats_group = Some(name.into());
        self
    }

    /// Whether to serve the stats socket at all (default on).
    pub fn stats_socket(mut self, on: bool) -> Self {
        match (on, &self.stats_dir) {
            (false, _) => self.stats_dir = None,
            (true, None) => self.stats_dir = Some(PathBuf::from(DEFAULT_RUN_DIR)),
            (true, Some(_)) => {}
        }
        self
    }

    /// Serves Prometheus metrics on `http://<addr>/metrics` (text format,
    /// `steer_softnet_processed_total{cpu="0"}` and the rest, listed in
    /// `docs/operations.md`). Port 0 picks a free port:
    /// [`Engine::metrics_addr`](super::Engine::metrics_addr) says which. Bind to loopback unless the
    /// metrics must leave the machine; the endpoint is read-only.
    ///
    /// ```no_run
    /// use steer_engine::engine::Engine;
    /// let engine = Engine::builder("eth1")
    ///     .own(steer_xdp::Proto::Udp, 5353)
    ///     .metrics("127.0.0.1:9464".parse().unwrap())
    ///     .handler(|_cpu| Box::new(|_: &mut [u8], _: &steer_engine::engine::PacketContext| {
    ///         steer_engine::engine::Verdict::Drop
    ///     }))
    ///     .start()?;
    /// println!("scrape http://{}/metrics", engine.metrics_addr().unwrap());
    /// # Ok::<(), steer_engine::engine::EngineError>(())
    /// ```
    pub fn metrics(mut self, addr: SocketAddr) -> Self {
        if !addr.ip().is_loopback() {
            warn!(%addr, "metrics served beyond this machine: anyone who reaches {addr} reads them");
        }
        self.metrics = Some(addr);
        self
    }

    /// Once its program, maps, sockets and endpoints are set up, drops every
    /// capability the engine does not need at run time (default off): with
    /// the program held by a bpf_link ([`XdpAttach::Link`], the default)
    /// that is all of them; through netlink, CAP_NET_ADMIN stays, to
    /// detach it at stop. They go from every set, the bounding set too, so
    /// nothing the process runs later gets them back.
    ///
    /// Capabilities belong to each thread: they are dropped on the thread
    /// that calls [`start`](Self::start), before the engine starts its own
    /// threads, which inherit the reduced sets. Threads the application
    /// started earlier keep theirs: start the engine first (as `steer echo`
    /// and `steer proxy` do, where this is on), or drop them there too. The
    /// user id stays what it was.
    ///
    /// ```no_run
    /// use steer_engine::engine::{Engine, PacketContext, Verdict};
    /// let engine = Engine::builder("eth1")
    ///     .own(steer_xdp::Proto::Udp, 5353)
    ///     .drop_privileges(true)
    ///     .handler(|_cpu| Box::new(|_: &mut [u8], _: &PacketContext| Verdict::Drop))
    ///     .start()?;
    /// // From here this thread and the engine's run without capabilities.
    /// # Ok::<(), steer_engine::engine::EngineError>(())
    /// ```
    pub fn drop_privileges(mut self, on: bool) -> Self {
        self.drop_privileges = on;
        self
    }

    /// Once set up, at the same point as
    /// [`drop_privileges`](Self::drop_privileges), switches the whole
    /// process to `user` (its ids, all threads; [`RunAs::switch`]): what the
    /// engine keeps across the switch is what `drop_privileges` would keep
    /// (with it off, every capability the thread holds). The stats socket is
    /// handed to the user first (`StatsEndpoint::hand_to`), so the engine
    /// still removes it at stop. Look the user up before building ([`RunAs::lookup`]):
    /// an unknown name then fails before anything is touched.
    ///
    /// ```no_run
    /// use steer_engine::engine::{Engine, PacketContext, Verdict};
    /// use steer_xdp::privileges::RunAs;
    /// let nobody = RunAs::lookup("nobody", None)?;
    /// let engine = Engine::builder("eth1")
    ///     .own(steer_xdp::Proto::Udp, 5353)
    ///     .drop_privileges(true)
    ///     .run_as(nobody)
    ///     .handler(|_cpu| Box::new(|_: &mut [u8], _: &PacketContext| Verdict::Drop))
    ///     .start()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_as(mut self, user: RunAs) -> Self {
        self.run_as = Some(user);
        self
    }

    /// The steering hook of each rx queue (the `ndo_rx_flow_steer`
    /// analog), built by `factory(rxq)` at start, on the thread that starts
    /// the engine, once its port is open and before its privileges drop (a
    /// hook may open what it needs then; a worker that restarts builds its
    /// hooks again on its own thread). It is called on every move of a flow,
    /// with the flow's key, its old and new CPU and the rx queue, and on
    /// expiry of idle flows. Default: no hook (software steering only). On a
    /// NIC with ntuple filters, [`steer_xdp::ntuple::NtupleSteering`] asks the
    /// NIC to deliver each moved flow to the rx queue of its new CPU (and,
    /// made at start, removes the rules a killed engine left there).
    ///
    /// ```no_run
    /// use steer_core::hook::CountingHook;
    /// use steer_engine::engine::Engine;
    /// let builder = Engine::builder("eth1").hook(|_rxq| CountingHook::default());
    /// ```
    #[doc(alias = "ndo_rx_flow_steer")]
    pub fn hook<F, H>(mut self, factory: F) -> Self
    where
        F: Fn(u32) -> H + Send + Sync + 'static,
        H: SteerHook + Send + 'static,
    {
        self.hooks = Some(Arc::new(move |rxq| Box::new(factory(rxq))));
        self
    }

    /// The handler each worker runs, built on the worker's thread.
    pub fn handler<F>(self, factory: F) -> Self
    where
        F: Fn(CpuId) -> Box<dyn PacketHandler> + Send + Sync + 'static,
    {
        self.application(move |_parts| FactoryApp(Arc::new(factory)))
    }

    /// Runs an application layer built from the engine's parts (the shared
    /// tables, the worker CPUs, the hasher) once the port is open and
    /// before any worker starts; the running engine hands it back with
    /// [`Engine::application`](super::Engine::application). [`EngineBuilder::handler`] and flow delivery
    /// ([`EngineBuilder::deliver_flows`]) are built on this; the last call
    /// of the three wins.
    pub fn application<A, F>(mut self, build: F) -> Self
    where
        A: Application,
        F: FnOnce(&EngineParts) -> A + Send + 'static,
    {
        self.app = Some(Box::new(move |parts| {
            let app = Arc::new(build(parts));
            (
                Arc::clone(&app) as Arc<dyn Application>,
                app as Arc<dyn std::any::Any + Send + Sync>,
            )
        }));
        self
    }
}
