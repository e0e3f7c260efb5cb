//! Any XDP object on any interface: [`XdpObject`](crate::object::XdpObject) loads a compiled BPF
//! object (bytes, e.g. `include_bytes!` of a `clang -target bpf` build),
//! attaches one of its XDP programs through libxdp, reads and writes its maps
//! by name (sizes checked by libbpf against the map definitions), and can
//! open AF_XDP sockets registered in one of its XSKMAPs. The steer program
//! has its own owner ([`crate::SteerProgram`]); this is for tools that bring
//! their own program (a reflector, a load generator's receive path).
//!
//! Invariants: while an [`XdpObject`](crate::object::XdpObject) exists its program is attached to its
//! interface and its map handles are valid; `Drop` detaches it and frees the
//! libxdp/libbpf objects exactly once. Interface names are resolved in the
//! calling thread's network namespace.

use std::{
    ffi::{c_void, CString},
    io,
    num::NonZeroU32,
    os::fd::AsRawFd,
    ptr,
    sync::atomic::{AtomicU32, Ordering},
};

use libxdp_sys as xdp;
use tracing::{debug, warn};
use xsk_rs::config::{
    BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig,
};
use xsk_rs::{Socket, Umem};

use crate::{
    config::{BindMode, PortConfig, XdpMode},
    error::{Result, XdpError},
    socket::{QueueSocket, UmemView},
    sys,
};

/// UMEM ids for sockets opened here (distinct from the ids `XdpPort` hands
/// out, which count up from 1).
static NEXT_UMEM_ID: AtomicU32 = AtomicU32::new(0x8000_0000);

/// An attached XDP program from a caller-supplied BPF object.
///
/// ```no_run
/// # fn main() -> Result<(), xdp_io::XdpError> {
/// static OBJ: &[u8] = &[]; // include_bytes!(concat!(env!("OUT_DIR"), "/reflect.o"))
/// let prog = xdp_io::object::XdpObject::attach(OBJ, "reflect", "veth0", xdp_io::XdpMode::Auto)?;
/// prog.update("config", &0u32.to_ne_bytes(), &9000u32.to_ne_bytes())?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct XdpObject {
    obj: *mut xdp::bpf_object,
    prog: *mut xdp::xdp_program,
    ifindex: u32,
    interface: String,
    mode: XdpMode,
}

// SAFETY: the libxdp/libbpf objects are owned exclusively by this value and
// libbpf/libxdp keep no thread-affine state, so moving the owner is sound.
unsafe impl Send for XdpObject {}

fn c_str(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| XdpError::Config(format!("{s:?} contains a NUL byte")))
}

/// NULL or an encoded error pointer from libxdp/libbpf as an error.
fn check_ptr<T>(p: *mut T, context: &'static str) -> Result<*mut T> {
    // SAFETY: libxdp_get_error only inspects the pointer value.
    let err = unsafe { xdp::libxdp_get_error(p as *const c_void) };
    if p.is_null() || err != 0 {
        let errno = if err != 0 {
            (err as i32).abs()
        } else {
            libc::ENOENT
        };
        return Err(XdpError::Program {
            context,
            source: io::Error::from_raw_os_error(errno),
        });
    }
    Ok(p)
}

impl XdpObject {
    /// Loads `object`, and attaches its XDP program `program` (the C
    /// function's name) to `interface`: native mode first under
    /// [`XdpMode::Auto`], then generic.
    pub fn attach(
        object: &'static [u8],
        program: &str,
        interface: &str,
        mode: XdpMode,
    ) -> Result<Self> {
        sys::check_privileges()?;
        let ifindex = sys::ifindex(interface)?;
        let modes: &[XdpMode] = match mode {
            XdpMode::Auto => &[XdpMode::Native, XdpMode::Generic],
            XdpMode::Native => &[XdpMode::Native],
            XdpMode::Generic => &[XdpMode::Generic],
        };
        let mut last = None;
        for &m in modes {
            match Self::try_attach(object, program, interface, ifindex, m) {
                Ok(p) => return Ok(p),
                Err(e) => {
                    debug!(interface, mode = ?m, error = %e, "attach attempt failed");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| XdpError::Config("no attach mode to try".into())))
    }

    fn try_attach(
        object: &'static [u8],
        program: &str,
        interface: &str,
        ifindex: u32,
        mode: XdpMode,
    ) -> Result<Self> {
        // SAFETY: the object is a static byte slice libbpf copies from; null
        // options select the defaults.
        let obj =
            unsafe { xdp::bpf_object__open_mem(object.as_ptr().cast(), object.len(), ptr::null()) };
        let obj = check_ptr(obj, "opening the BPF object")?;
        // From here `obj` is closed on every path by `Drop`.
        let mut this = XdpObject {
            obj,
            prog: ptr::null_mut(),
            ifindex: 0,
            interface: interface.into(),
            mode,
        };
        let name = c_str(program)?;
        // SAFETY: `obj` is a valid, not yet loaded object; `name` is NUL-terminated.
        let prog = unsafe { xdp::xdp_program__from_bpf_obj(obj, ptr::null()) };
        this.prog = check_ptr(prog, "creating the libxdp program")?;
        // SAFETY: `prog` is valid; its name is a NUL-terminated string it owns.
        let found = unsafe { std::ffi::CStr::from_ptr(xdp::xdp_program__name(this.prog)) };
        if found.to_bytes() != name.as_bytes() {
            return Err(XdpError::Config(format!(
                "the object's first program is {found:?}, not {program:?}"
            )));
        }
        let xmode = match mode {
            XdpMode::Generic => xdp::xdp_attach_mode_XDP_MODE_SKB,
            _ => xdp::xdp_attach_mode_XDP_MODE_NATIVE,
        };
        let idx =
            i32::try_from(ifindex).map_err(|_| XdpError::Config("ifindex overflow".into()))?;
        // SAFETY: `prog` is valid; attaching loads `obj` into the kernel.
        let rc = unsafe { xdp::xdp_program__attach(this.prog, idx, xmode, 0) };
        if rc < 0 {
            return Err(XdpError::Program {
                context: "attaching",
                source: io::Error::from_raw_os_error(-rc),
            });
        }
        this.ifindex = ifindex;
        debug!(interface, ?mode, program, "XDP object attached");
        Ok(this)
    }

    /// The attach mode in use (never `Auto`).
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The interface the program is attached to.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    fn map(&self, name: &str) -> Result<*mut xdp::bpf_map> {
        let c = c_str(name)?;
        // SAFETY: `obj` is a loaded object; the name is NUL-terminated.
        let map = unsafe { xdp::bpf_object__find_map_by_name(self.obj, c.as_ptr()) };
        if map.is_null() {
            return Err(XdpError::Config(format!("the object has no map {name:?}")));
        }
        Ok(map)
    }

    /// Writes `value` at `key` of map `map`. Sizes must match the map's
    /// definition (libbpf checks them).
    pub fn update(&self, map: &str, key: &[u8], value: &[u8]) -> Result<()> {
        let m = self.map(map)?;
        // SAFETY: `m` belongs to the loaded object; libbpf reads exactly
        // `key.len()` and `value.len()` bytes, after checking them against
        // the map's key and value sizes.
        let rc = unsafe {
            xdp::bpf_map__update_elem(
                m,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if rc < 0 {
            return Err(XdpError::io(
                "updating a map of an XDP object",
                io::Error::from_raw_os_error(-rc),
            ));
        }
        Ok(())
    }

    /// Reads `key` of map `map` into `value` (for a per-CPU map: one value,
    /// rounded up to 8 bytes, per possible CPU).
    pub fn lookup(&self, map: &str, key: &[u8], value: &mut [u8]) -> Result<()> {
        let m = self.map(map)?;
        // SAFETY: as in `update`; libbpf writes at most `value.len()` bytes
        // after checking it against the map's value size.
        let rc = unsafe {
            xdp::bpf_map__lookup_elem(
                m,
                key.as_ptr().cast(),
                key.len(),
                value.as_mut_ptr().cast(),
                value.len(),
                0,
            )
        };
        if rc < 0 {
            return Err(XdpError::io(
                "reading a map of an XDP object",
                io::Error::from_raw_os_error(-rc),
            ));
        }
        Ok(())
    }

    /// The sum over CPUs of the `u64` at index `key` of the per-CPU array `map`.
    pub fn percpu_sum(&self, map: &str, key: u32) -> Result<u64> {
        let ncpu = sys::possible_cpus().map_err(|e| XdpError::io("reading possible CPUs", e))?;
        let mut buf = vec![0u8; 8 * ncpu];
        self.lookup(map, &key.to_ne_bytes(), &mut buf)?;
        Ok(buf
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
            .sum())
    }

    /// Opens one AF_XDP socket per rx queue of `config` (its interface must
    /// be this object's) on one shared UMEM, and registers each in the XSKMAP
    /// `xsks_map` at its queue index. `config.owned`, `busy_poll` and
    /// `replace_stale` are ignored: the program decides what is redirected.
    pub fn open_sockets(
        &mut self,
        config: &PortConfig,
        xsks_map: &str,
    ) -> Result<Vec<QueueSocket>> {
        let name = config.interface.clone();
        if name != self.interface {
            return Err(XdpError::Config(format!(
                "sockets for {name} requested from a program attached to {}",
                self.interface
            )));
        }
        let count = sys::rx_queue_count(&name)?;
        let queues: Vec<u32> = config
            .queues
            .clone()
            .unwrap_or_else(|| (0..count).collect());
        if let Some(&q) = queues.iter().find(|&&q| q >= count) {
            return Err(XdpError::QueueOutOfRange {
                interface: name,
                queue: q,
                count,
            });
        }
        if queues.is_empty() {
            return Err(XdpError::Config("no queues to open".into()));
        }
        let ring = QueueSize::new(config.ring_size)
            .map_err(|e| XdpError::Config(format!("ring_size: {e}")))?;
        let frame_size = FrameSize::new(config.frame_size)
            .map_err(|e| XdpError::Config(format!("frame_size: {e}")))?;
        let frames = NonZeroU32::new(config.frame_count)
            .ok_or_else(|| XdpError::Config("frame_count must be positive".into()))?;
        let umem_config = UmemConfig::builder()
            .frame_size(frame_size)
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .build()
            .map_err(|e| XdpError::Config(format!("UMEM: {e}")))?;
        let (umem, descs) = Umem::new(umem_config, frames, false).map_err(|e| XdpError::Umem {
            frames: config.frame_count,
            frame_size: config.frame_size,
            reason: e.to_string(),
        })?;
        let mem = UmemView {
            umem: umem.clone(),
            id: NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed),
            frame_size: config.frame_size as usize,
        };
        let iface = Interface::new(
            CString::new(name.clone())
                .map_err(|_| XdpError::UnknownInterface { name: name.clone() })?,
        );
        let mut flags = match config.bind_mode {
            BindMode::ZeroCopy => BindFlags::XDP_ZEROCOPY,
            BindMode::Copy | BindMode::Auto => BindFlags::XDP_COPY,
        };
        if config.need_wakeup {
            flags |= BindFlags::XDP_USE_NEED_WAKEUP;
        }
        let socket_config = SocketConfig::builder()
            .rx_queue_size(ring)
            .tx_queue_size(ring)
            .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
            .bind_flags(flags)
            .build();
        let per_queue = descs.len() / queues.len();
        let mut descs = descs.into_iter();
        let mut sockets = Vec::with_capacity(queues.len());
        for &q in &queues {
            let err = |reason: String| XdpError::Socket {
                interface: name.clone(),
                queue: q,
                reason,
            };
            // SAFETY: created with INHIBIT_PROG_LOAD (the program is ours)
            // and each queue is bound once on this UMEM.
            let (tx, rx, fq_cq) = unsafe { Socket::new(socket_config, &umem, &iface, q) }
                .map_err(|e| err(format!("{e}: {:?}", std::error::Error::source(&e))))?;
            let (fill, comp) =
                fq_cq.ok_or_else(|| err("no fill/completion rings returned".into()))?;
            let pool: Vec<_> = descs.by_ref().take(per_queue).collect();
            let mut s =
                QueueSocket::new(q, tx, rx, fill, comp, mem.clone(), pool, config.ring_size);
            let fd = u32::try_from(s.as_raw_fd())
                .map_err(|_| XdpError::Config("negative socket fd".into()))?;
            self.update(xsks_map, &q.to_ne_bytes(), &fd.to_ne_bytes())?;
            s.refill()
                .map_err(|e| XdpError::io("filling the fill ring", e))?;
            sockets.push(s);
        }
        Ok(sockets)
    }
}

impl Drop for XdpObject {
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
                        warn!(interface = %self.interface, error = %io::Error::from_raw_os_error(-rc), "detaching an XDP object failed");
                    }
                }
                xdp::xdp_program__close(self.prog);
            }
            xdp::bpf_object__close(self.obj);
        }
    }
}

/// Stops libxdp's own messages to stderr (warnings such as "No bpffs found"
/// that every load on a machine without bpffs prints); errors still come
/// back as values.
pub fn silence_libxdp() {
    // SAFETY: a NULL print function is libxdp's documented way to disable output.
    unsafe { xdp::libxdp_set_print(None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    static STEER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/steer_xdp.o"));

    #[test]
    fn unknown_interface_is_a_typed_error() {
        let err = XdpObject::attach(STEER, "steer_xdp", "nosuchif0xyz", XdpMode::Auto).unwrap_err();
        assert!(
            matches!(
                err,
                XdpError::UnknownInterface { .. } | XdpError::Privileges { .. }
            ),
            "{err}"
        );
    }
}
