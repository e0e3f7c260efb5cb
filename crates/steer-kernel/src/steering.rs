//! The owner of kernel-socket steering ([`KernelSteering`]): the attached
//! RFS program, steer's desired-CPU table with its update rule, the hook
//! writing the program's map, and a sweeper thread expiring idle flows.
//! Built by [`KernelSteeringBuilder`].
//!
//! Invariants: the program is attached, and every CPU flows may be steered
//! to has a cpumap entry, from `start` until `stop` (or drop), which
//! detaches the program and frees its maps (flows fall back to the kernel's
//! own path at once). The hook is behind one mutex, taken only on desired
//! table writes, forgets and sweeps: never on a record the rule suppresses.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::flow::KeyedHasher;
use steer_core::policy::Policy;
use steer_core::record::CpuProbe;
use steer_core::table::{DesiredCpuTable, RecordStats};
use steer_topology::thread::LiveProbe;
use steer_xdp::privileges::RunAs;
use steer_xdp::rfs::{
    RfsOrder, RfsProgram, RfsRecord, RfsStats, DEFAULT_MAX_HOLD, DEFAULT_MAX_WAIT,
    DEFAULT_QUEUE_SIZE,
};
use steer_xdp::{Proto, XdpMode};

use crate::checksum::{ChecksumErrors, ChecksumWatch};
use crate::hook::{MapHook, RfsBackend, UpdateTimes};
use crate::in_kernel::IdleSweep;
use crate::recorder::KernelRecorder;
use crate::shared::{Recorded, Shared};
use crate::socket::SocketTuple;
use crate::{KernelError, SteeredFlow};

/// The backend after `stop`: every update fails, recorders carry on.
struct Stopped;

impl RfsBackend for Stopped {
    fn track(&self, _: &steer_xdp::FlowMapKey) -> Result<(), steer_xdp::XdpError> {
        Err(stopped())
    }
    fn steer(&self, _: &steer_xdp::FlowMapKey, _: u32) -> Result<(), steer_xdp::XdpError> {
        Err(stopped())
    }
    fn forget(&self, _: &steer_xdp::FlowMapKey) -> Result<(), steer_xdp::XdpError> {
        Ok(())
    }
    fn seen(&self, _: &steer_xdp::FlowMapKey) -> Result<Option<u64>, steer_xdp::XdpError> {
        Ok(None)
    }
    fn attach_socket(&self, _: BorrowedFd<'_>) -> Result<(), steer_xdp::XdpError> {
        Err(stopped())
    }
}

fn stopped() -> steer_xdp::XdpError {
    steer_xdp::XdpError::Config("kernel-socket steering was stopped".into())
}

/// Kernel-socket steering, running: see the crate docs.
pub struct KernelSteering {
    /// The RFS program also records in the kernel (transparent mode).
    in_kernel: bool,
    /// ... through the tracepoint too (connected sockets' reads).
    tracepoint: bool,
    shared: Arc<Shared>,
    program: Option<Arc<RfsProgram>>,
    sweeper: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
}

impl std::fmt::Debug for KernelSteering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSteering")
            .field("cpus", &self.shared.cpus)
            .field("policy", &self.shared.table.policy().get())
            .finish_non_exhaustive()
    }
}

/// Counters of kernel-socket steering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelStats {
    /// What the records did to the desired table (writes by reason,
    /// suppressions by the LLC rule).
    pub records: RecordStats,
    /// Map writes of a flow's CPU: the costly updates.
    pub updates: u64,
    /// Their latencies.
    pub update_times: UpdateTimes,
    /// Updates that failed (the flow kept its CPU).
    pub update_errors: u64,
    /// Flows placed now.
    pub flows: usize,
    /// Flows forgotten or expired.
    pub removed: u64,
    /// Records on a CPU flows cannot be steered to (no cpumap entry).
    pub not_steerable: u64,
    /// The XDP program's counters (`None` over a fake backend).
    pub program: Option<RfsStats>,
    /// Flows the in-kernel recorder made that were forgotten once idle.
    pub in_kernel_forgotten: u64,
    /// Segments and datagrams the namespace's stack dropped for a bad
    /// checksum since steering started (all of the namespace's traffic, not
    /// only steered flows). Steered frames whose checksum state the
    /// redirect lost would show here; the program completes partial
    /// checksums so that they do not (`RfsStats::csum_completed`).
    pub csum_errors: ChecksumErrors,
}

impl KernelSteering {
    /// A builder for steering on `interface`.
    pub fn builder(interface: &str) -> KernelSteeringBuilder {
        KernelSteeringBuilder::new(interface)
    }

    /// Steering over any backend (a fake, for tests and what-if runs): no
    /// program, no sweeper thread.
    pub fn with_backend(
        backend: Arc<dyn RfsBackend>,
        layout: Arc<CpuLayout>,
        cpus: CpuSet,
        policy: Policy,
        table_entries: usize,
    ) -> Result<Self, KernelError> {
        let table = Arc::new(DesiredCpuTable::with_policy(
            table_entries,
            layout.nr_cpus(),
            policy,
        )?);
        Ok(Self {
            in_kernel: false,
            tracepoint: false,
            shared: Arc::new(Shared {
                table,
                layout,
                hasher: KeyedHasher::random(),
                cpus,
                hook: Mutex::new(MapHook::new(backend, 65_536)),
                not_steerable: AtomicU64::new(0),
                in_kernel_forgotten: AtomicU64::new(0),
                checksums: ChecksumWatch::start(),
            }),
            program: None,
            sweeper: None,
        })
    }

    /// A recording handle for the calling thread (one per thread: it caches
    /// the thread's allowed CPUs).
    pub fn recorder(&self) -> KernelRecorder<LiveProbe> {
        self.recorder_with(LiveProbe)
    }

    /// A recording handle asking `probe` where the thread runs.
    pub fn recorder_with<P: CpuProbe>(&self, probe: P) -> KernelRecorder<P> {
        KernelRecorder::new(self.shared.clone(), probe)
    }

    /// The flow of the connected socket `socket`, for recording it cheaply
    /// on every read ([`KernelRecorder::record_flow`]). A UDP socket gets
    /// the program's delivery counter (a socket filter) now. Dropping the
    /// handle forgets the flow.
    pub fn flow(&self, socket: &impl std::os::fd::AsFd) -> Result<SteeredFlow, KernelError> {
        let tuple = SocketTuple::of(socket)?;
        if tuple.proto == Proto::Udp {
            self.shared.attach_socket(socket.as_fd())?;
        }
        Ok(SteeredFlow::new(
            tuple,
            self.shared.hash(&tuple),
            Arc::downgrade(&self.shared),
        ))
    }

    /// Steers `flow` to `cpu` now, bypassing the update rule (an explicit
    /// pin; the desired table is not written).
    pub fn pin(&self, flow: &SteeredFlow, cpu: CpuId) -> Result<Recorded, KernelError> {
        self.shared.place(flow.tuple(), flow.hash(), cpu, None)
    }

    /// Forgets the flow of `tuple` (its frames take the kernel path again).
    pub fn forget(&self, tuple: &SocketTuple) {
        self.shared.forget(tuple);
    }

    /// The CPU the program's map holds for `tuple`'s flow.
    pub fn placed_cpu(&self, tuple: &SocketTuple) -> Option<CpuId> {
        self.shared.hook().cpu_of(&tuple.map_key())
    }

    /// Switches the update rule for later records (the in-kernel
    /// recorder's too).
    pub fn set_policy(&self, policy: Policy) {
        self.shared.table.policy().set(policy);
        if let (true, Some(program)) = (self.in_kernel, &self.program) {
            let llcs = llcs(&self.shared.layout, self.shared.cpus);
            let rule = record_rule(policy);
            let set = if self.tracepoint {
                program.record_in_kernel(rule, &llcs)
            } else {
                program.set_record_rule(rule, &llcs)
            };
            if let Err(e) = set {
                tracing::warn!(error = %e, "the in-kernel recorder keeps its rule");
            }
        }
    }

    /// The update rule in force.
    pub fn policy(&self) -> Policy {
        self.shared.table.policy().get()
    }

    /// The CPUs flows may be steered to.
    pub fn cpus(&self) -> CpuSet {
        self.shared.cpus
    }

    /// The CPU model the LLC rule uses.
    pub fn layout(&self) -> &Arc<CpuLayout> {
        &self.shared.layout
    }

    /// The attached program (`None` over a fake backend).
    pub fn program(&self) -> Option<&RfsProgram> {
        self.program.as_deref()
    }

    /// The attached program for another thread to read (a metrics
    /// exporter): it does not keep the program attached once steering
    /// stops, when it no longer upgrades.
    pub fn program_weak(&self) -> Option<std::sync::Weak<RfsProgram>> {
        self.program.as_ref().map(Arc::downgrade)
    }

    /// Expires flows idle for `idle_sweeps` calls (the sweeper thread does
    /// this every period); returns how many.
    pub fn sweep(&self, idle_sweeps: u32) -> usize {
        self.shared.hook().sweep(idle_sweeps)
    }

    /// The counters.
    pub fn stats(&self) -> KernelStats {
        let hook = self.shared.hook();
        KernelStats {
            records: self.shared.table.stats(),
            updates: hook.updates(),
            update_times: hook.times(),
            update_errors: hook.errors(),
            flows: hook.len(),
            removed: hook.removes(),
            not_steerable: self.shared.not_steerable.load(Ordering::Relaxed),
            program: self.program.as_ref().and_then(|p| p.stats().ok()),
            in_kernel_forgotten: self.shared.in_kernel_forgotten.load(Ordering::Relaxed),
            csum_errors: self.shared.checksums.since_start(),
        }
    }

    /// Stops: the sweeper ends, the program is detached and its maps freed;
    /// every flow takes the kernel path again.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some((thread, stop)) = self.sweeper.take() {
            stop.store(true, Ordering::Relaxed);
            thread.thread().unpark();
            let _ = thread.join();
        }
        // Recorders and flows may outlive this: take the program out of the
        // hook too, so the last reference goes here and detaches it.
        self.shared.hook().set_backend(Arc::new(Stopped));
        self.program = None;
    }
}

impl Drop for KernelSteering {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// How kernel-socket steering starts.
///
/// ```no_run
/// use std::time::Duration;
/// use steer_kernel::{KernelSteering, Policy, Proto};
/// let steering = KernelSteering::builder("eth1")
///     .own(Proto::Tcp, 443)
///     .own(Proto::Udp, 443)
///     .policy(Policy::LlcAffinity)
///     .idle_timeout(Duration::from_secs(30))
///     .start()?;
/// # Ok::<(), steer_kernel::KernelError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct KernelSteeringBuilder {
    interface: String,
    owned: Vec<(Proto, u16)>,
    cpus: Option<CpuSet>,
    policy: Policy,
    layout: Option<Arc<CpuLayout>>,
    table_entries: usize,
    queue_size: u32,
    xdp_mode: XdpMode,
    replace_stale: bool,
    order: RfsOrder,
    max_hold: Duration,
    max_wait: Duration,
    idle_timeout: Duration,
    sweep_every: Duration,
    max_flows: usize,
    drop_privileges: bool,
    run_as: Option<RunAs>,
    in_kernel: bool,
    connected_udp: bool,
    cgroup: Option<std::path::PathBuf>,
}

/// Forgets the in-kernel recorder's flows idle for `idle_sweeps` sweeps
/// (those the user-space hook placed are its own).
fn forget_idle_recorded(
    program: &RfsProgram,
    shared: &Shared,
    sweep: &mut IdleSweep,
    idle_sweeps: u32,
) {
    let tracked = match program.tracked() {
        Ok(t) => t,
        Err(e) => {
            tracing::debug!(error = %e, "walking the tracked flows failed");
            return;
        }
    };
    let recorded = {
        let hook = shared.hook();
        tracked
            .into_iter()
            .filter(|(flow, _)| hook.cpu_of(flow).is_none())
            .map(|(flow, state)| (flow, state.seen))
            .collect::<Vec<_>>()
    };
    for flow in sweep.idle(recorded, idle_sweeps) {
        if program.forget(&flow).is_ok() {
            shared.in_kernel_forgotten.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The in-kernel recorder's rule for `policy`.
fn record_rule(policy: Policy) -> RfsRecord {
    match policy {
        Policy::LlcAffinity => RfsRecord::Llc,
        Policy::Always => RfsRecord::Always,
    }
}

/// (CPU, LLC) of every CPU flows may be steered to.
fn llcs(layout: &CpuLayout, cpus: CpuSet) -> Vec<(u32, u32)> {
    cpus.iter()
        .filter_map(|c| {
            let llc = layout.llc_of(c)?;
            Some((u32::try_from(c).ok()?, u32::from(llc)))
        })
        .collect()
}

impl KernelSteeringBuilder {
    fn new(interface: &str) -> Self {
        Self {
            interface: interface.into(),
            owned: Vec::new(),
            cpus: None,
            policy: Policy::LlcAffinity,
            layout: None,
            // Flows sharing an entry overwrite each other's CPU under any
            // policy (each write then moves the other flow): keep it well
            // above the flow count, as the engine does.
            table_entries: 65_536,
            queue_size: DEFAULT_QUEUE_SIZE,
            xdp_mode: XdpMode::Auto,
            replace_stale: false,
            order: RfsOrder::Socket,
            max_hold: DEFAULT_MAX_HOLD,
            max_wait: DEFAULT_MAX_WAIT,
            idle_timeout: Duration::from_secs(30),
            sweep_every: Duration::from_secs(1),
            max_flows: 65_536,
            in_kernel: false,
            connected_udp: false,
            cgroup: None,
            drop_privileges: false,
            run_as: None,
        }
    }

    /// Drops every capability the calling thread does not need once the
    /// program is attached (default: keep them): all but CAP_NET_ADMIN,
    /// which detaches the program at stop (and CAP_SYS_ADMIN and CAP_BPF
    /// when libxdp's dispatcher runs it). Map updates and socket filters go
    /// through descriptors already held and need none. Capability sets
    /// belong to each thread: threads started after `start` (the sweeper,
    /// an async runtime's) inherit the reduced sets; bind privileged ports
    /// before.
    pub fn drop_privileges(mut self, yes: bool) -> Self {
        self.drop_privileges = yes;
        self
    }

    /// Once the program is attached, at the same point as
    /// [`drop_privileges`](Self::drop_privileges), switches the whole
    /// process to `user` ([`RunAs::switch`]: its ids on every thread),
    /// keeping what `drop_privileges` would keep (with it off, every
    /// capability the thread holds). Look the user up before building
    /// ([`RunAs::lookup`]): an unknown name then fails before anything is
    /// attached.
    ///
    /// ```no_run
    /// use steer_kernel::{KernelSteering, Proto};
    /// use steer_xdp::privileges::RunAs;
    /// let steering = KernelSteering::builder("eth1")
    ///     .own(Proto::Tcp, 8080)
    ///     .drop_privileges(true)
    ///     .run_as(RunAs::lookup("nobody", None)?)
    ///     .start()?;
    /// // Runs as nobody with CAP_NET_ADMIN only, to detach at stop.
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_as(mut self, user: RunAs) -> Self {
        self.run_as = Some(user);
        self
    }

    /// Steers the connections of `proto` on local `port` (repeatable);
    /// other traffic takes the kernel path untouched.
    pub fn own(mut self, proto: Proto, port: u16) -> Self {
        self.owned.push((proto, port));
        self
    }

    /// The CPUs flows may be steered to (default: the CPUs this process
    /// may run on). A record on another CPU leaves its flow alone.
    pub fn cpus(mut self, cpus: CpuSet) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// The update rule (default `llc`); switchable later with
    /// [`KernelSteering::set_policy`].
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The CPU model the LLC rule uses (default: the live machine's, from
    /// hwloc or sysfs); a synthetic one plans for another machine.
    pub fn topology(mut self, layout: Arc<CpuLayout>) -> Self {
        self.layout = Some(layout);
        self
    }

    /// Desired-table entries (a power of two; default 65536). Flows sharing
    /// an entry overwrite each other's CPU whatever the policy.
    pub fn table_entries(mut self, entries: usize) -> Self {
        self.table_entries = entries;
        self
    }

    /// Frames each CPU's cpumap queue holds (default 2048, at most 16384).
    pub fn queue_size(mut self, frames: u32) -> Self {
        self.queue_size = frames;
        self
    }

    /// How the program is attached (default: native, else generic).
    pub fn xdp_mode(mut self, mode: XdpMode) -> Self {
        self.xdp_mode = mode;
        self
    }

    /// Replaces a steer RFS program found attached even when this process
    /// holds the interface already (another `KernelSteering` of its own):
    /// default refuse. One left by a process that is gone is replaced
    /// anyway, and one of another live process never is (the interface's
    /// owner lock refuses the start, naming it).
    pub fn replace_stale(mut self, yes: bool) -> Self {
        self.replace_stale = yes;
        self
    }

    /// The rule that lets a flow leave its CPU (default: the socket rule,
    /// which never reorders); the others exist to measure what it prevents.
    pub fn order(mut self, order: RfsOrder) -> Self {
        self.order = order;
        self
    }

    /// How long a UDP flow whose move waits for the old path must be quiet
    /// before the move is forced and counted (default 100 ms): a frame lost
    /// on the old path would hold it forever. TCP moves are never forced.
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = hold;
        self
    }

    /// How long a UDP move may wait in all, the flow busy or not, before it
    /// is forced and counted (default 1 s): a frame lost on the old path of
    /// a flow that is never quiet for `max_hold` would hold it forever.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// A flow with no frame for this long is forgotten (default 30 s);
    /// checked every `sweep_every` (default 1 s).
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }

    /// How often the sweeper looks for idle flows (default 1 s).
    pub fn sweep_every(mut self, every: Duration) -> Self {
        self.sweep_every = every;
        self
    }

    /// At most this many flows are steered at once (default and largest:
    /// 65536, the program's map size).
    pub fn max_flows(mut self, flows: usize) -> Self {
        self.max_flows = flows.min(65_536);
        self
    }

    /// Records in the kernel (transparent mode): the reading CPU of every
    /// connected TCP socket of an owned port is recorded by a BPF program
    /// on the `sock_recv_length` tracepoint, under the policy's rule, for
    /// any process on the host, with no call from the application
    /// ([`steer_xdp::rfs::RfsProgram::record_in_kernel`]). With an owned
    /// UDP port, the datagrams read by the processes of a cgroup
    /// ([`cgroup`](Self::cgroup), default the whole host) with their
    /// sender's address are recorded too, per sender, by cgroup recvmsg
    /// hooks ([`steer_xdp::rfs::RfsProgram::record_udp_in_kernel`]); the
    /// reads of connected UDP sockets by the tracepoint when it is attached
    /// ([`record_connected_udp`](Self::record_connected_udp)). The LLC
    /// rule uses this builder's topology. User-space records
    /// ([`KernelSteering::recorder`]) are not affected.
    ///
    /// ```no_run
    /// use steer_kernel::{KernelSteering, Proto};
    /// # fn main() -> Result<(), steer_kernel::KernelError> {
    /// // iperf3, nginx, ... on port 5201 now have their flows steered to
    /// // the CPU that reads them.
    /// let steering = KernelSteering::builder("eth1")
    ///     .own(Proto::Tcp, 5201)
    ///     .record_in_kernel(true)
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn record_in_kernel(mut self, yes: bool) -> Self {
        self.in_kernel = yes;
        self
    }

    /// Records the reads of connected UDP sockets of the owned UDP ports
    /// too (a server with a socket per peer reading with `recv`, which the
    /// cgroup recvmsg hooks do not see): the `sock_recv_length` tracepoint
    /// is then attached for UDP-only steering as well, and its program
    /// runs on every read of every socket on the host (about 140 ns a read
    /// here). With an owned TCP port it is attached anyway and connected
    /// UDP sockets are recorded whatever this says. Used only with
    /// [`record_in_kernel`](Self::record_in_kernel).
    ///
    /// ```no_run
    /// use steer_kernel::{KernelSteering, Proto};
    /// # fn main() -> Result<(), steer_kernel::KernelError> {
    /// // A QUIC server that connects a UDP socket to each client.
    /// let steering = KernelSteering::builder("eth1")
    ///     .own(Proto::Udp, 443)
    ///     .record_in_kernel(true)
    ///     .record_connected_udp(true)
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn record_connected_udp(mut self, yes: bool) -> Self {
        self.connected_udp = yes;
        self
    }

    /// The cgroup (v2) directory whose processes' UDP reads the in-kernel
    /// recorder sees, descendants included (default: the root of the
    /// cgroup v2 hierarchy, every process on the host). Used only with
    /// [`record_in_kernel`](Self::record_in_kernel) and an owned UDP port.
    ///
    /// ```no_run
    /// use steer_kernel::{KernelSteering, Proto};
    /// # fn main() -> Result<(), steer_kernel::KernelError> {
    /// // dnsmasq's service only, on a unified cgroup host.
    /// let steering = KernelSteering::builder("eth1")
    ///     .own(Proto::Udp, 53)
    ///     .record_in_kernel(true)
    ///     .cgroup("/sys/fs/cgroup/system.slice/dnsmasq.service")
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    pub fn cgroup(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.cgroup = Some(path.into());
        self
    }

    /// Attaches the program, creates the cpumap entries, starts the
    /// sweeper. A bad start says what to do in one line (privileges,
    /// interface, XDP mode, a program already attached).
    pub fn start(self) -> Result<KernelSteering, KernelError> {
        if self.owned.is_empty() {
            return Err(KernelError::Config(
                "no port to steer: call .own(Proto::Tcp, port) (or Udp) at least once".into(),
            ));
        }
        if self.sweep_every.is_zero() {
            return Err(KernelError::Config("sweep_every must be positive".into()));
        }
        let layout = match self.layout {
            Some(l) => l,
            None => steer_topology::Topology::live()?.layout(),
        };
        let cpus = match self.cpus {
            Some(c) => c,
            None => steer_topology::thread::allowed_cpus()
                .map_err(|e| KernelError::Config(e.to_string()))?,
        };
        let cpus: CpuSet = cpus.iter().filter(|&c| layout.is_valid(c)).collect();
        if cpus.is_empty() {
            return Err(KernelError::Config(
                "no CPU to steer to: the CPU set and the topology share none".into(),
            ));
        }
        let table = Arc::new(DesiredCpuTable::with_policy(
            self.table_entries,
            layout.nr_cpus(),
            self.policy,
        )?);
        let program = Arc::new(RfsProgram::attach(
            &self.interface,
            self.xdp_mode,
            self.replace_stale,
        )?);
        for &(proto, port) in &self.owned {
            program.set_owned(proto, port, true)?;
        }
        for cpu in cpus.iter() {
            let id = u32::try_from(cpu).map_err(|_| KernelError::Config("CPU id".into()))?;
            program.enable_cpu(id, self.queue_size)?;
        }
        program.set_order(self.order)?;
        program.set_max_hold(self.max_hold)?;
        program.set_max_wait(self.max_wait)?;
        let owns = |p: Proto| self.owned.iter().any(|&(proto, _)| proto == p);
        let tracepoint =
            self.in_kernel && (owns(Proto::Tcp) || (self.connected_udp && owns(Proto::Udp)));
        if self.in_kernel {
            // Before the privileges go: attaching the tracepoint needs
            // CAP_BPF and CAP_PERFMON, the cgroup hooks CAP_NET_ADMIN. The
            // tracepoint (connected sockets' reads: TCP, and connected UDP
            // when asked) only when needed: it runs on every read of every
            // socket on the host.
            let (rule, llcs) = (record_rule(self.policy), llcs(&layout, cpus));
            if tracepoint {
                program.record_in_kernel(rule, &llcs)?;
            } else {
                program.set_record_rule(rule, &llcs)?;
            }
            if self.owned.iter().any(|&(proto, _)| proto == Proto::Udp) {
                let cgroup = match self.cgroup.clone().or_else(crate::cgroup::cgroup2_root) {
                    Some(c) => c,
                    None => {
                        return Err(KernelError::Config(
                            "recording UDP in the kernel needs cgroup v2: no cgroup2 mount \
                             found in /proc/self/mounts (mount one, or pass a cgroup \
                             directory)"
                                .into(),
                        ))
                    }
                };
                program.record_udp_in_kernel(&cgroup)?;
                tracing::info!(cgroup = %cgroup.display(), "recording UDP reads in the kernel");
            }
        }
        // Before the sweeper starts: it inherits the reduced sets.
        let keep = steer_xdp::privileges::needed_to_detach_netlink(program.dispatched());
        if let Some(user) = self.run_as {
            let keep = if self.drop_privileges {
                keep
            } else {
                steer_xdp::privileges::permitted().map_err(|e| {
                    KernelError::Config(format!("reading the capabilities after set-up: {e}"))
                })?
            };
            user.switch(&keep)
                .map_err(|e| KernelError::Config(e.to_string()))?;
            tracing::info!(
                uid = user.uid,
                gid = user.gid,
                kept = ?keep,
                "running as another user"
            );
        } else if self.drop_privileges {
            steer_xdp::privileges::drop_all_but(&keep).map_err(|e| {
                KernelError::Config(format!("dropping capabilities after set-up: {e}"))
            })?;
            tracing::info!(kept = ?keep, "capabilities dropped");
        }
        let backend: Arc<dyn RfsBackend> = program.clone();
        let shared = Arc::new(Shared {
            table,
            layout,
            hasher: KeyedHasher::random(),
            cpus,
            hook: Mutex::new(MapHook::new(backend, self.max_flows)),
            not_steerable: AtomicU64::new(0),
            in_kernel_forgotten: AtomicU64::new(0),
            checksums: ChecksumWatch::start(),
        });
        let idle_sweeps =
            u32::try_from(self.idle_timeout.as_nanos() / self.sweep_every.as_nanos().max(1))
                .unwrap_or(u32::MAX)
                .max(1);
        let stop = Arc::new(AtomicBool::new(false));
        let in_kernel = self.in_kernel;
        let sweeper = {
            let (shared, stop, every) = (shared.clone(), stop.clone(), self.sweep_every);
            let program = program.clone();
            let mut recorded = IdleSweep::default();
            std::thread::Builder::new()
                .name("steer-sweep".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park_timeout(every);
                        if !stop.load(Ordering::Relaxed) {
                            shared.hook().sweep(idle_sweeps);
                            if in_kernel {
                                forget_idle_recorded(&program, &shared, &mut recorded, idle_sweeps);
                            }
                            let redirected = program.stats().map_or(0, |s| s.redirected);
                            shared.checksums.check(redirected);
                        }
                    }
                })
                .map_err(|e| KernelError::Config(format!("spawning the sweeper: {e}")))?
        };
        tracing::info!(
            interface = %self.interface,
            mode = ?program.mode(),
            cpus = ?cpus,
            policy = %self.policy,
            "kernel-socket steering started"
        );
        Ok(KernelSteering {
            in_kernel: self.in_kernel,
            tracepoint,
            shared,
            program: Some(program),
            sweeper: Some((sweeper, stop)),
        })
    }
}

/// The recorders a [`KernelSteering`] hands out, against a fake map
/// backend: what reaches the map, and what is counted instead.
#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::Arc;

    use steer_core::cpu::{CpuLayout, CpuSet};
    use steer_core::policy::Policy;
    use steer_core::record::CpuProbe;

    use super::KernelSteering;
    use crate::hook::tests_support::FakeBackend;
    use crate::shared::Recorded;

    /// A thread that runs wherever the test says.
    #[derive(Clone)]
    struct On(Rc<Cell<usize>>);
    impl CpuProbe for On {
        fn current_cpu(&self) -> usize {
            self.0.get()
        }
        fn allowed_cpus(&self) -> CpuSet {
            CpuSet::first(2)
        }
    }

    /// Map updates made while a connection's reader hops between CPU 0 and
    /// CPU 1 `hops` times, on a layout of `cpus_per_llc`.
    fn updates(cpus_per_llc: usize, policy: Policy, switch_to: Option<Policy>) -> (u64, u64) {
        let backend = Arc::new(FakeBackend::default());
        let layout = Arc::new(CpuLayout::uniform(2, cpus_per_llc).unwrap());
        let steering =
            KernelSteering::with_backend(backend.clone(), layout, CpuSet::first(2), policy, 1024)
                .unwrap();
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect("127.0.0.1:9").unwrap();
        let flow = steering.flow(&a).unwrap();
        let cpu = Rc::new(Cell::new(0));
        let mut rec = steering.recorder_with(On(cpu.clone()));
        let mut before_switch = 0;
        for hop in 0..10 {
            if hop == 5 {
                before_switch = backend.writes();
                if let Some(p) = switch_to {
                    steering.set_policy(p);
                }
            }
            cpu.set(hop % 2);
            for _ in 0..3 {
                rec.record_flow(&flow).unwrap();
            }
        }
        assert_eq!(steering.stats().updates, backend.writes());
        (before_switch, backend.writes())
    }

    #[test]
    fn the_llc_rule_avoids_updates_inside_an_llc_and_follows_across() {
        // One LLC: `always` writes every hop, `llc` only the first placement.
        assert_eq!(updates(2, Policy::Always, None), (5, 10));
        assert_eq!(updates(2, Policy::LlcAffinity, None), (1, 1));
        // Two LLCs: every hop crosses, both follow it.
        assert_eq!(updates(1, Policy::LlcAffinity, None), (5, 10));
        // Switched at run time.
        assert_eq!(
            updates(2, Policy::LlcAffinity, Some(Policy::Always)),
            (1, 6)
        );
    }

    #[test]
    fn records_on_cpus_flows_cannot_go_to_are_counted_not_written() {
        let backend = Arc::new(FakeBackend::default());
        let layout = Arc::new(CpuLayout::uniform(2, 2).unwrap());
        let only0: CpuSet = [0].into_iter().collect();
        let steering =
            KernelSteering::with_backend(backend.clone(), layout, only0, Policy::Always, 64)
                .unwrap();
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect("127.0.0.1:9").unwrap();
        let mut rec = steering.recorder_with(On(Rc::new(Cell::new(1))));
        assert_eq!(rec.record(&a).unwrap(), Recorded::NotSteerable(1));
        assert_eq!((backend.writes(), steering.stats().not_steerable), (0, 1));
        // The UDP socket got no filter: its flow was never placed.
        assert_eq!(*backend.attached.lock().unwrap(), 0);
    }
}
