//! A many-flow UDP load generator for the seed runs: `flows` UDP sockets
//! (one source port, so one flow, each), connected to the server, sending
//! sockperf-format pong requests (8-byte sequence, 2-byte flags = client |
//! pong, 4-byte length, big-endian, zero-padded to `size`), reading the
//! replies. `sockperf server` behind `steer proxy`, or `steer echo
//! --sockperf`, answers them.
//!
//! Closed loop: each flow keeps `window` requests in flight and sends one
//! more per reply; a flow with no reply for `stall` is re-primed (its
//! window sent again), so drops do not stop it. After `duration` it stops
//! sending and collects late replies for 200 ms.
//!
//! Invariants: one thread, one mio poll over the sockets (no busy loop: an
//! idle generator sleeps in `epoll_wait`); a send that finds the socket
//! buffer full or the port unreachable is counted, never fatal; nothing
//! but `flows` sockets is opened.

use std::{
    io::{self, ErrorKind},
    net::{Ipv4Addr, SocketAddr, UdpSocket as StdUdpSocket},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use mio::{net::UdpSocket, Events, Interest, Poll, Token};
use serde::Serialize;

/// sockperf's header flags: from a client, reply wanted.
const CLIENT_PONG: u16 = 3;
/// sockperf's header: sequence (8), flags (2), length (4).
pub const HEADER: usize = 14;

/// What to send.
#[derive(Debug, Clone)]
pub struct FlowsConfig {
    /// The server.
    pub dst: SocketAddr,
    /// Flows (sockets).
    pub flows: usize,
    /// Requests in flight per flow.
    pub window: usize,
    /// Datagram size (at least [`HEADER`]).
    pub size: usize,
    /// Sending time.
    pub duration: Duration,
    /// A flow with no reply for this long is re-primed.
    pub stall: Duration,
}

/// What happened ([`to_kv`](Self::to_kv) prints it as `key=value` lines).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FlowsResult {
    /// Flows opened.
    pub flows: usize,
    /// Flows that got at least one reply.
    pub flows_answered: usize,
    /// Requests sent.
    pub sent: u64,
    /// Replies received (late ones included).
    pub received: u64,
    /// Sending time, seconds (rounded to ms).
    pub elapsed_s: f64,
    /// sent / elapsed.
    pub send_rate: f64,
    /// Replies received while sending / elapsed.
    pub recv_rate: f64,
    /// Times a stalled flow was re-primed.
    pub reprimes: u64,
    /// Sends refused (buffer full, unreachable).
    pub send_errors: u64,
}

impl FlowsResult {
    /// `key=value` lines.
    pub fn to_kv(&self) -> String {
        format!(
            "flows={}\nflows_answered={}\nsent={}\nreceived={}\nelapsed_s={:.3}\nsend_rate={:.1}\nrecv_rate={:.1}\nreprimes={}\nsend_errors={}\n",
            self.flows,
            self.flows_answered,
            self.sent,
            self.received,
            self.elapsed_s,
            self.send_rate,
            self.recv_rate,
            self.reprimes,
            self.send_errors
        )
    }
}

/// One request: sequence `seq`, padded to `size`.
pub fn request(seq: u64, size: usize, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&seq.to_be_bytes());
    buf.extend_from_slice(&CLIENT_PONG.to_be_bytes());
    buf.extend_from_slice(&(size as u32).to_be_bytes());
    buf.resize(size.max(HEADER), 0);
}

struct Flow {
    sock: UdpSocket,
    answered: bool,
    last_rx: Instant,
}

struct Gen {
    cfg: FlowsConfig,
    flows: Vec<Flow>,
    seq: u64,
    sent: u64,
    received: u64,
    send_errors: u64,
    buf: Vec<u8>,
}

impl Gen {
    fn send(&mut self, i: usize) -> io::Result<()> {
        self.seq += 1;
        request(self.seq, self.cfg.size, &mut self.buf);
        match self.flows[i].sock.send(&self.buf) {
            Ok(_) => self.sent += 1,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::ConnectionRefused
                ) || e.raw_os_error() == Some(libc::ENOBUFS) =>
            {
                self.send_errors += 1
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Reads every waiting reply of flow `i`; how many.
    fn drain(&mut self, i: usize, rx: &mut [u8]) -> io::Result<u64> {
        let mut n = 0;
        loop {
            match self.flows[i].sock.recv(rx) {
                Ok(_) => n += 1,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                // An ICMP port unreachable from an earlier send.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if n > 0 {
            self.received += n;
            self.flows[i].answered = true;
            self.flows[i].last_rx = Instant::now();
        }
        Ok(n)
    }
}

/// Runs the closed loop in the calling thread (its network namespace and
/// CPU) until `duration` passes or `stop` is set.
pub fn run(cfg: &FlowsConfig, stop: &AtomicBool) -> Result<FlowsResult> {
    if cfg.flows == 0 || cfg.window == 0 || cfg.size < HEADER {
        bail!(
            "udp flows: flows >= 1, window >= 1 and size >= {HEADER} (got {}, {}, {})",
            cfg.flows,
            cfg.window,
            cfg.size
        );
    }
    let mut poll = Poll::new().context("creating the generator's poll")?;
    let local: SocketAddr = match cfg.dst {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let start = Instant::now();
    let mut flows = Vec::with_capacity(cfg.flows);
    for i in 0..cfg.flows {
        let s = StdUdpSocket::bind(local)
            .and_then(|s| s.connect(cfg.dst).map(|()| s))
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .with_context(|| format!("udp flows: opening flow {i} to {}", cfg.dst))?;
        let mut sock = UdpSocket::from_std(s);
        poll.registry()
            .register(&mut sock, Token(i), Interest::READABLE)
            .context("registering a flow's socket")?;
        flows.push(Flow {
            sock,
            answered: false,
            last_rx: start,
        });
    }
    let mut g = Gen {
        cfg: cfg.clone(),
        flows,
        seq: 0,
        sent: 0,
        received: 0,
        send_errors: 0,
        buf: Vec::with_capacity(cfg.size),
    };
    let mut rx = vec![0u8; 65536];
    let mut events = Events::with_capacity(1024);
    let mut reprimes = 0u64;
    let start = Instant::now();
    let deadline = start + cfg.duration;
    for i in 0..cfg.flows {
        for _ in 0..cfg.window {
            g.send(i)?;
        }
        g.flows[i].last_rx = start;
    }
    let mut next_check = start + cfg.stall;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        poll_ignoring_eintr(&mut poll, &mut events, Duration::from_millis(50))?;
        for ev in events.iter() {
            let i = ev.token().0;
            for _ in 0..g.drain(i, &mut rx)? {
                g.send(i)?;
            }
        }
        if now >= next_check {
            next_check = now + cfg.stall;
            let limit = now.checked_sub(cfg.stall).unwrap_or(start);
            for i in 0..cfg.flows {
                if g.flows[i].last_rx < limit {
                    reprimes += 1;
                    g.flows[i].last_rx = now;
                    for _ in 0..cfg.window {
                        g.send(i)?;
                    }
                }
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let received_in_run = g.received;
    // Replies still in flight.
    let end = Instant::now() + Duration::from_millis(200);
    while Instant::now() < end {
        poll_ignoring_eintr(&mut poll, &mut events, Duration::from_millis(50))?;
        for ev in events.iter() {
            g.drain(ev.token().0, &mut rx)?;
        }
    }
    let per_s = |n: u64| {
        if elapsed > 0.0 {
            n as f64 / elapsed
        } else {
            0.0
        }
    };
    Ok(FlowsResult {
        flows: cfg.flows,
        flows_answered: g.flows.iter().filter(|f| f.answered).count(),
        sent: g.sent,
        received: g.received,
        elapsed_s: (elapsed * 1000.0).round() / 1000.0,
        send_rate: per_s(g.sent),
        recv_rate: per_s(received_in_run),
        reprimes,
        send_errors: g.send_errors,
    })
}

fn poll_ignoring_eintr(poll: &mut Poll, events: &mut Events, timeout: Duration) -> Result<()> {
    match poll.poll(events, Some(timeout)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::Interrupted => {
            events.clear();
            Ok(())
        }
        Err(e) => Err(e).context("polling the flows"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn requests_are_sockperf_pong_requests() {
        let mut b = Vec::new();
        request(0x0102, 20, &mut b);
        assert_eq!(b.len(), 20);
        assert_eq!(&b[..8], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(&b[8..10], &[0, 3], "client | pong");
        assert_eq!(&b[10..14], &[0, 0, 0, 20]);
        assert!(b[14..].iter().all(|&x| x == 0));
    }

    /// A loopback echo that answers every other flow only: the flows it
    /// ignores stall and get re-primed, the others run the closed loop.
    #[test]
    fn closed_loop_against_a_loopback_echo() {
        let echo = StdUdpSocket::bind("127.0.0.1:0").unwrap();
        echo.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let dst = echo.local_addr().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let d2 = Arc::clone(&done);
        let server = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let mut ports = std::collections::BTreeMap::new();
            while !d2.load(Ordering::Relaxed) {
                if let Ok((n, from)) = echo.recv_from(&mut buf) {
                    let next = ports.len();
                    let idx = *ports.entry(from.port()).or_insert(next);
                    if idx % 2 == 0 {
                        echo.send_to(&buf[..n], from).unwrap();
                    }
                }
            }
        });
        let cfg = FlowsConfig {
            dst,
            flows: 4,
            window: 2,
            size: 64,
            duration: Duration::from_millis(600),
            stall: Duration::from_millis(100),
        };
        let r = run(&cfg, &AtomicBool::new(false)).unwrap();
        done.store(true, Ordering::Relaxed);
        server.join().unwrap();
        assert_eq!(r.flows, 4);
        assert_eq!(r.flows_answered, 2, "{r:?}");
        assert!(r.received > 100, "the closed loop keeps going: {r:?}");
        assert!(r.sent >= r.received, "{r:?}");
        assert!(r.reprimes >= 2, "silent flows are re-primed: {r:?}");
        assert!((0.5..2.0).contains(&r.elapsed_s), "{r:?}");
        assert!(r.to_kv().contains("flows_answered=2\n"));
        // Bad input is an error, not a hang.
        let bad = FlowsConfig { size: 10, ..cfg };
        assert!(run(&bad, &AtomicBool::new(false)).is_err());
    }
}
