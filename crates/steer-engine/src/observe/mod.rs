//! Watching a running engine from another process: its per-CPU counters,
//! the kernel's AF_XDP socket statistics and the UMEM frame census, as
//! [`LiveStats`], served two ways by one observer thread:
//!
//! - a **stats socket** per interface, `/run/steer/<interface>.sock`
//!   ([`endpoint`]): `steer stats` and `steer top` read it; [`query`] is
//!   the client;
//! - **Prometheus metrics** on `/metrics` at the address given to
//!   [`EngineBuilder::metrics`](crate::engine::EngineBuilder::metrics)
//!   ([`metrics`]).
//!
//! The same thread also serves a process that is not an engine
//! ([`exporter`]: `steer rfs`): its own JSON snapshot, marked with a
//! `kind` field, on its stats socket (read with [`query_any`]), and its
//! own text on `/metrics`.
//!
//! # Why a unix socket, not a shared-memory snapshot
//!
//! A snapshot file under `/run/steer` would let readers map the counters
//! without the engine's help, but it would need a versioned binary layout
//! with a seqlock (and raw shared-memory access on both sides), and the engine would copy
//! its counters there on a timer whether anybody reads them or not. A
//! reader could not tell a live engine's file from one a killed engine
//! left, short of checking a pid that may have been reused. A unix socket
//! has none of this: the engine builds the snapshot only when asked, from
//! the counter blocks it already keeps (exact at the moment of the
//! request, no interval); the file's permissions (`0600`, root, or `0660`
//! with a group the operator names) decide who may read; and liveness is the kernel's answer to `connect`: a socket
//! left by a killed engine refuses at once (`ECONNREFUSED`), so a reader
//! reports a dead engine without waiting, and the next engine on the
//! interface knows that whatever the old one left (its XDP program) has
//! no owner and may be replaced. The price is one thread in the engine,
//! asleep until a connection arrives, and JSON, which every tool reads.
//!
//! # Invariants
//! - Nothing here runs on the packet path: a snapshot reads the per-CPU
//!   counter blocks (relaxed atomic loads) and takes each AF_XDP socket's
//!   lock once, for one `getsockopt(SOL_XDP, XDP_STATISTICS)` and four
//!   ring-index reads.
//! - `/metrics` is read-only; on the stats socket only a peer that is root
//!   or the engine's own user (`SO_PEERCRED`) may send a control line
//!   ([`Control`]: `steer ctl`), which is applied to the engine's shared
//!   switches and pins; anybody else gets an error and changes nothing.
//! - One thread serves both endpoints, up to 64 connections side by side,
//!   none blocking: each has one second from accept to its last byte, so a
//!   slow client delays no other reader and never the engine. Stopping
//!   wakes the thread, which closes every connection and returns at once;
//!   the engine stops it (and removes its socket) before it releases its
//!   AF_XDP sockets.

/// Live control of a running engine (`steer ctl`).
pub mod control;
pub mod endpoint;
pub mod exporter;
pub mod live;
pub mod metrics;
#[doc(hidden)]
pub mod replies;
/// The observer's connections, served side by side against deadlines.
mod server;

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use tracing::warn;

use server::{Connections, Stream};

pub use control::{Control, ControlParseError, Controls};
pub use endpoint::{
    parse_request, query, query_any, send_control, socket_path, ObserveError, Request, StatsAccess,
    StatsEndpoint, StatsReply, DEFAULT_RUN_DIR,
};
pub use live::{
    CpuCounters, DesiredCounters, FrameCounters, HubStats, LiveStats, SlowPathStats,
    SocketCounters, WorkerStatus, FORMAT_VERSION,
};

/// What the observer serves: a snapshot on request and, to a stats-socket
/// client that may control the engine (root or the engine's own user, by
/// `SO_PEERCRED`), live control ([`Control`]). Any `Fn() -> LiveStats` is a
/// service that takes no control.
pub(crate) trait Service {
    /// The engine now.
    fn snapshot(&self) -> LiveStats;
    /// What the stats socket answers `stats` with: the snapshot as JSON, or
    /// why not (one line). A process that is not an engine serves its own
    /// JSON here ([`exporter::Exporter`]), marked with a `kind` field.
    fn stats_json(&self) -> Result<String, String> {
        serde_json::to_string(&self.snapshot()).map_err(|e| format!("encoding the stats: {e}"))
    }
    /// What `/metrics` serves: the snapshot, in the text exposition format.
    fn metrics_text(&self) -> prometheus::Result<String> {
        metrics::encode(&self.snapshot())
    }
    /// Applies `control`: the state it set, or why not (one line).
    fn control(&self, _control: &Control) -> Result<String, String> {
        Err("this engine takes no control requests".into())
    }
}

impl<F: Fn() -> LiveStats> Service for F {
    fn snapshot(&self) -> LiveStats {
        self()
    }
}

/// A snapshot source with live control over an engine's [`Controls`].
pub(crate) struct Controlled<F> {
    pub(crate) snapshot: F,
    pub(crate) controls: Controls,
}

impl<F: Fn() -> LiveStats> Service for Controlled<F> {
    fn snapshot(&self) -> LiveStats {
        (self.snapshot)()
    }
    fn control(&self, control: &Control) -> Result<String, String> {
        self.controls.apply(control)
    }
}

/// Which endpoint a connection came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The stats socket: one request line, one JSON line back.
    Stats,
    /// The stats socket, from a peer that may also send control lines
    /// (root or the engine's own user).
    StatsControl,
    /// `/metrics`: one HTTP request, one response.
    Metrics,
}

impl Kind {
    pub(crate) fn reply_to(
        self,
        received: &[u8],
        closed: bool,
        service: &dyn Service,
    ) -> Option<Vec<u8>> {
        match self {
            Kind::Stats => endpoint::reply_to(received, closed, service, false),
            Kind::StatsControl => endpoint::reply_to(received, closed, service, true),
            Kind::Metrics => metrics::reply_to(received, closed, &|| service.metrics_text()),
        }
    }

    pub(crate) fn timeout_reply(self) -> Vec<u8> {
        match self {
            Kind::Stats | Kind::StatsControl => endpoint::timeout_reply(),
            Kind::Metrics => metrics::timeout_reply(),
        }
    }
}

/// The observer's service, shared with its thread.
pub(crate) type Snapshot = Arc<dyn Service + Send + Sync>;

/// Whether the peer of an accepted stats connection may control the
/// engine: root, or the user the engine runs as.
fn may_control(stream: &std::os::unix::net::UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(stream, PeerCredentials).is_ok_and(|c| {
        let uid = c.uid();
        uid == 0 || uid == nix::unistd::geteuid().as_raw()
    })
}

const STATS: Token = Token(0);
const METRICS: Token = Token(1);
const WAKE: Token = Token(2);
/// The clients' tokens start here.
const FIRST_CONNECTION: Token = Token(3);

/// The observer thread serving the stats socket and `/metrics`.
pub(crate) struct Observer {
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

/// Binds the metrics listener (non-blocking), with an error that names the
/// address.
pub(crate) fn bind_metrics(addr: SocketAddr) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

impl Observer {
    /// Starts serving `endpoint` and `metrics` (either may be absent).
    pub(crate) fn start(
        endpoint: Option<StatsEndpoint>,
        metrics: Option<TcpListener>,
        snapshot: Snapshot,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        if let Some(e) = &endpoint {
            poll.registry().register(
                &mut SourceFd(&e.listener().as_raw_fd()),
                STATS,
                Interest::READABLE,
            )?;
        }
        if let Some(m) = &metrics {
            poll.registry()
                .register(&mut SourceFd(&m.as_raw_fd()), METRICS, Interest::READABLE)?;
        }
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let thread = std::thread::Builder::new()
            .name("steer-observe".into())
            .spawn(move || run(poll, endpoint, metrics, snapshot))?;
        Ok(Self {
            waker,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it; the stats socket is removed.
    pub(crate) fn stop(&mut self) {
        if let Some(t) = self.thread.take() {
            if self.waker.wake().is_ok() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread: accepts connections on both listeners and serves them side
/// by side until woken; a client past its deadline is closed.
fn run(
    mut poll: Poll,
    endpoint: Option<StatsEndpoint>,
    metrics: Option<TcpListener>,
    snapshot: Snapshot,
) {
    let mut events = Events::with_capacity(64);
    let mut conns = Connections::new(FIRST_CONNECTION.0);
    loop {
        let timeout = conns.next_timeout(Instant::now());
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            warn!(error = %e, "stats and metrics stop: poll failed");
            return;
        }
        for event in &events {
            let now = Instant::now();
            match event.token() {
                WAKE => return,
                STATS => {
                    if let Some(e) = &endpoint {
                        accept_all(
                            || {
                                let (s, _) = e.listener().accept()?;
                                let kind = if may_control(&s) {
                                    Kind::StatsControl
                                } else {
                                    Kind::Stats
                                };
                                Ok((Stream::unix(s)?, kind))
                            },
                            |(s, kind)| conns.add(poll.registry(), s, kind, now, &*snapshot),
                        );
                    }
                }
                METRICS => {
                    if let Some(m) = &metrics {
                        accept_all(
                            || m.accept().and_then(|(s, _)| Stream::tcp(s)),
                            |s| conns.add(poll.registry(), s, Kind::Metrics, now, &*snapshot),
                        );
                    }
                }
                t if conns.owns(t) => conns.ready(t, &*snapshot),
                _ => {}
            }
        }
        conns.expire(Instant::now());
    }
}

/// Accepts connections until the listener has none left (readiness is
/// edge-triggered).
fn accept_all<S>(mut accept: impl FnMut() -> io::Result<S>, mut serve: impl FnMut(S)) {
    loop {
        match accept() {
            Ok(s) => serve(s),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // E.g. out of file descriptors: the next connection retries.
                warn!(error = %e, "accepting a stats or metrics connection");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// Root (this test) controls the engine over its stats socket: the
    /// change lands in the shared state and the reply says what was set; a
    /// pin to a CPU without a worker is refused with why; stats still read.
    #[test]
    fn root_controls_the_engine_over_the_stats_socket() {
        use steer_core::cpu::{CpuLayout, CpuSet};
        use steer_core::dispatch::Shared;
        use steer_core::flow::AnyHasher;
        use steer_core::policy::Policy;

        let dir = std::env::temp_dir().join(format!("steer-control-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let endpoint = StatsEndpoint::claim(&dir, "veth4").unwrap();
        let layout = Arc::new(CpuLayout::uniform(2, 1).unwrap());
        let shared = Shared::new(layout, 256, Policy::Always).unwrap();
        let controls = Controls::new(shared.clone(), AnyHasher::default(), CpuSet::first(2));
        let service: Snapshot = Arc::new(Controlled {
            snapshot: || LiveStats::empty("veth4"),
            controls,
        });
        let mut observer = Observer::start(Some(endpoint), None, service).unwrap();
        let wait = Duration::from_secs(2);
        let send = |line: &str| send_control(&dir, "veth4", &line.parse().unwrap(), wait);
        assert_eq!(send("policy llc").unwrap(), "policy llc");
        assert_eq!(shared.desired.policy().get(), Policy::LlcAffinity);
        assert_eq!(send("flow-limit on").unwrap(), "flow-limit on");
        assert!(shared.switches.flow_limit.load(Ordering::Relaxed));
        let e = send("pin 5 port 7000").unwrap_err().to_string();
        assert!(e.contains("CPU 5 runs no worker"), "{e}");
        assert_eq!(query(&dir, "veth4", wait).unwrap().interface, "veth4");
        observer.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Slow clients on both endpoints (a byte every 300 ms, reconnecting
    /// when closed) hold up neither a reader nor the stop.
    #[test]
    fn slow_clients_stall_no_reader_and_not_the_stop() {
        let dir = std::env::temp_dir().join(format!("steer-observer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let endpoint = StatsEndpoint::claim(&dir, "veth3").unwrap();
        let socket = endpoint.path().to_path_buf();
        let metrics = bind_metrics("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = metrics.local_addr().unwrap();
        let snapshot: Snapshot = Arc::new(|| LiveStats::empty("veth3"));
        let mut observer = Observer::start(Some(endpoint), Some(metrics), snapshot).unwrap();

        let done = Arc::new(AtomicBool::new(false));
        let trickle = |mut s: Box<dyn Write + Send>, done: Arc<AtomicBool>| {
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) && s.write_all(b"G").is_ok() {
                    std::thread::sleep(Duration::from_millis(300));
                }
            })
        };
        let mut slow = Vec::new();
        for _ in 0..20 {
            let s = std::net::TcpStream::connect(addr).unwrap();
            slow.push(trickle(Box::new(s), done.clone()));
        }
        for _ in 0..5 {
            let s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
            slow.push(trickle(Box::new(s), done.clone()));
        }
        std::thread::sleep(Duration::from_millis(100));

        let t = Instant::now();
        let live = query(&dir, "veth3", Duration::from_secs(2)).unwrap();
        assert_eq!(live.interface, "veth3");
        let mut scrape = std::net::TcpStream::connect(addr).unwrap();
        scrape
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        let _ = scrape.read_to_string(&mut reply);
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

        let t = Instant::now();
        observer.stop();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        done.store(true, Ordering::Relaxed);
        for s in slow {
            s.join().unwrap();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
