//! The steer XDP program (`bpf/steer_xdp.c`): embedded object, attaching
//! with fallbacks (device-bound native, native, generic), its maps (sockets,
//! owned ports, flow steering, settings, statistics), and detaching on drop.
//! The map keys in the byte layouts of bpf/steer_xdp.h are in `keys`; what
//! else is attached to the interface (a program left by a crashed run,
//! somebody else's) in `attached`; the owner record in `owner`. The
//! libxdp/libbpf calls themselves are in `sys::libxdp`; this module is safe
//! Rust.
//!
//! # A crash leaves nothing behind
//!
//! By default ([`XdpAttach::Link`]) the program is attached through a
//! bpf_link whose only file descriptor this process holds: when the process
//! ends, however it ends (`SIGKILL` too), the kernel closes the link and
//! detaches the program, and the interface is back to the kernel's own
//! path. With [`XdpAttach::Netlink`] (libxdp's attach, which also lets
//! libxdp's dispatcher run other programs beside steer's) the program
//! outlives a killed owner; its sockets do not, and a closed AF_XDP socket
//! leaves the socket map, so the program's redirect falls back to
//! `XDP_PASS` and owned traffic reaches the kernel's sockets all the same.
//!
//! Either way the program carries an owner record (pid and start time, in
//! its `settings` map). A new engine reads it: a live owner is refused by
//! name ([`XdpError::Served`]); a dead owner's program is replaced, and
//! [`SteerProgram::replaced`] says so.
//!
//! Invariant: while a [`SteerProgram`] exists its program is attached to its
//! interface and its maps exist; `Drop` detaches it (closing the link, or
//! through netlink), and the libxdp/libbpf objects are freed exactly once
//! right after.

/// The XDP programs attached to an interface; removing steer's leftovers.
mod attached;
/// The new-flow gate.
mod gate;
/// The map keys, byte by byte.
mod keys;
/// The owner record.
mod owner;

use std::{io, os::fd::RawFd, sync::Arc};

use tracing::{debug, info, warn};

use crate::{
    config::{Proto, XdpAttach, XdpMode},
    error::{Result, XdpError},
    owner_lock::InterfaceLock,
    sys::libxdp::{
        detach_netlink, detach_netlink_by_id, per_cpu_values, program_id, AttachMode, BpfObject,
        Map, XdpLink, XdpProgram,
    },
};

pub(crate) use attached::detach_stale;
pub use attached::{attached_programs, AttachedProgram};
pub use gate::{AdmissionGate, GateCounts, GATE_SLOTS};
pub use keys::FlowMapKey;
pub(crate) use keys::PortKey;
pub use owner::ProgramOwner;

/// The compiled program (clang -O2 -g -target bpf, see build.rs).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/steer_xdp.o"));
/// The same with the rx-hash kfunc call; loads only device-bound (native mode).
static OBJECT_RXHASH: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/steer_xdp_rxhash.o"));

/// The program's name as the kernel knows it (the C function's name).
pub const PROGRAM_NAME: &str = "steer_xdp";

/// `BPF_F_XDP_DEV_BOUND_ONLY` (linux/bpf.h): lets the verifier bind the
/// metadata kfuncs to the device's implementation.
const BPF_F_XDP_DEV_BOUND_ONLY: u32 = 1 << 6;

/// The program's maps (names in bpf/steer_xdp.c).
const XSKS_MAP: &str = "xsks_map";
const OWNED_PORTS: &str = "owned_ports";
const FLOW_SOCKS: &str = "flow_socks";
const STATS: &str = "stats";
const SETTINGS: &str = "settings";
const ADMITTED: &str = "admitted";

/// Counters the program keeps (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramStats {
    /// Frames redirected to an AF_XDP socket.
    pub redirected: u64,
    /// Frames passed to the kernel (not owned by steer).
    pub passed: u64,
    /// Owned frames whose flow had an entry in the flow-steering map.
    pub flow_hits: u64,
    /// Frames for which the driver supplied an rx hash.
    pub hash_ok: u64,
    /// Owned frames with no socket to go to (passed to the kernel).
    pub redirect_failed: u64,
    /// Owned frames dropped in XDP ([`OwnedAction::Drop`]).
    pub dropped: u64,
    /// Frames redirected that carried one or two VLAN tags (802.1Q, QinQ).
    pub vlan_tagged: u64,
    /// First datagrams of flows the engine has not admitted, dropped at
    /// the closed new-flow gate ([`AdmissionGate`]).
    pub gate_dropped: u64,
    /// Retries of flows dropped at the gate, let through it.
    pub gate_retries: u64,
}

/// What the program does with owned traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(alias = "XDP_REDIRECT")]
#[doc(alias = "XDP_DROP")]
pub enum OwnedAction {
    /// Redirect to the queue's AF_XDP socket (normal operation).
    Redirect,
    /// Drop in XDP after parsing: the kernel-only ceiling for benchmarks.
    Drop,
    /// Pass to the kernel, as traffic steer does not own (an engine with
    /// no worker left fails open: the kernel's sockets on the port get it).
    Pass,
}

impl OwnedAction {
    /// The value of `settings[SETTING_OWNED_ACTION]`.
    fn code(self) -> u32 {
        match self {
            Self::Redirect => 0,
            Self::Drop => 1,
            Self::Pass => 2,
        }
    }
}

/// Switches what the program does with owned traffic from any thread, after
/// the [`SteerProgram`] was moved into its owner (a duplicate of the
/// settings map's descriptor: it stays valid while the program is
/// attached, and a write after the detach changes nothing).
#[derive(Debug)]
pub struct OwnedActionSwitch {
    settings: crate::sys::libxdp::MapFd,
}

impl OwnedActionSwitch {
    /// Sets what the program does with owned traffic.
    pub fn set(&self, action: OwnedAction) -> Result<()> {
        self.settings
            .update(&0u32.to_ne_bytes(), &action.code().to_ne_bytes(), 0)
            .map_err(|source| XdpError::Map {
                map: SETTINGS,
                source,
                hint: "check `bpftool map`",
            })
    }
}

/// How the program is held on the interface.
#[derive(Debug)]
enum Hook {
    /// Through a bpf_link (declared first: closed, so detached, before the
    /// object is).
    Link {
        _link: XdpLink,
        obj: BpfObject,
        id: u32,
    },
    /// Through netlink, by libxdp; `dispatched`: as a component of libxdp's
    /// dispatcher (else alone on the hook).
    Netlink { prog: XdpProgram, dispatched: bool },
}

/// A steer program left by an engine that is gone, replaced at attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replaced {
    /// The kernel's id of the program that was replaced.
    pub id: u32,
    /// Its recorded owner (gone), when it had a record.
    pub owner: Option<ProgramOwner>,
}

/// An attached steer XDP program and its maps.
#[derive(Debug)]
pub struct SteerProgram {
    hook: Hook,
    ifindex: u32,
    interface: String,
    mode: XdpMode,
    dev_bound: bool,
    steering_calls: u64,
    replaced: Option<Replaced>,
    /// The new-flow gate, once asked for.
    gate: Option<Arc<AdmissionGate>>,
    /// The interface's owner lock, released after the drop detached.
    _lock: Arc<InterfaceLock>,
}

/// libxdp's attach mode for `mode` (`Auto` attaches natively).
fn attach_mode(mode: XdpMode) -> AttachMode {
    match mode {
        XdpMode::Generic => AttachMode::SKB,
        _ => AttachMode::NATIVE,
    }
}

/// An `XdpError::Program` for a failed step.
fn program_err(context: &'static str) -> impl FnOnce(io::Error) -> XdpError {
    move |source| XdpError::Program { context, source }
}

impl SteerProgram {
    /// Loads the program and attaches it to `interface` (index `ifindex`) in
    /// `mode`, held as `attach` says, after checking what is attached
    /// already: a steer program whose owner is alive refuses
    /// ([`XdpError::Served`]); one whose owner is gone is replaced
    /// ([`SteerProgram::replaced`]); one without an owner record (an older
    /// steer's) is replaced only with `replace_stale`
    /// ([`XdpError::StaleProgram`] otherwise).
    pub fn attach(
        interface: &str,
        ifindex: u32,
        mode: XdpMode,
        attach: XdpAttach,
        replace_stale: bool,
    ) -> Result<Self> {
        // Before anything is touched: while another steer process lives on
        // the interface this fails naming it; taken fresh, whatever steer
        // left attached is nobody's.
        let (lock, shared) = InterfaceLock::acquire_noting(interface)?;
        let replace_stale = replace_stale || !shared;
        let mut replaced = None;
        let mut attach = attach;
        for p in attached_programs(ifindex) {
            if p.is_steer() {
                match p.owner {
                    Some(owner) if owner.is_alive() && owner.pid != std::process::id() => {
                        return Err(XdpError::Served {
                            interface: interface.into(),
                            pid: owner.pid,
                            id: p.id,
                        });
                    }
                    Some(owner) if !owner.is_alive() => {}
                    _ if replace_stale => {}
                    _ => {
                        return Err(XdpError::StaleProgram {
                            interface: interface.into(),
                            id: p.id,
                        })
                    }
                }
                debug!(interface, id = p.id, owner = ?p.owner, "replacing a steer XDP program whose owner is gone");
                detach_stale(ifindex, PROGRAM_NAME)?;
                replaced = Some(Replaced {
                    id: p.id,
                    owner: p.owner,
                });
            } else if !p.dispatched {
                return Err(XdpError::OtherProgram {
                    interface: interface.into(),
                    name: p.name,
                    id: p.id,
                });
            } else if attach == XdpAttach::Link {
                // libxdp's dispatcher holds the hook through netlink, and a
                // link cannot join it: run beside it through libxdp.
                debug!(interface, other = %p.name, "other programs run through libxdp's dispatcher: attaching through it");
                attach = XdpAttach::Netlink;
            }
        }
        let mut program = Self::attach_with_fallbacks(interface, ifindex, mode, attach, lock)?;
        program.replaced = replaced;
        // Attached: from here `program` detaches on every path (by its drop).
        if let Some(owner) = ProgramOwner::current() {
            for (key, value) in owner.to_settings() {
                program.update(
                    SETTINGS,
                    &key.to_ne_bytes(),
                    &value.to_ne_bytes(),
                    "check `bpftool map`",
                )?;
            }
        }
        Ok(program)
    }

    fn attach_with_fallbacks(
        interface: &str,
        ifindex: u32,
        mode: XdpMode,
        attach: XdpAttach,
        lock: Arc<InterfaceLock>,
    ) -> Result<Self> {
        // Device-bound native first (rx-hash kfunc), then plain native, then generic.
        let attempts: &[(XdpMode, bool)] = match mode {
            XdpMode::Auto => &[
                (XdpMode::Native, true),
                (XdpMode::Native, false),
                (XdpMode::Generic, false),
            ],
            XdpMode::Native => &[(XdpMode::Native, true), (XdpMode::Native, false)],
            XdpMode::Generic => &[(XdpMode::Generic, false)],
        };
        let mut last = None;
        for &(m, dev_bound) in attempts {
            match Self::try_attach(interface, ifindex, m, dev_bound, attach, lock.clone()) {
                Ok(p) => {
                    if mode == XdpMode::Auto && m == XdpMode::Generic {
                        warn!(
                            interface,
                            "native XDP unavailable, running in generic (skb) mode"
                        );
                    }
                    if !dev_bound {
                        info!(interface, "rx hash metadata unavailable (program not device-bound): the dispatcher must hash");
                    }
                    info!(interface, mode = ?m, dev_bound, "steer XDP program attached");
                    return Ok(p);
                }
                Err(e) => {
                    debug!(interface, mode = ?m, dev_bound, error = %e, "attach attempt failed");
                    last = Some((m, e));
                }
            }
        }
        let (m, e) = last.ok_or_else(|| XdpError::Config("no attach attempt".into()))?;
        Err(match XdpError::of_last_attach(interface, m, e) {
            XdpError::Program {
                context: "attaching",
                source,
            } if matches!(source.raw_os_error(), Some(libc::EEXIST | libc::EBUSY)) => {
                let other = attached_programs(ifindex).into_iter().next();
                let (name, id) = other
                    .map(|p| (p.name, p.id))
                    .unwrap_or_else(|| ("unknown".into(), 0));
                XdpError::OtherProgram {
                    interface: interface.into(),
                    name,
                    id,
                }
            }
            e => e,
        })
    }

    fn try_attach(
        interface: &str,
        ifindex: u32,
        mode: XdpMode,
        dev_bound: bool,
        attach: XdpAttach,
        lock: Arc<InterfaceLock>,
    ) -> Result<Self> {
        let image = if dev_bound { OBJECT_RXHASH } else { OBJECT };
        let mut obj =
            BpfObject::open_mem(image).map_err(program_err("opening the embedded object"))?;
        if dev_bound {
            obj.bind_program(PROGRAM_NAME, ifindex, BPF_F_XDP_DEV_BOUND_ONLY)
                .map_err(program_err("finding the program"))?;
        }
        let idx =
            i32::try_from(ifindex).map_err(|_| XdpError::Config("ifindex overflow".into()))?;
        // Not attached on error: dropping `obj` or `prog` closes it without a detach.
        let hook = match attach {
            XdpAttach::Link => {
                obj.load().map_err(program_err("loading"))?;
                let fd = obj
                    .program_fd(PROGRAM_NAME)
                    .map_err(program_err("finding the program"))?;
                let id = program_id(fd).map_err(program_err("reading the program's id"))?;
                let link = XdpLink::create(fd, idx, attach_mode(mode))
                    .map_err(program_err("attaching"))?;
                Hook::Link {
                    _link: link,
                    obj,
                    id,
                }
            }
            XdpAttach::Netlink => {
                // From here the object is closed on every path (by XdpProgram's drop).
                let mut prog = XdpProgram::from_object(obj, "xdp.frags")
                    .map_err(program_err("creating the libxdp program"))?;
                prog.attach(idx, attach_mode(mode))
                    .map_err(program_err("attaching"))?;
                let dispatched = attached_programs(ifindex).iter().any(|p| p.dispatched);
                Hook::Netlink { prog, dispatched }
            }
        };
        let this = SteerProgram {
            hook,
            ifindex,
            interface: interface.into(),
            mode,
            dev_bound,
            steering_calls: 0,
            replaced: None,
            gate: None,
            _lock: lock,
        };
        // Attached: from here `this` detaches on every path (by its drop).
        for name in [XSKS_MAP, OWNED_PORTS, FLOW_SOCKS, STATS, SETTINGS, ADMITTED] {
            this.map(name)?;
        }
        Ok(this)
    }

    /// The program's map `name` (present since `try_attach` checked it).
    fn map(&self, name: &str) -> Result<Map<'_>> {
        match &self.hook {
            Hook::Link { obj, .. } => obj.map(name),
            Hook::Netlink { prog, .. } => prog.map(name),
        }
        .map_err(program_err("finding a map"))
    }

    /// Sets `key` to `value` in map `name`.
    fn update(
        &self,
        name: &'static str,
        key: &[u8],
        value: &[u8],
        hint: &'static str,
    ) -> Result<()> {
        self.map(name)?
            .update(key, value)
            .map_err(|source| XdpError::Map {
                map: name,
                source,
                hint,
            })
    }

    /// Removes `key` from map `name`; a missing key is not an error.
    fn delete(&self, name: &'static str, key: &[u8]) -> Result<()> {
        match self.map(name)?.delete(key) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(XdpError::Map {
                map: name,
                source: e,
                hint: "check `bpftool map`",
            }),
            _ => Ok(()),
        }
    }

    /// Starts (or stops) redirecting traffic to `port` of `proto`.
    pub fn set_owned(&mut self, proto: Proto, port: u16, owned: bool) -> Result<()> {
        let key = PortKey {
            proto: proto.number(),
            port,
        }
        .to_bytes();
        if owned {
            self.update(
                OWNED_PORTS,
                &key,
                &1u32.to_ne_bytes(),
                "at most 256 owned ports",
            )
        } else {
            self.delete(OWNED_PORTS, &key)
        }
    }

    /// Sets what happens to owned traffic (redirect, or drop for measuring
    /// the kernel-only ceiling).
    pub fn set_owned_action(&mut self, action: OwnedAction) -> Result<()> {
        self.update(
            SETTINGS,
            &0u32.to_ne_bytes(),
            &action.code().to_ne_bytes(),
            "check `bpftool map`",
        )
    }

    /// A handle that sets the owned action from another thread.
    pub fn owned_action_switch(&self) -> Result<OwnedActionSwitch> {
        let settings = self
            .map(SETTINGS)?
            .to_map_fd(1)
            .map_err(program_err("duplicating the settings map's descriptor"))?;
        Ok(OwnedActionSwitch { settings })
    }

    /// The program's new-flow gate (made, keyed and opened at the first
    /// call; the same gate after).
    pub fn admission_gate(&mut self) -> Result<Arc<AdmissionGate>> {
        if let Some(gate) = &self.gate {
            return Ok(Arc::clone(gate));
        }
        let cpus = crate::sys::possible_cpus()
            .map_err(|e| XdpError::io("reading /sys/devices/system/cpu/possible", e))?;
        let fd = |name: &'static str, cpus: usize| {
            self.map(name)?
                .to_map_fd(cpus)
                .map_err(program_err("duplicating a gate map's descriptor"))
        };
        let gate = Arc::new(AdmissionGate::new(
            fd(ADMITTED, 1)?,
            fd(SETTINGS, 1)?,
            fd(STATS, cpus)?,
        )?);
        self.gate = Some(Arc::clone(&gate));
        Ok(gate)
    }

    /// Puts the AF_XDP socket `fd` at `index` of the socket map (the rx queue index).
    pub fn register_socket(&mut self, index: u32, fd: RawFd) -> Result<()> {
        let value = u32::try_from(fd).map_err(|_| XdpError::Config("negative socket fd".into()))?;
        self.update(
            XSKS_MAP,
            &index.to_ne_bytes(),
            &value.to_ne_bytes(),
            "the index must be below 256",
        )
    }

    /// Removes the socket at `index` of the socket map.
    pub fn unregister_socket(&mut self, index: u32) -> Result<()> {
        self.delete(XSKS_MAP, &index.to_ne_bytes())
    }

    /// Steers `flow` to the socket at `socket_index` of the socket map (the
    /// ARFS analog inside XDP: what `ndo_rx_flow_steer` asks a NIC for).
    /// The kernel delivers only to a socket bound to the queue the frame
    /// arrived on, so the chosen socket must share it. Each call is one
    /// steering-hook call (counted in [`Self::steering_calls`]).
    #[doc(alias = "ndo_rx_flow_steer")]
    pub fn steer_flow(&mut self, flow: &FlowMapKey, socket_index: u32) -> Result<()> {
        self.steering_calls += 1;
        self.update(
            FLOW_SOCKS,
            &flow.to_bytes(),
            &socket_index.to_ne_bytes(),
            "at most 65536 steered flows: remove idle ones",
        )
    }

    /// Forgets the steering entry of `flow` (counted as a steering-hook call).
    pub fn unsteer_flow(&mut self, flow: &FlowMapKey) -> Result<()> {
        self.steering_calls += 1;
        self.delete(FLOW_SOCKS, &flow.to_bytes())
    }

    /// Map writes made through [`Self::steer_flow`] and [`Self::unsteer_flow`].
    pub fn steering_calls(&self) -> u64 {
        self.steering_calls
    }

    /// The program's counters, summed over CPUs.
    pub fn stats(&self) -> Result<ProgramStats> {
        let ncpu = crate::sys::possible_cpus()
            .map_err(|e| XdpError::io("reading /sys/devices/system/cpu/possible", e))?;
        let stats = self.map(STATS)?;
        let mut sum = [0u64; 9];
        // A per-CPU array lookup writes one 8-byte value (the value size
        // rounded up to 8) per possible CPU.
        let mut vals = vec![0u8; ncpu * 8];
        for (i, slot) in sum.iter_mut().enumerate() {
            let key = i as u32;
            stats
                .lookup(&key.to_ne_bytes(), &mut vals)
                .map_err(|source| XdpError::Map {
                    map: STATS,
                    source,
                    hint: "check `bpftool map`",
                })?;
            *slot = per_cpu_values(&vals).sum();
        }
        Ok(ProgramStats {
            redirected: sum[0],
            passed: sum[1],
            flow_hits: sum[2],
            hash_ok: sum[3],
            redirect_failed: sum[4],
            dropped: sum[5],
            vlan_tagged: sum[6],
            gate_dropped: sum[7],
            gate_retries: sum[8],
        })
    }

    /// The attach mode in use.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// Whether the program is device-bound, so the rx-hash kfunc reaches the driver.
    pub fn dev_bound(&self) -> bool {
        self.dev_bound
    }

    /// The kernel's id of the program.
    pub fn id(&self) -> u32 {
        match &self.hook {
            Hook::Link { id, .. } => *id,
            Hook::Netlink { prog, .. } => prog.id(),
        }
    }

    /// Whether the program runs as a component of libxdp's dispatcher
    /// (netlink only): detaching it then goes through libxdp, which looks
    /// programs up by id and so needs CAP_SYS_ADMIN (and CAP_BPF) besides
    /// CAP_NET_ADMIN; alone on the hook, CAP_NET_ADMIN is enough, and a
    /// link needs nothing.
    pub fn dispatched(&self) -> bool {
        matches!(
            self.hook,
            Hook::Netlink {
                dispatched: true,
                ..
            }
        )
    }

    /// How the program is held: through a bpf_link (detached when this
    /// process ends, however it ends) or through netlink.
    pub fn attach_kind(&self) -> XdpAttach {
        match self.hook {
            Hook::Link { .. } => XdpAttach::Link,
            Hook::Netlink { .. } => XdpAttach::Netlink,
        }
    }

    /// The program of an engine that is gone this one replaced, if any.
    pub fn replaced(&self) -> Option<Replaced> {
        self.replaced
    }

    /// The interface it is attached to.
    pub fn interface(&self) -> &str {
        &self.interface
    }
}

impl Drop for SteerProgram {
    fn drop(&mut self) {
        // A SteerProgram exists only attached; the libxdp/libbpf objects are
        // freed right after, by the hook's drop (a link is closed first,
        // which detaches the program).
        let Hook::Netlink { prog, dispatched } = &mut self.hook else {
            debug!(interface = %self.interface, "steer XDP program detached (link closed)");
            return;
        };
        let (idx, mode) = (self.ifindex as i32, attach_mode(self.mode));
        let detached = if *dispatched {
            prog.detach(idx, mode)
        } else {
            detach_netlink(idx, mode, prog.fd()).or_else(|e| match e.raw_os_error() {
                // The kernel would not match the program by its fd (seen
                // with xdp.frags, device-bound): by its id, if still ours.
                Some(libc::EINVAL) => detach_netlink_by_id(idx, mode, prog.id()),
                _ => Err(e),
            })
        };
        match detached {
            Err(e) => {
                warn!(interface = %self.interface, error = %e, "detaching the steer XDP program failed");
            }
            Ok(()) => debug!(interface = %self.interface, "steer XDP program detached"),
        }
    }
}
