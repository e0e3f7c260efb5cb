//! [`XdpPort`]: the owner of the data path on one interface. Opening it checks
//! privileges, the interface and queues, attaches the steer program, creates
//! the shared UMEM and one AF_XDP socket per rx queue (each with
//! INHIBIT_PROG_LOAD, registered in the program's socket map), and splits the
//! frames evenly between the sockets' free pools. Dropping it detaches the
//! program.

use std::{ffi::CString, num::NonZeroU32, os::fd::AsRawFd, sync::Arc};

use tracing::{info, warn};
use xsk_rs::config::{FrameSize, Interface, QueueSize, UmemConfig};
use xsk_rs::Umem;

use crate::{
    accounting::{FrameCensus, Ledger, LedgerSnapshot, RingCensus},
    config::{
        max_single_frame_mtu, ActiveModes, BindMode, MultiBuffer, PortConfig, Proto, XdpAttach,
    },
    error::{Result, XdpError},
    program::{ProgramStats, Replaced, SteerProgram},
    socket::{create_socket, QueueSocket},
    sys,
    umem::UmemView,
};

/// The AF_XDP data path on one interface: the attached steer program, the
/// shared UMEM and one socket per rx queue.
///
/// Interface names and indices are looked up in the calling thread's network
/// namespace: open and drop the port on threads in the same namespace.
///
/// ```no_run
/// use steer_xdp::{PortConfig, Proto, XdpPort};
/// # fn main() -> Result<(), steer_xdp::XdpError> {
/// let port = XdpPort::open(PortConfig::new("eth0").own(Proto::Udp, 9000))?;
/// println!("running in {:?} on {} queue(s)", port.modes(), port.sockets().len());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct XdpPort {
    // Declared first so it is dropped (detached) first.
    program: SteerProgram,
    sockets: Vec<QueueSocket>,
    ledgers: Vec<Arc<Ledger>>,
    total_frames: u32,
    modes: ActiveModes,
    ifindex: u32,
}

impl XdpPort {
    /// Opens the data path described by `config`.
    pub fn open(config: PortConfig) -> Result<Self> {
        sys::check_privileges()?;
        let name = config.interface.clone();
        let ifindex = sys::ifindex(&name)?;
        let count = sys::rx_queue_count(&name)?;
        let queues: Vec<u32> = config
            .queues
            .clone()
            .unwrap_or_else(|| (0..count).collect());
        if queues.is_empty() {
            return Err(XdpError::Config("no queues to open".into()));
        }
        for (i, &q) in queues.iter().enumerate() {
            if q >= count {
                return Err(XdpError::QueueOutOfRange {
                    interface: name,
                    queue: q,
                    count,
                });
            }
            if q >= 256 || queues[..i].contains(&q) {
                return Err(XdpError::Config(format!(
                    "queue {q} listed twice or above 255"
                )));
            }
        }
        let ring = QueueSize::new(config.ring_size)
            .map_err(|e| XdpError::Config(format!("ring_size: {e}")))?;
        let frame_size = FrameSize::new(config.frame_size)
            .map_err(|e| XdpError::Config(format!("frame_size: {e}")))?;
        let frames = NonZeroU32::new(config.frame_count)
            .ok_or_else(|| XdpError::Config("frame_count must be positive".into()))?;
        let multi_buffer = multi_buffer_needed(&name, &config)?;

        let mut program = SteerProgram::attach(
            &name,
            ifindex,
            config.xdp_mode,
            config.attach,
            config.replace_stale,
        )?;
        for &(proto, port) in &config.owned {
            program.set_owned(proto, port, true)?;
        }

        let umem_config = UmemConfig::builder()
            .frame_size(frame_size)
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .build()
            .map_err(|e| XdpError::Config(format!("UMEM: {e}")))?;
        let umem_err = |e: xsk_rs::umem::UmemCreateError| XdpError::Umem {
            frames: config.frame_count,
            frame_size: config.frame_size,
            reason: error_chain(&e),
        };
        let (umem, descs, huge_pages) = match Umem::new(umem_config, frames, config.huge_pages) {
            Ok((u, d)) => (u, d, config.huge_pages),
            Err(e) if config.huge_pages => {
                warn!(error = %error_chain(&e), "huge pages unavailable for the UMEM, using normal pages");
                let (u, d) = Umem::new(umem_config, frames, false).map_err(umem_err)?;
                (u, d, false)
            }
            Err(e) => return Err(umem_err(e)),
        };
        let mem = UmemView::new(umem.clone(), config.frame_size as usize, descs.len());

        let iface = Interface::new(
            CString::new(name.clone())
                .map_err(|_| XdpError::UnknownInterface { name: name.clone() })?,
        );
        let mut bind = config.bind_mode;
        let per_queue = descs.len() / queues.len();
        let mut descs = descs.into_iter();
        let mut sockets = Vec::with_capacity(queues.len());
        for &q in &queues {
            let (tx, rx, fq_cq, used) = loop {
                match create_socket(
                    &umem,
                    &iface,
                    q,
                    ring,
                    bind,
                    config.need_wakeup,
                    multi_buffer,
                ) {
                    Ok((tx, rx, fc)) => break (tx, rx, fc, bind),
                    Err(e)
                        if multi_buffer
                            && bind != BindMode::Auto
                            && e.raw_os_error() == Some(libc::EOPNOTSUPP) =>
                    {
                        return Err(XdpError::MultiBufferUnsupported {
                            interface: name,
                            queue: q,
                            mode: bind,
                            frame_size: config.frame_size,
                            max: max_single_frame_mtu(config.frame_size),
                            source: e,
                        });
                    }
                    Err(e) if bind == BindMode::Auto => {
                        let fallback = matches!(
                            e.raw_os_error(),
                            Some(libc::EOPNOTSUPP | libc::EPROTONOSUPPORT)
                        );
                        if !fallback {
                            return Err(socket_err(&name, q, &e));
                        }
                        warn!(interface = %name, queue = q, error = %e, "zero-copy unavailable, falling back to copy mode");
                        bind = BindMode::Copy;
                    }
                    Err(e)
                        if bind == BindMode::ZeroCopy
                            && e.raw_os_error() == Some(libc::EOPNOTSUPP) =>
                    {
                        return Err(XdpError::BindUnsupported {
                            interface: name,
                            queue: q,
                            mode: bind,
                            source: e,
                        });
                    }
                    Err(e) => return Err(socket_err(&name, q, &e)),
                }
            };
            bind = if used == BindMode::Auto {
                BindMode::ZeroCopy
            } else {
                used
            };
            let (fill, comp) = fq_cq.ok_or_else(|| XdpError::Socket {
                interface: name.clone(),
                queue: q,
                reason: "no fill/completion rings returned (queue already bound on this UMEM?)"
                    .into(),
            })?;
            let pool: Vec<_> = descs.by_ref().take(per_queue).collect();
            let mut s =
                QueueSocket::new(q, tx, rx, fill, comp, mem.clone(), pool, config.ring_size)
                    .with_need_wakeup(config.need_wakeup);
            if let Some(bp) = config.busy_poll {
                sys::set_busy_poll(s.as_raw_fd(), bp.usecs, bp.budget)
                    .map_err(|e| XdpError::io("setting busy-poll socket options", e))?;
            }
            program.register_socket(q, s.as_raw_fd())?;
            s.refill()
                .map_err(|e| XdpError::io("filling the fill ring", e))?;
            sockets.push(s);
        }
        // Frames left over by the even split go to the first socket.
        let rest: Vec<_> = descs.collect();
        let total_frames = config.frame_count - rest.len() as u32;
        if !rest.is_empty() {
            info!(
                unused = rest.len(),
                "frames not divisible by queues left unused"
            );
        }
        let modes = ActiveModes {
            xdp: program.mode(),
            bind,
            huge_pages,
            multi_buffer,
        };
        info!(interface = %name, ?modes, queues = ?queues, "AF_XDP port open");
        let ledgers = sockets.iter().map(QueueSocket::ledger).collect();
        Ok(XdpPort {
            program,
            sockets,
            ledgers,
            total_frames,
            modes,
            ifindex,
        })
    }

    /// The modes in use after any fallback (XDP attach, bind, huge pages).
    pub fn modes(&self) -> ActiveModes {
        self.modes
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The sockets still owned by the port.
    pub fn sockets(&self) -> &[QueueSocket] {
        &self.sockets
    }

    /// The sockets still owned by the port, mutably.
    pub fn sockets_mut(&mut self) -> &mut [QueueSocket] {
        &mut self.sockets
    }

    /// Hands the sockets to the caller (e.g. one per worker thread). The port
    /// keeps the program attached and can still report counters.
    pub fn take_sockets(&mut self) -> Vec<QueueSocket> {
        std::mem::take(&mut self.sockets)
    }

    /// The program of an engine that is gone this port replaced, if any.
    pub fn replaced_program(&self) -> Option<Replaced> {
        self.program.replaced()
    }

    /// How the program is held (bpf_link or netlink).
    pub fn attach_kind(&self) -> XdpAttach {
        self.program.attach_kind()
    }

    /// Whether the program runs through libxdp's dispatcher
    /// ([`SteerProgram::dispatched`]).
    pub fn program_dispatched(&self) -> bool {
        self.program.dispatched()
    }

    /// The steer program (owned ports, flow steering, statistics).
    pub fn program(&mut self) -> &mut SteerProgram {
        &mut self.program
    }

    /// Starts or stops redirecting `proto` traffic to `port`.
    pub fn set_owned(&mut self, proto: Proto, port: u16, owned: bool) -> Result<()> {
        self.program.set_owned(proto, port, owned)
    }

    /// The program's counters.
    pub fn program_stats(&self) -> Result<ProgramStats> {
        self.program.stats()
    }

    /// Frames in the UMEM that are in use (the split remainder excluded).
    pub fn total_frames(&self) -> u32 {
        self.total_frames
    }

    /// Place counters summed over all sockets (valid at any time, approximate while running).
    pub fn counters(&self) -> LedgerSnapshot {
        self.ledgers
            .iter()
            .map(|l| l.snapshot())
            .fold(LedgerSnapshot::default(), |a, b| a + b)
    }

    /// The full census at a quiet moment: counters plus the rings of
    /// `sockets` (pass every socket of this port, wherever they are).
    pub fn census(&self, sockets: &mut [QueueSocket]) -> FrameCensus {
        let rings = sockets
            .iter_mut()
            .map(|s| s.ring_census())
            .fold(RingCensus::default(), |a, b| a + b);
        FrameCensus::new(self.total_frames, self.counters(), rings)
    }
}

/// Whether the sockets of `name` are bound for multi-buffer packets: as
/// `config` asks, and with [`MultiBuffer::Auto`] when the interface's MTU
/// does not fit one frame (said in one line). An MTU that does not fit
/// with multi-buffer off is refused.
fn multi_buffer_needed(name: &str, config: &PortConfig) -> Result<bool> {
    let max = max_single_frame_mtu(config.frame_size);
    let mtu = match sys::mtu(name) {
        Ok(mtu) => mtu,
        Err(e) => {
            warn!(interface = %name, error = %e, "cannot read the MTU; assuming it fits one frame");
            0
        }
    };
    let fits = mtu <= max;
    match config.multi_buffer {
        MultiBuffer::On => Ok(true),
        MultiBuffer::Off if fits => Ok(false),
        MultiBuffer::Off => Err(XdpError::MtuTooLarge {
            interface: name.to_owned(),
            mtu,
            frame_size: config.frame_size,
            max,
        }),
        MultiBuffer::Auto if fits => Ok(false),
        MultiBuffer::Auto => {
            info!(
                interface = %name,
                mtu,
                frame_size = config.frame_size,
                "MTU {mtu} does not fit one {}-byte frame (at most {max}): packets may span \
                 several frames (multi-buffer AF_XDP, XDP_USE_SG)",
                config.frame_size
            );
            Ok(true)
        }
    }
}

fn socket_err(interface: &str, queue: u32, e: &std::io::Error) -> XdpError {
    XdpError::Socket {
        interface: interface.into(),
        queue,
        reason: e.to_string(),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
