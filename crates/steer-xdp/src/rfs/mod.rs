//! XDP RFS for kernel sockets (`bpf/steer_rfs.c`): the program that
//! redirects the frames of the flows steer tracks into a `BPF_MAP_TYPE_CPUMAP`
//! entry, so the kernel stack of the CPU steer names for the flow handles
//! them, and passes everything else. [`RfsProgram`](crate::rfs::RfsProgram) attaches it, fills the
//! cpumap (each entry runs the program's dequeue counter on its CPU), and
//! owns its maps: which ports are steered, the CPU steer wants for each flow
//! (`rfs_desired`, written by [`RfsProgram::steer`](crate::rfs::RfsProgram::steer): the costly update), the
//! per-flow state the programs keep (`rfs_state`), the settings and the
//! per-CPU counters, and the in-kernel recorders' attachments (the TCP
//! tracepoint; the UDP cgroup hooks and their ingress counter, detached with
//! the program). The byte layouts are those of bpf/steer_rfs.h; this
//! module is safe Rust (the FFI is in `sys::libxdp`).
//!
//! Invariants: while an [`RfsProgram`](crate::rfs::RfsProgram) exists its program is attached to its
//! interface and its maps exist; `Drop` detaches it and closes the object,
//! which frees the maps and stops the cpumap threads. The map handles are
//! file descriptors of their own, so an `RfsProgram` is `Send + Sync` and
//! every thread may steer through it. A flow is steered only while it has
//! both a state entry ([`RfsProgram::track`](crate::rfs::RfsProgram::track)) and a desired CPU.

mod layout;

use std::{
    os::fd::{AsFd, BorrowedFd, OwnedFd},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tracing::{debug, info, warn};

use crate::{
    config::{Proto, XdpMode},
    error::{Result, XdpError},
    owner_lock::InterfaceLock,
    program::{attached_programs, detach_stale, FlowMapKey, PortKey},
    sys::{
        self,
        libxdp::{detach_netlink, AttachMode, BpfObject, Link, MapFd, XdpProgram, BPF_NOEXIST},
    },
};

pub use layout::{RfsFlow, RfsOrder, RfsRecord, RfsStats};
use layout::{Setting, Stat, NO_LLC};

/// The compiled program (clang -O2 -g -target bpf -mcpu=v3, see build.rs).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/steer_rfs.o"));

/// The XDP program's name as the kernel knows it (the C function's name).
pub const RFS_PROGRAM_NAME: &str = "steer_rfs";
/// The program each cpumap entry runs on its CPU.
const CPUMAP_PROGRAM: &str = "steer_rfs_cpu";
/// The socket filter counting UDP frames that reached their socket.
const SOCKET_PROGRAM: &str = "steer_rfs_sock";

const OWNED_PORTS: &str = "owned_ports";
const DESIRED: &str = "rfs_desired";
const STATE: &str = "rfs_state";
const CPUS: &str = "rfs_cpus";
const ENQ: &str = "rfs_enq";
const DEQ: &str = "rfs_deq";
const LLC: &str = "rfs_llc";
/// The in-kernel recorder, on the sock_recv_length tracepoint.
const RECORD_PROGRAM: &str = "steer_rfs_record";
const RECORD_TRACEPOINT: &str = "sock_recv_length";
/// The in-kernel UDP recorder (cgroup recvmsg hooks) and its delivery
/// counter (cgroup skb ingress), attached to a cgroup together.
const UDP_RECORD_PROGRAMS: [&str; 3] = [
    "steer_rfs_recvmsg4",
    "steer_rfs_recvmsg6",
    "steer_rfs_ingress",
];
/// The program counting the frames a cpumap queue dropped.
const DROPS_PROGRAM: &str = "steer_rfs_drops";
const DROPS_TRACEPOINT: &str = "xdp_cpumap_enqueue";
/// The program counting the frames that failed to reach a cpumap queue.
const ERRORS_PROGRAM: &str = "steer_rfs_redirect_err";
const ERRORS_TRACEPOINT: &str = "xdp_redirect_err";
const SETTINGS: &str = "rfs_settings";
const STATS: &str = "rfs_stats";

/// Entries of the state map [`RfsProgram::tracked`] reads a system call.
pub const TRACKED_CHUNK: usize = 4096;

/// Frames a cpumap entry queues for its CPU by default.
pub const DEFAULT_QUEUE_SIZE: u32 = 2048;
/// How long a held UDP flow must be quiet (no frame) before its move is
/// forced.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_millis(100);
/// How long a UDP move may be held, the flow busy or not, before it is
/// forced: a frame lost between the queue and the socket of a flow that is
/// never quiet for [`DEFAULT_MAX_HOLD`] would hold it forever.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(1);
/// How long a newly tracked UDP flow stays on the kernel path before it is
/// first placed (frames that took it before steer counted them get there).
pub const DEFAULT_UDP_SETTLE: Duration = Duration::from_millis(2);

/// The attached RFS program and its maps.
///
/// ```no_run
/// use steer_xdp::rfs::RfsProgram;
/// use steer_xdp::{FlowMapKey, Proto, XdpMode};
/// # fn main() -> steer_xdp::Result<()> {
/// let rfs = RfsProgram::attach("eth1", XdpMode::Auto, false)?;
/// rfs.set_owned(Proto::Tcp, 7000, true)?;
/// rfs.enable_cpu(1, steer_xdp::rfs::DEFAULT_QUEUE_SIZE)?;
/// let flow = FlowMapKey::new(Proto::Tcp, "10.0.0.2:40000".parse().unwrap(), "10.0.0.1:7000".parse().unwrap());
/// rfs.track(&flow)?;
/// rfs.steer(&flow, 1)?; // its frames now go to CPU 1's stack
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[doc(alias("XDP_REDIRECT", "BPF_MAP_TYPE_CPUMAP", "RFS"))]
pub struct RfsProgram {
    // The drop counters on the xdp_cpumap_enqueue and xdp_redirect_err
    // tracepoints; destroyed with the other fields, right after `Drop`
    // detached the XDP program.
    _drops: [Link; 2],
    prog: Mutex<XdpProgram>,
    /// The namespace `ifindex` belongs to: the detach happens there.
    netns: sys::NetNs,
    ifindex: u32,
    interface: String,
    mode: XdpMode,
    cpus_possible: usize,
    cpumap_prog: OwnedFd,
    socket_prog: OwnedFd,
    owned: MapFd,
    desired: MapFd,
    state: MapFd,
    cpus: MapFd,
    settings: MapFd,
    stats: MapFd,
    enq: MapFd,
    deq: MapFd,
    llc: MapFd,
    /// The in-kernel recorder's tracepoint link, while it records.
    recorder: Mutex<Option<Link>>,
    /// The UDP recorder's cgroup links, once attached (with the cgroup).
    udp_recorder: Mutex<Vec<Link>>,
    /// Whether it runs in libxdp's dispatcher (seen at attach).
    dispatched: bool,
    /// The interface's owner lock, released after the drop detached.
    _lock: Arc<InterfaceLock>,
}

fn attach_mode(mode: XdpMode) -> AttachMode {
    match mode {
        XdpMode::Generic => AttachMode::SKB,
        _ => AttachMode::NATIVE,
    }
}

fn program_err(context: &'static str) -> impl Fn(std::io::Error) -> XdpError {
    move |source| XdpError::Program { context, source }
}

fn map_err(map: &'static str, hint: &'static str) -> impl Fn(std::io::Error) -> XdpError {
    move |source| XdpError::Map { map, source, hint }
}

impl RfsProgram {
    /// Loads the program and attaches it to `interface` in `mode` (`Auto`:
    /// native, else generic), after checking for one left by a crashed run
    /// (replaced when `replace_stale`) or another program.
    pub fn attach(interface: &str, mode: XdpMode, replace_stale: bool) -> Result<Self> {
        sys::check_privileges()?;
        let ifindex = sys::ifindex(interface)?;
        // Before anything is touched: while another steer process lives on
        // the interface this fails naming it; taken fresh, an RFS program
        // left attached is a dead run's, replaced without being asked.
        let (lock, shared) = InterfaceLock::acquire_noting(interface)?;
        let replace_stale = replace_stale || !shared;
        for p in attached_programs(ifindex) {
            if p.name == RFS_PROGRAM_NAME {
                if !replace_stale {
                    return Err(XdpError::StaleProgram {
                        interface: interface.into(),
                        id: p.id,
                    });
                }
                warn!(
                    interface,
                    id = p.id,
                    "replacing a steer RFS program left attached by an earlier run"
                );
                detach_stale(ifindex, RFS_PROGRAM_NAME)?;
            } else if !p.dispatched {
                return Err(XdpError::OtherProgram {
                    interface: interface.into(),
                    name: p.name,
                    id: p.id,
                });
            }
        }
        let modes = mode.attempts();
        let mut last = None;
        for &m in modes {
            match Self::try_attach(interface, ifindex, m, lock.clone()) {
                Ok(p) => {
                    info!(interface, mode = ?m, "steer RFS program attached");
                    p.log_checksum_handling();
                    return Ok(p);
                }
                Err(e) => {
                    debug!(interface, mode = ?m, error = %e, "RFS attach attempt failed");
                    last = Some((m, e));
                }
            }
        }
        let (m, e) = last.ok_or_else(|| XdpError::Config("no attach mode to try".into()))?;
        Err(XdpError::of_last_attach(interface, m, e))
    }

    fn try_attach(
        interface: &str,
        ifindex: u32,
        mode: XdpMode,
        lock: Arc<InterfaceLock>,
    ) -> Result<Self> {
        let cpus_possible = sys::possible_cpus()
            .map_err(|e| XdpError::io("reading /sys/devices/system/cpu/possible", e))?;
        let entries = u32::try_from(cpus_possible)
            .map_err(|_| XdpError::Config("too many possible CPUs".into()))?;
        let mut obj =
            BpfObject::open_mem(OBJECT).map_err(program_err("opening the embedded object"))?;
        for map in [CPUS, LLC] {
            obj.set_max_entries(map, entries)
                .map_err(program_err("sizing the per-CPU maps"))?;
        }
        for map in [ENQ, DEQ] {
            obj.set_max_entries(map, (entries + 1) * entries)
                .map_err(program_err("sizing the per-CPU maps"))?;
        }
        // From here the object is closed on every path (by XdpProgram's drop).
        let mut prog = XdpProgram::from_object(obj, "xdp")
            .map_err(program_err("creating the libxdp program"))?;
        let idx =
            i32::try_from(ifindex).map_err(|_| XdpError::Config("ifindex overflow".into()))?;
        // Loads the whole object (all three programs), then attaches.
        prog.attach(idx, attach_mode(mode))
            .map_err(program_err("attaching"))?;
        // Attached: detach if anything below fails.
        let detach_on_err = |prog: &mut XdpProgram, e: XdpError| {
            if let Err(d) = prog.detach(idx, attach_mode(mode)) {
                warn!(interface, error = %d, "detaching the RFS program failed");
            }
            e
        };
        let fds = (|| -> Result<_> {
            let dup = |name: &str| -> Result<OwnedFd> {
                prog.program_fd(name)
                    .and_then(|fd| fd.try_clone_to_owned())
                    .map_err(program_err("finding a program of the object"))
            };
            let map = |name: &str| {
                prog.map_fd(name, cpus_possible)
                    .map_err(program_err("finding a map"))
            };
            let tracepoint = |name: &str, tp: &str| {
                prog.attach_raw_tracepoint(name, tp)
                    .map_err(program_err("attaching the cpumap drop counters"))
            };
            let drops = [
                tracepoint(DROPS_PROGRAM, DROPS_TRACEPOINT)?,
                tracepoint(ERRORS_PROGRAM, ERRORS_TRACEPOINT)?,
            ];
            Ok((
                drops,
                dup(CPUMAP_PROGRAM)?,
                dup(SOCKET_PROGRAM)?,
                [
                    map(OWNED_PORTS)?,
                    map(DESIRED)?,
                    map(STATE)?,
                    map(CPUS)?,
                    map(SETTINGS)?,
                    map(STATS)?,
                    map(ENQ)?,
                    map(DEQ)?,
                    map(LLC)?,
                ],
            ))
        })();
        let (drops, cpumap_prog, socket_prog, maps) = match fds {
            Ok(f) => f,
            Err(e) => return Err(detach_on_err(&mut prog, e)),
        };
        let [owned, desired, state, cpus, settings, stats, enq, deq, llc] = maps;
        let cpumap_id = cpus.id();
        let netns = match sys::NetNs::current() {
            Ok(n) => n,
            Err(e) => {
                return Err(detach_on_err(
                    &mut prog,
                    XdpError::io("opening /proc/thread-self/ns/net", e),
                ))
            }
        };
        let this = RfsProgram {
            _drops: drops,
            prog: Mutex::new(prog),
            netns,
            ifindex,
            interface: interface.into(),
            mode,
            cpus_possible,
            cpumap_prog,
            socket_prog,
            owned,
            desired,
            state,
            cpus,
            settings,
            stats,
            enq,
            deq,
            llc,
            recorder: Mutex::new(None),
            udp_recorder: Mutex::new(Vec::new()),
            dispatched: attached_programs(ifindex).iter().any(|p| p.dispatched),
            _lock: lock,
        };
        // From here `this` detaches on every path (by its drop).
        let cpumap_id = cpumap_id.map_err(program_err("reading the cpumap's id"))?;
        this.set(Setting::Ncpus, u64::from(entries))?;
        this.set(Setting::CpumapId, u64::from(cpumap_id))?;
        this.set(Setting::Generic, u64::from(mode == XdpMode::Generic))?;
        // Generic mode hands the skb itself to the cpumap, checksum state
        // and all; native mode hands bytes.
        this.set_complete_checksums(mode != XdpMode::Generic)?;
        this.set_max_hold(DEFAULT_MAX_HOLD)?;
        this.set_max_wait(DEFAULT_MAX_WAIT)?;
        this.set_udp_settle(DEFAULT_UDP_SETTLE)?;
        this.set_order(RfsOrder::Socket)?;
        Ok(this)
    }

    /// Starts (or stops) steering the flows of `proto` arriving on local
    /// `port`. Frames of other ports always take the kernel path.
    pub fn set_owned(&self, proto: Proto, port: u16, owned: bool) -> Result<()> {
        let key = PortKey {
            proto: proto.number(),
            port,
        }
        .to_bytes();
        if owned {
            self.owned
                .update(&key, &1u32.to_ne_bytes(), 0)
                .map_err(map_err(OWNED_PORTS, "at most 256 owned ports"))
        } else {
            ignore_missing(self.owned.delete(&key))
                .map_err(map_err(OWNED_PORTS, "check `bpftool map`"))
        }
    }

    /// Creates CPU `cpu`'s cpumap entry: a queue of `queue_size` frames and a
    /// kernel thread on that CPU that runs the dequeue counter, then the
    /// stack. Flows are steered only to CPUs with an entry (the others pass).
    pub fn enable_cpu(&self, cpu: u32, queue_size: u32) -> Result<()> {
        use std::os::fd::AsRawFd;
        let fd = self.cpumap_prog.as_raw_fd();
        let mut value = [0u8; 8];
        value[..4].copy_from_slice(&queue_size.to_ne_bytes());
        value[4..].copy_from_slice(&fd.to_ne_bytes());
        self.cpus
            .update(&cpu.to_ne_bytes(), &value, 0)
            .map_err(map_err(
                CPUS,
                "the CPU must be possible and online, the queue size at most 16384",
            ))
    }

    /// Removes CPU `cpu`'s cpumap entry (its flows then pass to the kernel).
    pub fn disable_cpu(&self, cpu: u32) -> Result<()> {
        ignore_missing(self.cpus.delete(&cpu.to_ne_bytes()))
            .map_err(map_err(CPUS, "check `bpftool map`"))
    }

    /// Starts tracking `flow`: creates its state entry (the programs count
    /// its frames from now on). Tracking an already tracked flow does nothing.
    pub fn track(&self, flow: &FlowMapKey) -> Result<()> {
        let state = RfsFlow::fresh(sys::monotonic_ns());
        match self
            .state
            .update(&flow.to_bytes(), &state.to_bytes(), BPF_NOEXIST)
        {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            r => r.map_err(map_err(
                STATE,
                "at most 65536 tracked flows: forget idle ones",
            )),
        }
    }

    /// Steers `flow` to CPU `cpu` (one map write: the costly update). The
    /// program moves the flow when the move rule allows it, at the latest
    /// after the maximum hold time.
    #[doc(alias = "ndo_rx_flow_steer")]
    pub fn steer(&self, flow: &FlowMapKey, cpu: u32) -> Result<()> {
        let mut value = [0u8; 8];
        value[..4].copy_from_slice(&cpu.to_ne_bytes());
        self.desired
            .update(&flow.to_bytes(), &value, 0)
            .map_err(map_err(
                DESIRED,
                "at most 65536 steered flows: forget idle ones",
            ))
    }

    /// Stops steering `flow` and forgets its state: its frames take the
    /// kernel path again. Forgetting an unknown flow does nothing.
    pub fn forget(&self, flow: &FlowMapKey) -> Result<()> {
        let key = flow.to_bytes();
        ignore_missing(self.desired.delete(&key))
            .map_err(map_err(DESIRED, "check `bpftool map`"))?;
        ignore_missing(self.state.delete(&key)).map_err(map_err(STATE, "check `bpftool map`"))
    }

    /// The CPU `flow` is steered to, if any.
    pub fn desired(&self, flow: &FlowMapKey) -> Result<Option<u32>> {
        let mut value = [0u8; 8];
        match self.desired.lookup(&flow.to_bytes(), &mut value) {
            Ok(()) => Ok(Some(u32::from_ne_bytes([
                value[0], value[1], value[2], value[3],
            ]))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(map_err(DESIRED, "check `bpftool map`")(e)),
        }
    }

    /// What the programs keep for `flow`, if it is tracked.
    pub fn flow(&self, flow: &FlowMapKey) -> Result<Option<RfsFlow>> {
        let mut value = [0u8; RfsFlow::LEN];
        match self.state.lookup(&flow.to_bytes(), &mut value) {
            Ok(()) => Ok(Some(RfsFlow::from_bytes(&value))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(map_err(STATE, "check `bpftool map`")(e)),
        }
    }

    /// Every tracked flow and its state (a walk of the state map: flows
    /// made or forgotten meanwhile may be missed). The sweeper calls this
    /// every period: it reads the map [`TRACKED_CHUNK`] entries a system
    /// call (`BPF_MAP_LOOKUP_BATCH`), where a walk key by key would make
    /// two calls a flow; a kernel without batch lookups (or a seccomp filter
    /// refusing them) gets the walk.
    pub fn tracked(&self) -> Result<Vec<(FlowMapKey, RfsFlow)>> {
        match self.state.entries(TRACKED_CHUNK) {
            Ok(entries) => Ok(entries
                .into_iter()
                .filter_map(|(k, v)| {
                    let v: &[u8; RfsFlow::LEN] = v.as_slice().try_into().ok()?;
                    Some((FlowMapKey::from_bytes(&k)?, RfsFlow::from_bytes(v)))
                })
                .collect()),
            // EPERM: a seccomp filter that refuses the command.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM)
                ) =>
            {
                debug!(error = %e, "no batch lookups: walking the state map key by key");
                self.tracked_by_keys()
            }
            Err(e) => Err(map_err(STATE, "check `bpftool map`")(e)),
        }
    }

    /// [`RfsProgram::tracked`] key by key (`bpf_map_get_next_key`, then a
    /// lookup each).
    pub fn tracked_by_keys(&self) -> Result<Vec<(FlowMapKey, RfsFlow)>> {
        let keys = self
            .state
            .keys()
            .map_err(map_err(STATE, "check `bpftool map`"))?;
        let mut flows = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(flow) = FlowMapKey::from_bytes(&key) else {
                continue;
            };
            if let Some(state) = self.flow(&flow)? {
                flows.push((flow, state));
            }
        }
        Ok(flows)
    }

    /// Attaches the program's socket filter to the UDP socket `socket`: it
    /// counts the frames of tracked flows that reach the socket, which the
    /// UDP move rule waits for. It replaces any filter the socket had, keeps
    /// every datagram, and goes away with the socket.
    pub fn attach_socket(&self, socket: BorrowedFd<'_>) -> Result<()> {
        sys::attach_socket_filter(socket, self.socket_prog.as_fd())
            .map_err(|e| XdpError::io("attaching the RFS socket filter (SO_ATTACH_BPF)", e))
    }

    /// Records in the kernel: whenever an application reads a connected TCP
    /// socket of an owned port (or a connected UDP one, once
    /// [`RfsProgram::record_udp_in_kernel`] keys UDP flows by sender), the
    /// reading CPU becomes the flow's desired
    /// CPU under `rule` (a BPF program on the `sock_recv_length`
    /// tracepoint: `rps_record_sock_flow` for applications that never call
    /// steer). `llc_of` gives the LLC of each CPU flows may be steered to
    /// (each needs a cpumap entry, [`RfsProgram::enable_cpu`]); reads on
    /// other CPUs are ignored. [`RfsRecord::Off`] stops recording. Needs
    /// CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) to attach.
    ///
    /// ```no_run
    /// use steer_xdp::rfs::{RfsProgram, RfsRecord};
    /// use steer_xdp::{Proto, XdpMode};
    /// # fn main() -> steer_xdp::Result<()> {
    /// let rfs = RfsProgram::attach("eth1", XdpMode::Auto, false)?;
    /// rfs.set_owned(Proto::Tcp, 5201, true)?;
    /// for cpu in 0..4 {
    ///     rfs.enable_cpu(cpu, steer_xdp::rfs::DEFAULT_QUEUE_SIZE)?;
    /// }
    /// // CPUs 0-1 share an LLC, 2-3 another.
    /// rfs.record_in_kernel(RfsRecord::Llc, &[(0, 0), (1, 0), (2, 1), (3, 1)])?;
    /// # Ok(()) }
    /// ```
    pub fn record_in_kernel(&self, rule: RfsRecord, llc_of: &[(u32, u32)]) -> Result<()> {
        let mut recorder = self.recorder.lock().unwrap_or_else(PoisonError::into_inner);
        if rule == RfsRecord::Off {
            self.set(Setting::Record, rule.code())?;
            *recorder = None;
            return Ok(());
        }
        self.set_record_rule(rule, llc_of)?;
        if recorder.is_none() {
            let prog = self.prog.lock().unwrap_or_else(PoisonError::into_inner);
            let link = prog
                .attach_raw_tracepoint(RECORD_PROGRAM, RECORD_TRACEPOINT)
                .map_err(|e| {
                    if e.raw_os_error() == Some(libc::ENOENT) {
                        // Older kernels (Debian 12's 6.1) lack it.
                        XdpError::Config(format!(
                            "this kernel has no {RECORD_TRACEPOINT} tracepoint: the reads of \
                             connected sockets (TCP ports, connected UDP) cannot be recorded in \
                             the kernel here; UDP ports read with the sender's address can \
                             (drop the TCP ports and --connected-udp)"
                        ))
                    } else {
                        program_err(
                            "attaching the in-kernel recorder (needs CAP_BPF and CAP_PERFMON)",
                        )(e)
                    }
                });
            match link {
                Ok(l) => *recorder = Some(l),
                Err(e) => {
                    self.set(Setting::Record, RfsRecord::Off.code())?;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The in-kernel recorders' rule and the LLC of each CPU they may
    /// choose (see [`RfsProgram::record_in_kernel`]), without attaching the
    /// TCP tracepoint: what a UDP-only recorder
    /// ([`RfsProgram::record_udp_in_kernel`]) needs, sparing every read of
    /// every socket on the host the tracepoint's program.
    /// [`RfsRecord::Off`] stops both recorders.
    pub fn set_record_rule(&self, rule: RfsRecord, llc_of: &[(u32, u32)]) -> Result<()> {
        for cpu in 0..self.cpus_possible as u32 {
            let llc = llc_of
                .iter()
                .find(|&&(c, _)| c == cpu)
                .map_or(NO_LLC, |&(_, l)| l.min(NO_LLC - 1));
            self.llc
                .update(&cpu.to_ne_bytes(), &llc.to_ne_bytes(), 0)
                .map_err(map_err(
                    LLC,
                    "the CPUs must be below the possible CPU count",
                ))?;
        }
        self.set(Setting::Record, rule.code())
    }

    /// Records UDP in the kernel too, for the sockets of the cgroup (v2)
    /// directory `cgroup` and its descendants (the root cgroup: every
    /// process): whenever an application reads a datagram of an owned UDP
    /// port and asks for its sender (`recvfrom`, `recvmsg` with a name: what
    /// an unconnected server does to answer it), the reading CPU becomes
    /// the desired CPU of the flow from that sender, under the rule and
    /// LLCs [`RfsProgram::set_record_rule`] (or
    /// [`RfsProgram::record_in_kernel`], with TCP) set: call one first; its
    /// [`RfsRecord::Off`] stops this recorder too. The flow is keyed by the
    /// sender and any local address (a wildcard socket does not know which
    /// of its addresses a datagram was sent to). A cgroup skb ingress
    /// program beside the hooks counts those flows' datagrams as they reach
    /// their sockets, which the UDP move rule waits for, as it waits for
    /// [`RfsProgram::attach_socket`]'s filter. Attaching again adds nothing.
    /// Needs CAP_BPF and CAP_NET_ADMIN; the programs leave the cgroup when
    /// the program is dropped.
    ///
    /// ```no_run
    /// use steer_xdp::rfs::{RfsProgram, RfsRecord};
    /// use steer_xdp::{Proto, XdpMode};
    /// # fn main() -> steer_xdp::Result<()> {
    /// let rfs = RfsProgram::attach("eth1", XdpMode::Auto, false)?;
    /// rfs.set_owned(Proto::Udp, 53, true)?;
    /// rfs.enable_cpu(0, steer_xdp::rfs::DEFAULT_QUEUE_SIZE)?;
    /// rfs.enable_cpu(1, steer_xdp::rfs::DEFAULT_QUEUE_SIZE)?;
    /// rfs.set_record_rule(RfsRecord::Llc, &[(0, 0), (1, 0)])?;
    /// rfs.record_udp_in_kernel(std::path::Path::new("/sys/fs/cgroup"))?;
    /// # Ok(()) }
    /// ```
    pub fn record_udp_in_kernel(&self, cgroup: &std::path::Path) -> Result<()> {
        let mut links = self
            .udp_recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !links.is_empty() {
            return Ok(());
        }
        let dir = std::fs::File::open(cgroup).map_err(|e| {
            XdpError::Config(format!(
                "opening the cgroup {} (a cgroup v2 directory): {e}",
                cgroup.display()
            ))
        })?;
        // The counter and the lookups first: a flow the hooks record is
        // counted from its first datagram on.
        self.set(Setting::UdpAny, 1)?;
        let prog = self.prog.lock().unwrap_or_else(PoisonError::into_inner);
        let mut attached = Vec::with_capacity(UDP_RECORD_PROGRAMS.len());
        for name in UDP_RECORD_PROGRAMS {
            match prog.attach_cgroup(name, dir.as_fd()) {
                Ok(l) => attached.push(l),
                Err(e) => {
                    drop(attached);
                    self.set(Setting::UdpAny, 0)?;
                    return Err(program_err(
                        "attaching the UDP recorder to the cgroup (needs a cgroup v2 directory, CAP_BPF and CAP_NET_ADMIN)",
                    )(e));
                }
            }
        }
        *links = attached;
        Ok(())
    }

    /// Whether the tracepoint recorder is attached: it records the reads
    /// of connected sockets (TCP, and UDP once
    /// [`RfsProgram::record_udp_in_kernel`] keys UDP flows by sender).
    pub fn records_connected(&self) -> bool {
        self.recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Whether the UDP recorder's cgroup programs are attached.
    pub fn records_udp(&self) -> bool {
        !self
            .udp_recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Chooses the rule that lets a flow leave the CPU serving it.
    pub fn set_order(&self, order: RfsOrder) -> Result<()> {
        self.set(Setting::Order, order.code())
    }

    /// How long a UDP flow whose move is held must be quiet (no frame
    /// between two held ones) before the move is forced (and counted in
    /// [`RfsStats::forced`]): a frame lost between the cpumap queue and the
    /// socket would otherwise hold it forever. A busy flow waits, as under
    /// the kernel's RFS. TCP moves are never forced (a lost segment is
    /// retransmitted along the held path).
    pub fn set_max_hold(&self, hold: Duration) -> Result<()> {
        self.set(Setting::MaxHold, duration_ns(hold))
    }

    /// How long a UDP move may be held in all, the flow busy or not, before
    /// it is forced (and counted in [`RfsStats::forced`]): a frame lost
    /// between the cpumap queue and the socket of a flow that is never quiet
    /// for the maximum hold would hold it forever. Either way, what was
    /// missing is forgotten once the move is forced: it does not hold the
    /// flow's later moves.
    pub fn set_max_wait(&self, wait: Duration) -> Result<()> {
        self.set(Setting::MaxWait, duration_ns(wait))
    }

    /// How long a newly tracked UDP flow stays on the kernel path before its
    /// first placement.
    pub fn set_udp_settle(&self, settle: Duration) -> Result<()> {
        self.set(Setting::UdpSettle, duration_ns(settle))
    }

    fn set(&self, which: Setting, value: u64) -> Result<()> {
        self.settings
            .update(&(which as u32).to_ne_bytes(), &value.to_ne_bytes(), 0)
            .map_err(map_err(SETTINGS, "check `bpftool map`"))
    }

    /// Whether the program completes partial checksums before it redirects
    /// a frame (on by default in native mode; see [`RfsStats::csum_completed`]).
    /// Off, a local sender through veth that leaves its checksum to the
    /// device has every steered segment dropped by the stack as corrupt
    /// (TcpInCsumErrors): kept switchable for measuring that.
    pub fn set_complete_checksums(&self, on: bool) -> Result<()> {
        self.set(Setting::CompleteChecksums, u64::from(on))
    }

    /// Says at start what the program does about partial checksums on this
    /// device, where it matters.
    fn log_checksum_handling(&self) {
        let driver = crate::nic::driver(&self.interface).unwrap_or_default();
        if !crate::nic::hands_partial_checksums(&driver) {
            debug!(interface = %self.interface, driver, "no partial checksums expected");
        } else if self.mode == XdpMode::Generic {
            info!(
                interface = %self.interface,
                driver,
                "generic XDP: redirected frames keep their partial-checksum state"
            );
        } else {
            info!(
                interface = %self.interface,
                driver,
                "native XDP: partial checksums (local senders) are completed before the cpumap redirect"
            );
        }
    }

    /// Whether the program runs in libxdp's dispatcher (detaching it then
    /// needs CAP_SYS_ADMIN and CAP_BPF beside CAP_NET_ADMIN).
    pub fn dispatched(&self) -> bool {
        self.dispatched
    }

    /// The value of counter `stat` on each possible CPU.
    fn per_cpu(&self, stat: Stat) -> Result<Vec<u64>> {
        let mut vals = self
            .stats
            .lookup_per_cpu(&(stat as u32).to_ne_bytes())
            .map_err(map_err(STATS, "check `bpftool map`"))?;
        vals.truncate(self.cpus_possible);
        Ok(vals)
    }

    /// The program's counters, summed over CPUs.
    pub fn stats(&self) -> Result<RfsStats> {
        let mut sums = [0u64; Stat::ALL.len()];
        for (slot, stat) in sums.iter_mut().zip(Stat::ALL) {
            *slot = self.per_cpu(stat)?.iter().sum();
        }
        Ok(RfsStats::from_sums(sums))
    }

    /// Frames each CPU's cpumap program saw (index = CPU): where steered
    /// frames were handed to the stack.
    pub fn landed_per_cpu(&self) -> Result<Vec<u64>> {
        self.per_cpu(Stat::Landed)
    }

    /// Frames the XDP program redirected into a cpumap queue, by the CPU
    /// it ran on (index = CPU: the receiving CPU, before the hand-off).
    pub fn redirected_per_cpu(&self) -> Result<Vec<u64>> {
        self.per_cpu(Stat::Redirected)
    }

    /// UDP frames of tracked flows the socket filter saw on each CPU.
    pub fn delivered_per_cpu(&self) -> Result<Vec<u64>> {
        self.per_cpu(Stat::Delivered)
    }

    /// The queue counters of rx CPU `src` (`None`: frames whose rx CPU the
    /// cpumap program could not see, in generic mode) towards CPU `dst`:
    /// frames enqueued, and frames dequeued or dropped by the queue. Equal
    /// when nothing `src` sent is still queued for `dst`.
    pub fn queue_counts(&self, src: Option<u32>, dst: u32) -> Result<(u64, u64)> {
        let n = self.cpus_possible as u32;
        let idx = src.unwrap_or(n) * n + dst;
        let read = |m: &MapFd, name: &'static str| -> Result<u64> {
            let mut v = [0u8; 8];
            m.lookup(&idx.to_ne_bytes(), &mut v).map_err(map_err(
                name,
                "the CPUs must be below the possible CPU count",
            ))?;
            Ok(u64::from_ne_bytes(v))
        };
        Ok((read(&self.enq, ENQ)?, read(&self.deq, DEQ)?))
    }

    /// The attach mode in use (never `Auto`).
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The interface the program is attached to.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The kernel's id of the XDP program.
    pub fn id(&self) -> u32 {
        self.prog.lock().map_or(0, |p| p.id())
    }
}

/// A delete of a missing key is not an error.
fn ignore_missing(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        r => r,
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Drop for RfsProgram {
    fn drop(&mut self) {
        // The recorders first: nothing writes the maps once they are gone.
        drop(
            self.recorder
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        self.udp_recorder
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let prog = match self.prog.get_mut() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        // In the namespace it was attached from (the dropping thread may be
        // in another one, where the ifindex names some other device).
        let (ifindex, mode) = (self.ifindex as i32, attach_mode(self.mode));
        // Alone on the hook, a netlink detach of this program's fd needs
        // only CAP_NET_ADMIN (what a process that dropped the rest keeps);
        // libxdp's own detach looks programs up by id (CAP_SYS_ADMIN),
        // which its dispatcher needs anyway, and is the fallback: from a
        // helper thread that entered the namespace for it, the former
        // fails with EINVAL (seen in the tests; why is not known yet).
        let dispatched = self.dispatched;
        let detached = self
            .netns
            .run(|| {
                if !dispatched && detach_netlink(ifindex, mode, prog.fd()).is_ok() {
                    return Ok(());
                }
                prog.detach(ifindex, mode)
            })
            .and_then(|r| r);
        match detached {
            Err(e) => {
                warn!(interface = %self.interface, error = %e, "detaching the steer RFS program failed")
            }
            Ok(()) => debug!(interface = %self.interface, "steer RFS program detached"),
        }
    }
}
