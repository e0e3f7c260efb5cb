//! Any XDP object on any interface: [`XdpObject`](crate::object::XdpObject) loads a compiled BPF
//! object (bytes, e.g. `include_bytes!` of a `clang -target bpf` build),
//! attaches one of its XDP programs through libxdp, reads and writes its maps
//! by name (sizes checked by libbpf against the map definitions), and can
//! open AF_XDP sockets registered in one of its XSKMAPs. The steer program
//! has its own owner ([`crate::SteerProgram`]); this is for tools that bring
//! their own program (a reflector, a load generator's receive path).
//!
//! Invariants: while an [`XdpObject`](crate::object::XdpObject) exists its program is attached to its
//! interface and its map handles are valid; `Drop` detaches it, and the
//! libxdp/libbpf objects are freed by their owner in `sys::libxdp`.
//! Interface names are resolved in the calling thread's network namespace.

use std::{ffi::CString, io, num::NonZeroU32, os::fd::AsRawFd};

use tracing::{debug, warn};
use xsk_rs::config::{FrameSize, Interface, QueueSize, UmemConfig};
use xsk_rs::Umem;

use crate::{
    config::{BindMode, PortConfig, XdpMode},
    error::{Result, XdpError},
    socket::{create_socket, QueueSocket},
    sys::{
        self,
        libxdp::{AttachMode, BpfObject, XdpProgram},
    },
    umem::UmemView,
};

/// An attached XDP program from a caller-supplied BPF object.
///
/// ```no_run
/// # fn main() -> Result<(), steer_xdp::XdpError> {
/// static OBJ: &[u8] = &[]; // include_bytes!(concat!(env!("OUT_DIR"), "/reflect.o"))
/// let prog = steer_xdp::object::XdpObject::attach(OBJ, "reflect", "veth0", steer_xdp::XdpMode::Auto)?;
/// prog.update("config", &0u32.to_ne_bytes(), &9000u32.to_ne_bytes())?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct XdpObject {
    prog: XdpProgram,
    /// Set once attached; detached on drop.
    ifindex: Option<i32>,
    interface: String,
    mode: XdpMode,
}

fn attach_mode(mode: XdpMode) -> AttachMode {
    match mode {
        XdpMode::Generic => AttachMode::SKB,
        _ => AttachMode::NATIVE,
    }
}

fn program_err(context: &'static str) -> impl Fn(io::Error) -> XdpError {
    move |source| XdpError::Program { context, source }
}

impl XdpObject {
    /// Loads `object`, and attaches its XDP program `program` (the C
    /// function's name, in section `xdp`) to `interface`: native mode first
    /// under [`XdpMode::Auto`], then generic.
    pub fn attach(
        object: &'static [u8],
        program: &str,
        interface: &str,
        mode: XdpMode,
    ) -> Result<Self> {
        sys::check_privileges()?;
        let ifindex = sys::ifindex(interface)?;
        let modes = mode.attempts();
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
        let obj = BpfObject::open_mem(object).map_err(program_err("opening the BPF object"))?;
        let prog = XdpProgram::from_object(obj, "xdp")
            .map_err(program_err("creating the libxdp program"))?;
        if prog.name().to_bytes() != program.as_bytes() {
            return Err(XdpError::Config(format!(
                "the object's xdp program is {:?}, not {program:?}",
                prog.name()
            )));
        }
        let idx =
            i32::try_from(ifindex).map_err(|_| XdpError::Config("ifindex overflow".into()))?;
        let mut this = XdpObject {
            prog,
            ifindex: None,
            interface: interface.into(),
            mode,
        };
        this.prog
            .attach(idx, attach_mode(mode))
            .map_err(program_err("attaching"))?;
        this.ifindex = Some(idx);
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

    fn map_err<'a>(name: &'a str, what: &'static str) -> impl Fn(io::Error) -> XdpError + 'a {
        move |e| {
            if e.raw_os_error() == Some(libc::ENOENT) {
                XdpError::Config(format!("the object has no map {name:?}"))
            } else {
                XdpError::io(what, e)
            }
        }
    }

    /// Writes `value` at `key` of map `map`. Sizes must match the map's
    /// definition (libbpf checks them).
    pub fn update(&self, map: &str, key: &[u8], value: &[u8]) -> Result<()> {
        let what = "updating a map of an XDP object";
        self.prog
            .map(map)
            .map_err(Self::map_err(map, what))?
            .update(key, value)
            .map_err(|e| XdpError::io(what, e))
    }

    /// Reads `key` of map `map` into `value` (for a per-CPU map: one value,
    /// rounded up to 8 bytes, per possible CPU).
    pub fn lookup(&self, map: &str, key: &[u8], value: &mut [u8]) -> Result<()> {
        let what = "reading a map of an XDP object";
        self.prog
            .map(map)
            .map_err(Self::map_err(map, what))?
            .lookup(key, value)
            .map_err(|e| XdpError::io(what, e))
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
        let mem = UmemView::new(umem.clone(), config.frame_size as usize, descs.len());
        let iface = Interface::new(
            CString::new(name.clone())
                .map_err(|_| XdpError::UnknownInterface { name: name.clone() })?,
        );
        let bind = match config.bind_mode {
            BindMode::ZeroCopy => BindMode::ZeroCopy,
            BindMode::Copy | BindMode::Auto => BindMode::Copy,
        };
        let per_queue = descs.len() / queues.len();
        let mut descs = descs.into_iter();
        let mut sockets = Vec::with_capacity(queues.len());
        for &q in &queues {
            let err = |reason: String| XdpError::Socket {
                interface: name.clone(),
                queue: q,
                reason,
            };
            let (tx, rx, fq_cq) =
                create_socket(&umem, &iface, q, ring, bind, config.need_wakeup, false)
                    .map_err(|e| err(e.to_string()))?;
            let (fill, comp) =
                fq_cq.ok_or_else(|| err("no fill/completion rings returned".into()))?;
            let pool: Vec<_> = descs.by_ref().take(per_queue).collect();
            let mut s =
                QueueSocket::new(q, tx, rx, fill, comp, mem.clone(), pool, config.ring_size)
                    .with_need_wakeup(config.need_wakeup);
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
        if let Some(ifindex) = self.ifindex.take() {
            if let Err(e) = self.prog.detach(ifindex, attach_mode(self.mode)) {
                warn!(interface = %self.interface, error = %e, "detaching an XDP object failed");
            }
        }
    }
}

/// Stops libbpf's and libxdp's own messages to stderr (warnings such as "No
/// bpffs found" that every load on a machine without bpffs prints); errors
/// still come back as values.
pub fn silence_libxdp() {
    sys::libxdp::silence();
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
