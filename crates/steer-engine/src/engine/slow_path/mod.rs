//! The slow path: fragmented UDP datagrams to an owned port, answered.
//!
//! The XDP program redirects only whole datagrams to AF_XDP: IPv4
//! fragments (`frag_off & 0x3fff`: the first one too, whose ports are
//! there, since the rest of the datagram is not) and IPv6 datagrams with
//! extension headers (the fragment header, next header 44, among them) go
//! to the kernel with `XDP_PASS`. Reassembly stays in the kernel: its
//! reassembler is hardened and budgeted (`net.ipv4.ipfrag_high_thresh`,
//! `ipfrag_time`, and their IPv6 twins), where one in userspace would be
//! new attack surface. What the engine adds is a kernel UDP socket bound
//! on each owned port for each address of its interface, IPv4 and IPv6
//! ([`socket`]), so the reassembled datagram has somewhere to go instead
//! of an ICMP port unreachable.
//!
//! The path of such a datagram: the kernel reassembles it and queues it
//! on the slow-path socket; the reader thread ([`reader`]) reads it, writes
//! it as the Ethernet frame handlers understand ([`frame`]), hashes its
//! 5-tuple as the dispatchers do and queues it to the inbox of the worker
//! its flow's whole datagrams go to ([`inbox`]), ringing that worker's
//! doorbell; the worker runs the application's handler on it in its poll
//! round (steer-core's `Handler::poll_side`), and the reply goes back
//! through the kernel socket, from the address the datagram was sent to
//! (IP_PKTINFO), fragmented by the kernel. Datagrams the kernel hands the
//! socket for other reasons (IPv6 extension headers, fail-open after
//! every worker died) take the same path.
//!
//! Ordering: a reassembled datagram enters after its last fragment, and
//! through a slower path (a thread hop and a queue more), so a later small
//! datagram of the same flow can overtake it. The kernel's RPS has the
//! same property (fragments hash on the address pair only there). Replies
//! of one flow still leave from one worker.
//!
//! Budgets and counters ([`SlowPathStats`](crate::observe::SlowPathStats),
//! in `steer stats`, the stats JSON and the metrics): each worker's inbox
//! holds [`inbox::INBOX_DATAGRAMS`] datagrams (more are dropped, counted
//! as `queue_full`), a worker handles [`inbox::PER_ROUND`] per round, a
//! datagram longer than [`reader::MAX_DATAGRAM`] is dropped (`too_large`),
//! a reply the socket does not take at once is dropped (`send_failed`).
//! A port another process holds is a warning and a `bind_failed` count,
//! not a start failure: the XDP path still serves its whole datagrams.
//! When every worker is gone the sockets close ([`SlowPath::release`]):
//! nobody is left to answer, and failing open, the owned ports are free
//! for a kernel server to take the traffic over.

mod counters;
mod frame;
mod inbox;
mod reader;
mod sender;
mod socket;

use std::sync::{Arc, Mutex, PoisonError};

use steer_core::cpu::CpuId;
use steer_core::dispatch::Shared;
use steer_core::flow::AnyHasher;
use steer_core::wake::Doorbell;

pub(crate) use counters::Event;
pub(crate) use inbox::{Datagram, SlowWorker};
pub(crate) use reader::Reader;
pub(crate) use sender::KernelSender;

use crate::observe::SlowPathStats;
use reader::{ReaderParts, Target};

/// The slow path's sockets, the workers' inboxes, the reader thread and
/// the counters.
pub(crate) struct SlowPath {
    sockets: Arc<Vec<socket::SlowSocket>>,
    inboxes: Vec<(CpuId, Arc<inbox::Inbox>)>,
    counters: Arc<counters::SlowCounters>,
    reader: Mutex<Option<Reader>>,
}

impl std::fmt::Debug for SlowPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowPath")
            .field("sockets", &self.sockets.len())
            .finish_non_exhaustive()
    }
}

impl SlowPath {
    /// Binds the sockets of the owned UDP `ports` on the addresses of
    /// `interface` (a port that cannot be bound is logged and counted) and
    /// makes an inbox for each worker CPU in `cpus`.
    pub(crate) fn open(ports: &[u16], interface: &str, cpus: &[CpuId]) -> Self {
        let addrs = socket::interface_addrs(interface);
        if addrs.is_empty() && !ports.is_empty() {
            tracing::warn!(
                interface,
                "the interface has no IP address: fragmented datagrams to the owned UDP \
                 ports are not answered"
            );
        }
        let opened = socket::open(ports, &addrs, Some(interface));
        Self {
            counters: Arc::new(counters::SlowCounters::new(
                opened.sockets.len(),
                opened.failed,
            )),
            sockets: Arc::new(opened.sockets),
            inboxes: cpus
                .iter()
                .map(|&c| (c, Arc::new(inbox::Inbox::default())))
                .collect(),
            reader: Mutex::new(None),
        }
    }

    /// The slow path of the worker on `cpu` (`None`: no socket is bound,
    /// so there is nothing to take).
    pub(crate) fn worker(&self, cpu: CpuId) -> Option<SlowWorker> {
        if self.sockets.is_empty() {
            return None;
        }
        let (_, inbox) = self.inboxes.iter().find(|(c, _)| *c == cpu)?;
        Some(SlowWorker {
            inbox: Arc::clone(inbox),
            sender: self.sender(),
        })
    }

    /// Replies through the sockets, for whoever else answers (flow
    /// delivery).
    pub(crate) fn sender(&self) -> KernelSender {
        KernelSender {
            sockets: Arc::clone(&self.sockets),
            counters: Arc::clone(&self.counters),
        }
    }

    /// Starts the reader thread, once the workers run (`bell` gives each
    /// worker's doorbell); nothing to do when no socket is bound.
    pub(crate) fn start_reader(
        &self,
        hasher: AnyHasher,
        shared: Shared,
        bell: impl Fn(CpuId) -> Option<Arc<Doorbell>>,
    ) -> std::io::Result<()> {
        if self.sockets.is_empty() {
            return Ok(());
        }
        let targets = self
            .inboxes
            .iter()
            .map(|(cpu, inbox)| Target {
                cpu: *cpu,
                inbox: Arc::clone(inbox),
                bell: bell(*cpu),
            })
            .collect();
        let reader = Reader::start(ReaderParts {
            sockets: Arc::clone(&self.sockets),
            targets,
            counters: Arc::clone(&self.counters),
            hasher,
            shared,
        })?;
        *self.lock_reader() = Some(reader);
        Ok(())
    }

    fn lock_reader(&self) -> std::sync::MutexGuard<'_, Option<Reader>> {
        self.reader.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops the reader thread: nothing more reaches the workers' inboxes.
    pub(crate) fn stop_reader(&self) {
        let reader = self.lock_reader().take();
        if let Some(mut r) = reader {
            r.stop();
        }
    }

    /// Every worker is gone: the reader stops and the sockets close, so a
    /// kernel socket of another server can bind the owned ports and get
    /// their traffic (when the engine fails open).
    pub(crate) fn release(&self) {
        self.stop_reader();
        for s in self.sockets.iter() {
            s.close();
        }
    }

    /// The workers are gone: what their inboxes still hold is dropped,
    /// counted as `left_at_stop`.
    pub(crate) fn drop_leftovers(&self) {
        for (_, inbox) in &self.inboxes {
            let n = inbox.clear();
            if n > 0 {
                self.counters.add(counters::Event::LeftAtStop(n));
            }
        }
    }

    /// The counters now.
    pub(crate) fn stats(&self) -> SlowPathStats {
        self.counters.snapshot()
    }
}
