//! The steer XDP program (`bpf/steer_xdp.c`): embedded object, loading and
//! attaching through libxdp, its maps (sockets, owned ports, flow steering,
//! statistics), detection of a program left by a crashed run, and detaching
//! on drop.
//!
//! Invariant: while a [`SteerProgram`] exists its program is attached to its
//! interface and its map file descriptors are valid; `Drop` detaches it and
//! frees the libxdp/libbpf objects exactly once.

use std::{
    ffi::{c_void, CStr, CString},
    io,
    os::fd::RawFd,
    ptr,
};

use libxdp_sys as xdp;
use tracing::{debug, info, warn};

use crate::{
    config::{Proto, XdpMode},
    error::{Result, XdpError},
};

/// The compiled program (clang -O2 -g -target bpf, see build.rs).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/steer_xdp.o"));
/// The same with the rx-hash kfunc call; loads only device-bound (native mode).
static OBJECT_RXHASH: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/steer_xdp_rxhash.o"));

/// The program's name as the kernel knows it (the C function's name).
pub const PROGRAM_NAME: &str = "steer_xdp";

/// `BPF_F_XDP_DEV_BOUND_ONLY` (linux/bpf.h): lets the verifier bind the
/// metadata kfuncs to the device's implementation.
const BPF_F_XDP_DEV_BOUND_ONLY: u32 = 1 << 6;

/// Mirrors `struct steer_port_key` in bpf/steer_xdp.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct PortKey {
    proto: u8,
    pad: u8,
    port_be: u16,
}

/// A flow as the program's `flow_socks` map keys it (mirrors `struct steer_flow_key`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    saddr: [u8; 16],
    daddr: [u8; 16],
    sport_be: u16,
    dport_be: u16,
    proto: u8,
    family: u8,
    pad: [u8; 2],
}

impl FlowKey {
    /// The flow `src:sport -> dst:dport` of `proto` as the receiver sees it.
    pub fn new(proto: Proto, src: std::net::SocketAddr, dst: std::net::SocketAddr) -> Self {
        let mut key = FlowKey {
            saddr: [0; 16],
            daddr: [0; 16],
            sport_be: src.port().to_be(),
            dport_be: dst.port().to_be(),
            proto: proto.number(),
            family: 4,
            pad: [0; 2],
        };
        match (src.ip(), dst.ip()) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                key.saddr[..4].copy_from_slice(&s.octets());
                key.daddr[..4].copy_from_slice(&d.octets());
            }
            (s, d) => {
                key.family = 6;
                key.saddr = to_v6(s).octets();
                key.daddr = to_v6(d).octets();
            }
        }
        key
    }
}

fn to_v6(ip: std::net::IpAddr) -> std::net::Ipv6Addr {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    }
}

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
}

/// What the program does with owned traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnedAction {
    /// Redirect to the queue's AF_XDP socket (normal operation).
    Redirect,
    /// Drop in XDP after parsing: the kernel-only ceiling for benchmarks.
    Drop,
}

/// An attached steer XDP program and its maps.
#[derive(Debug)]
pub struct SteerProgram {
    obj: *mut xdp::bpf_object,
    prog: *mut xdp::xdp_program,
    ifindex: u32,
    interface: String,
    mode: XdpMode,
    dev_bound: bool,
    xsks_fd: RawFd,
    ports_fd: RawFd,
    flows_fd: RawFd,
    stats_fd: RawFd,
    settings_fd: RawFd,
    steering_calls: u64,
}

// SAFETY: the libxdp/libbpf objects are owned exclusively by this value (no
// other Rust handle aliases them) and libbpf/libxdp keep no thread-affine
// state, so moving the owner to another thread is sound.
unsafe impl Send for SteerProgram {}

/// Converts a libxdp/libbpf pointer return into an error when it is NULL or an
/// encoded error pointer.
fn check_ptr<T>(p: *mut T, context: &'static str) -> Result<*mut T> {
    // SAFETY: libxdp_get_error only inspects the pointer value.
    let err = unsafe { xdp::libxdp_get_error(p as *const c_void) };
    if p.is_null() || err != 0 {
        let errno = if err != 0 {
            -(err as i32)
        } else {
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL)
        };
        return Err(XdpError::Program {
            context,
            source: io::Error::from_raw_os_error(errno.abs()),
        });
    }
    Ok(p)
}

fn c_str(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

/// A program found attached to an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedProgram {
    /// Its name.
    pub name: String,
    /// The kernel's program id.
    pub id: u32,
    /// Whether it runs through libxdp's dispatcher (else it is the only program).
    pub dispatched: bool,
}

/// The XDP programs attached to `ifindex` (empty when none).
pub fn attached_programs(ifindex: u32) -> Vec<AttachedProgram> {
    let Ok(idx) = i32::try_from(ifindex) else {
        return Vec::new();
    };
    // SAFETY: plain query; the result is checked and closed below.
    let mp = unsafe { xdp::xdp_multiprog__get_from_ifindex(idx) };
    // SAFETY: libxdp_get_error only inspects the pointer value.
    if mp.is_null() || unsafe { xdp::libxdp_get_error(mp as *const c_void) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    // SAFETY: `mp` is a valid multiprog until closed at the end of this block;
    // program pointers it returns live as long as `mp`.
    unsafe {
        let legacy = xdp::xdp_multiprog__is_legacy(mp);
        let describe = |p: *mut xdp::xdp_program| AttachedProgram {
            name: CStr::from_ptr(xdp::xdp_program__name(p))
                .to_string_lossy()
                .into_owned(),
            id: xdp::xdp_program__id(p),
            dispatched: !legacy,
        };
        if legacy {
            let p = xdp::xdp_multiprog__main_prog(mp);
            if !p.is_null() {
                out.push(describe(p));
            }
        } else {
            let mut p = xdp::xdp_multiprog__next_prog(ptr::null(), mp);
            while !p.is_null() {
                out.push(describe(p));
                p = xdp::xdp_multiprog__next_prog(p, mp);
            }
        }
        xdp::xdp_multiprog__close(mp);
    }
    out
}

/// Detaches every steer program from `ifindex` (and, for a lone legacy
/// program, only when it is steer's).
fn detach_stale(ifindex: u32) -> Result<()> {
    let idx = i32::try_from(ifindex).map_err(|_| XdpError::Config("ifindex overflow".into()))?;
    // SAFETY: plain query; the result is checked and closed below.
    let mp = unsafe { xdp::xdp_multiprog__get_from_ifindex(idx) };
    // SAFETY: libxdp_get_error only inspects the pointer value.
    if mp.is_null() || unsafe { xdp::libxdp_get_error(mp as *const c_void) } != 0 {
        return Ok(());
    }
    // SAFETY: `mp` is valid until closed; its program pointers live as long as it.
    let rc = unsafe {
        let mut rc = 0;
        if xdp::xdp_multiprog__is_legacy(mp) {
            rc = xdp::xdp_multiprog__detach(mp);
        } else {
            let mode = xdp::xdp_multiprog__attach_mode(mp);
            let mut p = xdp::xdp_multiprog__next_prog(ptr::null(), mp);
            while !p.is_null() {
                let name = CStr::from_ptr(xdp::xdp_program__name(p));
                if name.to_bytes() == PROGRAM_NAME.as_bytes() {
                    rc = xdp::xdp_program__detach(p, idx, mode, 0);
                }
                p = xdp::xdp_multiprog__next_prog(p, mp);
            }
        }
        xdp::xdp_multiprog__close(mp);
        rc
    };
    if rc < 0 {
        return Err(XdpError::Program {
            context: "detaching the stale program",
            source: io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(())
}

impl SteerProgram {
    /// Loads the program and attaches it to `interface` (index `ifindex`) in
    /// `mode`, after checking for a program left by a crashed run.
    pub fn attach(
        interface: &str,
        ifindex: u32,
        mode: XdpMode,
        replace_stale: bool,
    ) -> Result<Self> {
        for p in attached_programs(ifindex) {
            if p.name == PROGRAM_NAME {
                if !replace_stale {
                    return Err(XdpError::StaleProgram {
                        interface: interface.into(),
                        id: p.id,
                    });
                }
                warn!(
                    interface,
                    id = p.id,
                    "replacing a steer XDP program left attached by an earlier run"
                );
                detach_stale(ifindex)?;
            } else if !p.dispatched {
                return Err(XdpError::OtherProgram {
                    interface: interface.into(),
                    name: p.name,
                    id: p.id,
                });
            }
        }
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
            match Self::try_attach(interface, ifindex, m, dev_bound) {
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
        Err(match e {
            XdpError::Program {
                context: "attaching",
                source,
            } if matches!(source.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
                && m != XdpMode::Generic =>
            {
                XdpError::ModeUnsupported {
                    interface: interface.into(),
                    mode: m,
                    source,
                }
            }
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

    fn try_attach(interface: &str, ifindex: u32, mode: XdpMode, dev_bound: bool) -> Result<Self> {
        let object = if dev_bound { OBJECT_RXHASH } else { OBJECT };
        // SAFETY: the object is a static byte slice; libbpf copies what it
        // needs; null options select the defaults.
        let obj =
            unsafe { xdp::bpf_object__open_mem(object.as_ptr().cast(), object.len(), ptr::null()) };
        let obj = check_ptr(obj, "opening the embedded object")?;
        // From here `obj` is closed on every path (by `guard` or by `Self::drop`).
        let mut this = SteerProgram {
            obj,
            prog: ptr::null_mut(),
            ifindex,
            interface: interface.into(),
            mode,
            dev_bound,
            xsks_fd: -1,
            ports_fd: -1,
            flows_fd: -1,
            stats_fd: -1,
            settings_fd: -1,
            steering_calls: 0,
        };
        if dev_bound {
            let fname = c_str(PROGRAM_NAME);
            // SAFETY: `obj` is a valid, not yet loaded object.
            let bp = unsafe { xdp::bpf_object__find_program_by_name(obj, fname.as_ptr()) };
            if bp.is_null() {
                return Err(XdpError::Program {
                    context: "finding the program",
                    source: io::Error::from_raw_os_error(libc::ENOENT),
                });
            }
            // SAFETY: `bp` belongs to the not yet loaded `obj`.
            unsafe {
                xdp::bpf_program__set_ifindex(bp, ifindex);
                xdp::bpf_program__set_flags(bp, BPF_F_XDP_DEV_BOUND_ONLY);
            }
        }
        let section = c_str("xdp");
        // SAFETY: `obj` is valid; libxdp keeps a reference that we release in drop
        // (xdp_program__close does not close an external object).
        let prog = unsafe { xdp::xdp_program__from_bpf_obj(obj, section.as_ptr()) };
        this.prog = check_ptr(prog, "creating the libxdp program")?;
        let xmode = match mode {
            XdpMode::Generic => xdp::xdp_attach_mode_XDP_MODE_SKB,
            _ => xdp::xdp_attach_mode_XDP_MODE_NATIVE,
        };
        let idx =
            i32::try_from(ifindex).map_err(|_| XdpError::Config("ifindex overflow".into()))?;
        // SAFETY: `prog` is valid; attaching loads `obj` into the kernel.
        let rc = unsafe { xdp::xdp_program__attach(this.prog, idx, xmode, 0) };
        if rc < 0 {
            // Not attached: make drop skip the detach.
            this.ifindex = 0;
            return Err(XdpError::Program {
                context: "attaching",
                source: io::Error::from_raw_os_error(-rc),
            });
        }
        this.xsks_fd = this.map_fd("xsks_map")?;
        this.ports_fd = this.map_fd("owned_ports")?;
        this.flows_fd = this.map_fd("flow_socks")?;
        this.stats_fd = this.map_fd("stats")?;
        this.settings_fd = this.map_fd("settings")?;
        Ok(this)
    }

    fn map_fd(&self, name: &str) -> Result<RawFd> {
        let c = c_str(name);
        // SAFETY: `obj` is a loaded object; the name is NUL-terminated.
        let fd = unsafe { xdp::bpf_object__find_map_fd_by_name(self.obj, c.as_ptr()) };
        if fd < 0 {
            return Err(XdpError::Program {
                context: "finding a map",
                source: io::Error::from_raw_os_error(-fd),
            });
        }
        Ok(fd)
    }

    /// `bpf_map_update_elem` with typed key and value.
    fn update<K, V>(
        fd: RawFd,
        key: &K,
        value: &V,
        map: &'static str,
        hint: &'static str,
    ) -> Result<()> {
        // SAFETY: key and value are plain `repr(C)`/integer values whose sizes
        // match the map definition in steer_xdp.c; both outlive the call.
        let rc = unsafe {
            xdp::bpf_map_update_elem(fd, (key as *const K).cast(), (value as *const V).cast(), 0)
        };
        if rc < 0 {
            return Err(XdpError::Map {
                map,
                source: io::Error::from_raw_os_error(-rc),
                hint,
            });
        }
        Ok(())
    }

    /// `bpf_map_delete_elem`; a missing key is not an error.
    fn delete<K>(fd: RawFd, key: &K, map: &'static str) -> Result<()> {
        // SAFETY: the key's size matches the map definition; it outlives the call.
        let rc = unsafe { xdp::bpf_map_delete_elem(fd, (key as *const K).cast()) };
        if rc < 0 && rc != -libc::ENOENT {
            return Err(XdpError::Map {
                map,
                source: io::Error::from_raw_os_error(-rc),
                hint: "check `bpftool map`",
            });
        }
        Ok(())
    }

    /// Starts (or stops) redirecting traffic to `port` of `proto`.
    pub fn set_owned(&mut self, proto: Proto, port: u16, owned: bool) -> Result<()> {
        let key = PortKey {
            proto: proto.number(),
            pad: 0,
            port_be: port.to_be(),
        };
        if owned {
            Self::update(
                self.ports_fd,
                &key,
                &1u32,
                "owned_ports",
                "at most 256 owned ports",
            )
        } else {
            Self::delete(self.ports_fd, &key, "owned_ports")
        }
    }

    /// Sets what happens to owned traffic (redirect, or drop for measuring
    /// the kernel-only ceiling).
    pub fn set_owned_action(&mut self, action: OwnedAction) -> Result<()> {
        let value: u32 = match action {
            OwnedAction::Redirect => 0,
            OwnedAction::Drop => 1,
        };
        Self::update(
            self.settings_fd,
            &0u32,
            &value,
            "settings",
            "check `bpftool map`",
        )
    }

    /// Puts the AF_XDP socket `fd` at `index` of the socket map (the rx queue index).
    pub fn register_socket(&mut self, index: u32, fd: RawFd) -> Result<()> {
        let value = u32::try_from(fd).map_err(|_| XdpError::Config("negative socket fd".into()))?;
        Self::update(
            self.xsks_fd,
            &index,
            &value,
            "xsks_map",
            "the index must be below 256",
        )
    }

    /// Removes the socket at `index` of the socket map.
    pub fn unregister_socket(&mut self, index: u32) -> Result<()> {
        Self::delete(self.xsks_fd, &index, "xsks_map")
    }

    /// Steers `flow` to the socket at `socket_index` of the socket map (the
    /// ARFS analog inside XDP). The kernel delivers only to a socket bound to
    /// the queue the frame arrived on, so the chosen socket must share it.
    /// Each call is one steering-hook call (counted in [`Self::steering_calls`]).
    pub fn steer_flow(&mut self, flow: &FlowKey, socket_index: u32) -> Result<()> {
        self.steering_calls += 1;
        Self::update(
            self.flows_fd,
            flow,
            &socket_index,
            "flow_socks",
            "at most 65536 steered flows: remove idle ones",
        )
    }

    /// Forgets the steering entry of `flow` (counted as a steering-hook call).
    pub fn unsteer_flow(&mut self, flow: &FlowKey) -> Result<()> {
        self.steering_calls += 1;
        Self::delete(self.flows_fd, flow, "flow_socks")
    }

    /// Map writes made through [`Self::steer_flow`] and [`Self::unsteer_flow`].
    pub fn steering_calls(&self) -> u64 {
        self.steering_calls
    }

    /// The program's counters, summed over CPUs.
    pub fn stats(&self) -> Result<ProgramStats> {
        let ncpu = crate::sys::possible_cpus()
            .map_err(|e| XdpError::io("reading /sys/devices/system/cpu/possible", e))?;
        let mut sum = [0u64; 6];
        let mut vals = vec![0u64; ncpu];
        for (i, slot) in sum.iter_mut().enumerate() {
            let key = i as u32;
            // SAFETY: a per-CPU array lookup writes one 8-byte value (the
            // value size rounded up to 8) per possible CPU: `vals` holds
            // exactly that many.
            let rc = unsafe {
                xdp::bpf_map_lookup_elem(
                    self.stats_fd,
                    (&key as *const u32).cast(),
                    vals.as_mut_ptr().cast(),
                )
            };
            if rc < 0 {
                return Err(XdpError::Map {
                    map: "stats",
                    source: io::Error::from_raw_os_error(-rc),
                    hint: "check `bpftool map`",
                });
            }
            *slot = vals.iter().sum();
        }
        Ok(ProgramStats {
            redirected: sum[0],
            passed: sum[1],
            flow_hits: sum[2],
            hash_ok: sum[3],
            redirect_failed: sum[4],
            dropped: sum[5],
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
        // SAFETY: `prog` is valid while `self` lives.
        unsafe { xdp::xdp_program__id(self.prog) }
    }

    /// The interface it is attached to.
    pub fn interface(&self) -> &str {
        &self.interface
    }
}

impl Drop for SteerProgram {
    fn drop(&mut self) {
        // SAFETY: `prog` and `obj` are owned by `self` and freed exactly once
        // here; detach only runs when attach succeeded (ifindex != 0).
        unsafe {
            if !self.prog.is_null() {
                if self.ifindex != 0 {
                    let xmode = match self.mode {
                        XdpMode::Generic => xdp::xdp_attach_mode_XDP_MODE_SKB,
                        _ => xdp::xdp_attach_mode_XDP_MODE_NATIVE,
                    };
                    let rc = xdp::xdp_program__detach(self.prog, self.ifindex as i32, xmode, 0);
                    if rc < 0 {
                        warn!(interface = %self.interface, error = %io::Error::from_raw_os_error(-rc), "detaching the steer XDP program failed");
                    } else {
                        debug!(interface = %self.interface, "steer XDP program detached");
                    }
                }
                xdp::xdp_program__close(self.prog);
            }
            xdp::bpf_object__close(self.obj);
        }
    }
}
