//! An ordered echo load: client threads in the test namespace keep a
//! window of numbered datagrams in flight on each of their flows, now and
//! then a burst beyond it, and check that every flow's replies come back in
//! increasing order. And a run-to-completion echo handler that moves the
//! flows it answers between workers at random, through its
//! [`PacketContext`] (records and pins).

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use steer_engine::echo::{echo_in_place, EchoMode};
use steer_engine::engine::{PacketContext, PacketHandler, Verdict};

use super::PORT;
use steer_testbed::TestNet;

/// What the clients send.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Client threads, each with its own flows.
    pub threads: usize,
    /// Flows (UDP sockets) per thread; even ones IPv4, odd ones IPv6.
    pub flows_per_thread: usize,
    /// Datagrams in flight per flow.
    pub window: u64,
    /// Now and then, this many more datagrams per flow at once (0: never).
    pub burst: u64,
    /// How often a burst goes out.
    pub burst_every: Duration,
    /// For how long.
    pub duration: Duration,
}

/// What came back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Datagrams sent.
    pub sent: u64,
    /// Replies in order (a higher number than every earlier reply of their
    /// flow).
    pub answered: u64,
    /// Replies with a lower number than an earlier reply of their flow.
    pub reordered: u64,
    /// Replies with the number of the previous reply of their flow.
    pub duplicated: u64,
}

impl LoadReport {
    fn add(&mut self, o: &LoadReport) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.reordered += o.reordered;
        self.duplicated += o.duplicated;
    }
}

/// Replies a flow waits for before it counts the rest of its window lost.
const LOSS_TIMEOUT: Duration = Duration::from_millis(20);

struct FlowState {
    socket: UdpSocket,
    to: SocketAddr,
    next: u64,
    /// Numbers below this are answered or given up on.
    floor: u64,
    last: Option<u64>,
    progress: Instant,
}

impl FlowState {
    /// Counts the reply whose sequence number starts `buf`: reordered
    /// below the last one, duplicated when equal, else answered; the
    /// sequence number when answered.
    fn reply(&mut self, buf: &[u8], report: &mut LoadReport) -> Option<u64> {
        let seq = u64::from_be_bytes(buf[..8].try_into().unwrap());
        match self.last {
            Some(last) if seq < last => report.reordered += 1,
            Some(last) if seq == last => report.duplicated += 1,
            _ => {
                self.last = Some(seq);
                report.answered += 1;
                return Some(seq);
            }
        }
        None
    }
}

/// Runs `load` against the engine on `net`'s host end and returns what the
/// clients saw, summed.
pub fn run(net: &TestNet, load: &Load) -> LoadReport {
    let mut total = LoadReport::default();
    std::thread::scope(|s| {
        let clients: Vec<_> = (0..load.threads)
            .map(|t| s.spawn(move || net.in_ns(|| client(net, load, t))))
            .collect();
        for c in clients {
            total.add(&c.join().unwrap());
        }
    });
    total
}

fn client(net: &TestNet, load: &Load, thread: usize) -> LoadReport {
    let mut flows: Vec<FlowState> = (0..load.flows_per_thread)
        .map(|i| {
            let (local, remote): (IpAddr, IpAddr) = if (i + thread).is_multiple_of(2) {
                (net.peer_v4.into(), net.host_v4.into())
            } else {
                (net.peer_v6.into(), net.host_v6.into())
            };
            let socket = UdpSocket::bind(SocketAddr::new(local, 0)).unwrap();
            socket.set_nonblocking(true).unwrap();
            FlowState {
                socket,
                to: SocketAddr::new(remote, PORT),
                next: 0,
                floor: 0,
                last: None,
                progress: Instant::now(),
            }
        })
        .collect();
    let mut report = LoadReport::default();
    let mut msg = [0u8; 48];
    msg[8..].copy_from_slice(b"steer ordered echo test payload.\0\0\0\0\0\0\0\0");
    let mut buf = [0u8; 256];
    let start = Instant::now();
    let mut last_burst = start;
    while start.elapsed() < load.duration {
        let burst = load.burst > 0 && last_burst.elapsed() >= load.burst_every;
        if burst {
            last_burst = Instant::now();
        }
        let mut progress = false;
        for f in &mut flows {
            let in_flight = f.next - f.floor;
            let mut want = load.window.saturating_sub(in_flight);
            if burst {
                want += load.burst;
            }
            for _ in 0..want {
                msg[..8].copy_from_slice(&f.next.to_be_bytes());
                match f.socket.send_to(&msg, f.to) {
                    Ok(_) => {
                        f.next += 1;
                        report.sent += 1;
                        progress = true;
                    }
                    Err(_) => break, // socket buffer full: later
                }
            }
            loop {
                match f.socket.recv_from(&mut buf) {
                    Ok((len, _)) if len >= 8 => {
                        progress = true;
                        if let Some(seq) = f.reply(&buf, &mut report) {
                            f.floor = f.floor.max(seq + 1);
                            f.progress = Instant::now();
                        }
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("recv: {e}"),
                }
            }
            if f.next > f.floor && f.progress.elapsed() > LOSS_TIMEOUT {
                // The rest of the window was dropped somewhere (counted
                // there): open it again.
                f.floor = f.next;
                f.progress = Instant::now();
            }
        }
        if !progress {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    // Late replies still count (and are still checked for order).
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(200) {
        for f in &mut flows {
            while let Ok((len, _)) = f.socket.recv_from(&mut buf) {
                if len >= 8 {
                    f.reply(&buf, &mut report);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    report
}

/// A tiny xorshift generator (the tests need noise, not quality).
#[derive(Debug, Clone)]
pub struct Noise(u64);

impl Noise {
    /// A generator seeded with `seed` (any value).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Echoes every datagram (in place, from the worker that handles it), and
/// for one packet in `every`, moves the packet's flow to a random worker of
/// `cpus`: records it there (twice as often) or pins it there, or unpins
/// it. Frames the echo refuses are dropped (counted).
pub struct MovingEcho {
    noise: Noise,
    every: u64,
    cpus: Vec<usize>,
}

impl MovingEcho {
    /// The handler of the worker on `cpu`.
    pub fn new(cpu: usize, every: u64, cpus: &[usize]) -> Self {
        Self {
            noise: Noise::new(cpu as u64 + 1),
            every: every.max(1),
            cpus: cpus.to_vec(),
        }
    }
}

impl PacketHandler for MovingEcho {
    fn handle(&mut self, packet: &mut [u8], ctx: &PacketContext) -> Verdict {
        if self.noise.next().is_multiple_of(self.every) {
            if let Some(hash) = ctx.flow_hash(packet) {
                let r = self.noise.next();
                let cpu = self.cpus[(r >> 8) as usize % self.cpus.len()];
                let _ = match r % 4 {
                    0 | 1 => ctx.record_on(hash, cpu).map(|_| ()),
                    2 => ctx.pin_to(hash, cpu),
                    _ => ctx.unpin(hash),
                };
            }
        }
        match echo_in_place(packet, EchoMode::Plain) {
            Ok(len) => Verdict::Transmit(len),
            Err(_) => Verdict::Drop,
        }
    }
}
