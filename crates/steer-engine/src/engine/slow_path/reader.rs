//! The slow path's reader: one small thread of its own that waits on the
//! slow-path sockets (epoll, through mio), reads each reassembled datagram,
//! writes it as a frame, hashes its flow as the dispatchers do and queues
//! it to the worker its flow's whole datagrams go to, then rings that
//! worker's doorbell.
//!
//! Why a thread of its own and not the workers' poll rounds: a worker
//! sleeps in one of two event loops (mio, or the tokio runtime of flow
//! tasks on the workers) and polls its rx queues in a tight loop; a socket
//! shared by every worker would wake them all (a thundering herd) and each
//! datagram must still reach the flow's worker, not the one that read it.
//! One reader costs one sleeping thread, reads without blocking anybody,
//! and the hop to the worker is the same queue-then-doorbell a dispatcher
//! uses. The slow path is rare: one thread is enough.
//!
//! Which worker: a pin (flow or port), else the flow's desired CPU (where
//! its reader consumed it), else plain RPS over the workers by hash, as
//! the dispatchers choose for a flow; a CPU without a live worker is
//! passed over. (With RSS-only dispatch a flow's whole datagrams stay on
//! the CPU of the rx queue the NIC chose, which the reader cannot know: it
//! uses the RPS spread then.)
//!
//! Invariants: reads never block (the sockets are non-blocking); at most
//! [`READ_BUDGET`] datagrams per socket between two polls, so one busy
//! port does not starve the other sockets; a datagram nobody can take is
//! dropped and counted, never waited for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use steer_core::cpu::CpuId;
use steer_core::dispatch::{PinReader, Shared};
use steer_core::flow::{AnyHasher, Classifier, FlowClassifier};
use steer_core::wake::Doorbell;
use tracing::debug;

use super::counters::{Event, SlowCounters};
use super::frame::frame_of;
use super::inbox::{Datagram, Inbox};
use super::socket::{Received, SlowSocket};

/// Datagrams read from one socket before the others get their turn.
pub(crate) const READ_BUDGET: usize = 64;

/// The longest datagram read whole: an IPv6 jumbo-free maximum (65535
/// minus the UDP header). Longer ones are cut by the kernel and dropped.
pub(crate) const MAX_DATAGRAM: usize = 65_527;

/// How long the reader sleeps without events (it checks the stop flag).
const POLL_TIMEOUT: Duration = Duration::from_millis(200);

const WAKER: Token = Token(usize::MAX);

/// Where a worker takes slow-path datagrams: its CPU, inbox and doorbell.
pub(crate) struct Target {
    pub(crate) cpu: CpuId,
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) bell: Option<Arc<Doorbell>>,
}

/// What the reader thread works with.
pub(crate) struct ReaderParts {
    pub(crate) sockets: Arc<Vec<SlowSocket>>,
    pub(crate) targets: Vec<Target>,
    pub(crate) counters: Arc<SlowCounters>,
    pub(crate) hasher: AnyHasher,
    pub(crate) shared: Shared,
}

/// The running reader thread; stopped on drop.
pub(crate) struct Reader {
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl Reader {
    /// Starts the reader thread.
    pub(crate) fn start(parts: ReaderParts) -> std::io::Result<Self> {
        let poll = Poll::new()?;
        for (i, s) in parts.sockets.iter().enumerate() {
            if let Some(fd) = s.raw_fd() {
                poll.registry()
                    .register(&mut SourceFd(&fd), Token(i), Interest::READABLE)?;
            }
        }
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("steer-slow-path".into())
                .spawn(move || Loop::new(parts).run(poll, &stop))?
        };
        Ok(Self {
            stop,
            waker,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Loop {
    parts: ReaderParts,
    classifier: FlowClassifier<AnyHasher>,
    pins: PinReader,
    cpus: Vec<CpuId>,
}

impl Loop {
    fn new(parts: ReaderParts) -> Self {
        Self {
            classifier: FlowClassifier::new(parts.hasher.clone()),
            pins: parts.shared.pins.reader(),
            cpus: parts.targets.iter().map(|t| t.cpu).collect(),
            parts,
        }
    }

    fn run(mut self, mut poll: Poll, stop: &AtomicBool) {
        let mut events = Events::with_capacity(16);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut more = false;
        while !stop.load(Ordering::SeqCst) {
            let timeout = if more { Duration::ZERO } else { POLL_TIMEOUT };
            if let Err(e) = poll.poll(&mut events, Some(timeout)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    debug!(error = %e, "slow-path poll failed");
                    std::thread::sleep(POLL_TIMEOUT);
                }
                continue;
            }
            // Edge-triggered: each socket is read until it is empty or its
            // budget is spent (then polled again without waiting).
            more = false;
            let sockets = Arc::clone(&self.parts.sockets);
            for s in sockets.iter() {
                let mut read = 0;
                while read < READ_BUDGET {
                    match s.recv(&mut buf) {
                        Ok(Some(r)) => self.deliver(&buf, r),
                        Ok(None) => break,
                        Err(e) => debug!(error = %e, port = s.port, "slow-path read failed"),
                    }
                    read += 1;
                }
                more |= read == READ_BUDGET;
            }
        }
    }

    fn deliver(&mut self, buf: &[u8], r: Received) {
        let counters = &self.parts.counters;
        counters.add(Event::Received(r.len));
        if r.truncated {
            return counters.add(Event::TooLarge);
        }
        let frame = frame_of(&buf[..r.len.min(buf.len())], r.from, r.to);
        let (hash, port) = match self.classifier.classify(&frame, None) {
            Ok(Some(info)) => (info.hash, info.dst_port),
            _ => (0, r.to.port()),
        };
        self.pins.refresh();
        let shared = &self.parts.shared;
        let usable = |c: CpuId| shared.layout.is_online(c);
        let claimed = self
            .pins
            .lookup(hash, port)
            .or_else(|| shared.desired.lookup(hash));
        let Some(cpu) = worker_for(hash, claimed, &self.cpus, usable) else {
            return counters.add(Event::QueueFull);
        };
        let Some(target) = self.parts.targets.iter().find(|t| t.cpu == cpu) else {
            return counters.add(Event::QueueFull);
        };
        let d = Datagram {
            frame,
            hash,
            ifindex: r.ifindex,
        };
        if target.inbox.push(d).is_err() {
            return counters.add(Event::QueueFull);
        }
        if let Some(bell) = &target.bell {
            bell.ring();
        }
    }
}

/// The worker CPU for flow `hash`: `claimed` (a pin or the desired CPU) if
/// usable, else the plain RPS spread of the hash over `cpus` (the
/// kernel's `reciprocal_scale`), passing over unusable CPUs; `None` when
/// no CPU is usable.
pub(crate) fn worker_for(
    hash: u32,
    claimed: Option<CpuId>,
    cpus: &[CpuId],
    usable: impl Fn(CpuId) -> bool,
) -> Option<CpuId> {
    if let Some(c) = claimed.filter(|&c| cpus.contains(&c) && usable(c)) {
        return Some(c);
    }
    let n = cpus.len();
    let start = ((u64::from(hash) * n as u64) >> 32) as usize;
    (0..n).map(|i| cpus[(start + i) % n]).find(|&c| usable(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_cpu_wins_if_it_has_a_live_worker() {
        let cpus = [0, 1, 2, 3];
        assert_eq!(worker_for(7, Some(2), &cpus, |_| true), Some(2));
        // Not a worker CPU, or its worker gone: the spread decides.
        let spread = worker_for(7, None, &cpus, |_| true);
        assert_eq!(worker_for(7, Some(9), &cpus, |_| true), spread);
        assert_ne!(worker_for(7, Some(2), &cpus, |c| c != 2), Some(2));
    }

    #[test]
    fn the_spread_is_the_dispatchers_reciprocal_scale_passing_over_the_dead() {
        let cpus = [0, 1, 2, 3];
        assert_eq!(worker_for(0, None, &cpus, |_| true), Some(0));
        assert_eq!(worker_for(u32::MAX, None, &cpus, |_| true), Some(3));
        assert_eq!(worker_for(0x8000_0000, None, &cpus, |_| true), Some(2));
        assert_eq!(worker_for(0x8000_0000, None, &cpus, |c| c != 2), Some(3));
        assert_eq!(worker_for(u32::MAX, None, &cpus, |c| c != 3), Some(0));
        assert_eq!(worker_for(5, None, &cpus, |_| false), None);
        assert_eq!(worker_for(5, None, &[], |_| true), None);
    }
}
