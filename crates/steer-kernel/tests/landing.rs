//! Kernel sockets land where they are read: a tokio TCP echo server and a
//! connected UDP echo socket in a namespace of the test's own record their
//! flows on every read; the RFS program's per-CPU counters (its cpumap
//! program runs on the CPU that receives the frame) and SO_INCOMING_CPU show
//! the frames handled on the reading thread's CPU, and following it when the
//! thread moves. Needs root and two CPUs.

mod support;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

use socket2::SockRef;
use steer_kernel::{KernelSteering, Policy, Proto, Recorded};
use support::{pin, Pair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TCP_PORT: u16 = 7000;
const UDP_PORT: u16 = 7001;
const CLIENT_UDP_PORT: u16 = 40001;

/// What the server thread is told between client rounds.
enum Cmd {
    /// Pin to this CPU and go on serving.
    MoveTo(usize),
}

/// The server's report after each round: the CPU its socket last received
/// on (SO_INCOMING_CPU), and what its last record did.
type Report = (usize, Option<Recorded>);

/// The test's ends of the channels to its server and client threads.
struct Rounds {
    round_tx: mpsc::Sender<()>,
    done_rx: mpsc::Receiver<()>,
    rep_rx: mpsc::Receiver<Report>,
    cmd_tx: mpsc::Sender<Cmd>,
}

/// The server thread's ends: its reports out, the test's commands in.
struct ServerEnds {
    rep_tx: mpsc::Sender<Report>,
    cmd_rx: mpsc::Receiver<Cmd>,
}

/// The client thread's ends: a round to send in, "done" out.
struct ClientEnds {
    round_rx: mpsc::Receiver<()>,
    done_tx: mpsc::Sender<()>,
}

/// The channels between the test and its server and client threads.
fn rounds() -> (Rounds, ServerEnds, ClientEnds) {
    let (round_tx, round_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let (rep_tx, rep_rx) = mpsc::channel();
    let (cmd_tx, cmd_rx) = mpsc::channel();
    (
        Rounds {
            round_tx,
            done_rx,
            rep_rx,
            cmd_tx,
        },
        ServerEnds { rep_tx, cmd_rx },
        ClientEnds { round_rx, done_tx },
    )
}

impl Rounds {
    /// One client round, then the server's report; the server is told to
    /// move to `to` for the next. Returns the report and what landed per
    /// CPU during the round.
    fn run(&self, steering: &KernelSteering, to: usize) -> (usize, Option<Recorded>, Vec<u64>) {
        let before = landed(steering);
        self.round_tx.send(()).unwrap();
        self.done_rx.recv().unwrap();
        let (cpu, rec) = self.rep_rx.recv().unwrap();
        self.cmd_tx.send(Cmd::MoveTo(to)).unwrap();
        (cpu, rec, delta(&landed(steering), &before))
    }

    /// Rounds 2 to 4 of a flow placed on CPU 1 in round 1: round 2 lands
    /// on CPU 1; round 3, read on CPU 0, records the move; round 4 lands on
    /// CPU 0 (SO_INCOMING_CPU too). Then [`Rounds::finish`].
    fn follow_the_move_to_cpu_0(
        self,
        steering: &KernelSteering,
        client: std::thread::JoinHandle<()>,
        server: std::thread::JoinHandle<()>,
    ) {
        let (cpu, _, d) = self.run(steering, 0);
        assert_eq!(cpu, 1);
        assert!(d[1] >= 200 && d[0] == 0, "round 2 landed per CPU: {d:?}");
        let (_, rec, _) = self.run(steering, 0);
        assert_eq!(
            rec,
            Some(Recorded::Steered {
                from: Some(1),
                to: 0
            })
        );
        let (cpu, _, d) = self.run(steering, 0);
        assert_eq!(cpu, 0, "SO_INCOMING_CPU follows the move");
        assert!(d[0] >= 200 && d[1] == 0, "round 4 landed per CPU: {d:?}");
        self.finish(client, server);
    }

    /// Ends the client (no more rounds), then the server (no more
    /// commands), and waits for both.
    fn finish(self, client: std::thread::JoinHandle<()>, server: std::thread::JoinHandle<()>) {
        drop(self.round_tx);
        client.join().unwrap();
        drop(self.cmd_tx);
        server.join().unwrap();
    }
}

impl ServerEnds {
    /// After the echo of a round's last message: reports `cpu` (the
    /// socket's SO_INCOMING_CPU) and `last`, then follows the test's
    /// command (pins the thread, refreshes the recorder's affinity).
    /// `false` once the test sends no more.
    fn round_done<P: steer_core::record::CpuProbe>(
        &self,
        cpu: usize,
        last: Option<Recorded>,
        rec: &mut steer_kernel::KernelRecorder<P>,
    ) -> bool {
        self.rep_tx.send((cpu, last)).unwrap();
        match self.cmd_rx.recv() {
            Ok(Cmd::MoveTo(c)) => {
                pin(c);
                rec.refresh_affinity();
                true
            }
            Err(_) => false,
        }
    }
}

impl ClientEnds {
    /// Runs `round` each time the test asks for one and says when it is
    /// done; returns once the test asks for no more.
    fn serve(&self, mut round: impl FnMut()) {
        while self.round_rx.recv().is_ok() {
            round();
            self.done_tx.send(()).unwrap();
        }
    }
}

/// Message `i` of a round of 200: `fill` bytes behind its number, the
/// last one marked `E` (the server reports after echoing it).
fn round_message(buf: &mut [u8; 100], i: u32, fill: u8) {
    buf.fill(fill);
    buf[..4].copy_from_slice(&i.to_be_bytes());
    if i == 199 {
        buf[0] = b'E';
    }
}

fn landed(steering: &KernelSteering) -> Vec<u64> {
    steering.program().unwrap().landed_per_cpu().unwrap()
}

fn delta(after: &[u64], before: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// Starts steering on the server end (from a thread in its namespace).
fn start_steering(pair: &Pair) -> KernelSteering {
    let dev = pair.srv_dev.clone();
    Pair::in_ns(&pair.srv_ns, move || {
        KernelSteering::builder(&dev)
            .own(Proto::Tcp, TCP_PORT)
            .own(Proto::Udp, UDP_PORT)
            .policy(Policy::LlcAffinity)
            .start()
            .expect("steering starts on the test veth")
    })
}

#[test]
fn tcp_connection_lands_on_the_reading_cpu_and_follows_it() {
    let pair = Pair::new();
    let steering = std::sync::Arc::new(start_steering(&pair));
    let (rounds, server_ends, client_ends) = rounds();
    let srv_addr = SocketAddr::new(pair.srv_v4.into(), TCP_PORT);
    let (ready_tx, ready_rx) = mpsc::channel();
    let st = steering.clone();
    let server = Pair::spawn_in(&pair.srv_ns, move || {
        pin(1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind(srv_addr).await.unwrap();
            ready_tx.send(()).unwrap();
            let (mut stream, _) = listener.accept().await.unwrap();
            let flow = st.flow(&stream).unwrap();
            let mut rec = st.recorder();
            let mut buf = [0u8; 100];
            let mut last = None;
            while stream.read_exact(&mut buf).await.is_ok() {
                if let Ok(r) = rec.record_flow(&flow) {
                    if r != Recorded::Unchanged(steer_core::policy::RecordOutcome::Unchanged) {
                        last = Some(r);
                    }
                }
                stream.write_all(&buf).await.unwrap();
                if buf[0] == b'E' {
                    let cpu = SockRef::from(&stream).cpu_affinity().unwrap();
                    if !server_ends.round_done(cpu, last.take(), &mut rec) {
                        break;
                    }
                }
            }
        });
    });
    ready_rx.recv().unwrap();
    let client = Pair::spawn_in(&pair.cli_ns, move || {
        pin(0);
        let mut c = std::net::TcpStream::connect(srv_addr).unwrap();
        c.set_nodelay(true).unwrap();
        use std::io::{Read, Write};
        let mut buf = [0u8; 100];
        client_ends.serve(|| {
            for i in 0..200u32 {
                round_message(&mut buf, i, b'x');
                c.write_all(&buf).unwrap();
                c.read_exact(&mut buf).unwrap();
            }
        });
    });
    // Round 1: the server reads on CPU 1. The connection is placed there on
    // its first read; give the placement one round trip, then measure.
    let (cpu, rec, _) = rounds.run(&steering, 1);
    assert_eq!(cpu, 1, "SO_INCOMING_CPU after round 1 (record: {rec:?})");
    // Round 3: the server thread moves to CPU 0. Under `llc` on one LLC the
    // move is still written: the thread may no longer run on CPU 1.
    rounds.follow_the_move_to_cpu_0(&steering, client, server);
    let stats = steering.stats();
    let program = stats.program.unwrap();
    assert_eq!(program.forced, 0, "{program:?}");
    assert_eq!(stats.updates, 2, "placed once, moved once: {stats:?}");
}

#[test]
fn udp_flow_lands_on_the_reading_cpu_and_follows_it() {
    let pair = Pair::new();
    let steering = std::sync::Arc::new(start_steering(&pair));
    let srv_addr = SocketAddr::new(pair.srv_v4.into(), UDP_PORT);
    let cli_addr = SocketAddr::new(pair.cli_v4.into(), CLIENT_UDP_PORT);
    let (rounds, server_ends, client_ends) = rounds();
    let (ready_tx, ready_rx) = mpsc::channel();
    let st = steering.clone();
    let server = Pair::spawn_in(&pair.srv_ns, move || {
        pin(1);
        let sock = std::net::UdpSocket::bind(srv_addr).unwrap();
        sock.connect(cli_addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let flow = st.flow(&sock).unwrap();
        let mut rec = st.recorder();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 100];
        let mut last = None;
        while let Ok(n) = sock.recv(&mut buf) {
            if buf[0] == b'Q' {
                break;
            }
            if let Ok(r) = rec.record_flow(&flow) {
                if r.updated() {
                    last = Some(r);
                }
            }
            sock.send(&buf[..n]).unwrap();
            if buf[0] == b'E' {
                let cpu = SockRef::from(&sock).cpu_affinity().unwrap();
                if !server_ends.round_done(cpu, last.take(), &mut rec) {
                    break;
                }
            }
        }
    });
    ready_rx.recv().unwrap();
    let client = Pair::spawn_in(&pair.cli_ns, move || {
        pin(0);
        let c = std::net::UdpSocket::bind(cli_addr).unwrap();
        c.connect(srv_addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 100];
        client_ends.serve(|| {
            for i in 0..200u32 {
                round_message(&mut buf, i, b'u');
                c.send(&buf).unwrap();
                c.recv(&mut buf).unwrap();
            }
        });
        c.send(b"Q").unwrap();
    });
    // Round 1 places the flow on CPU 1 (after the short settle time the
    // first placement of a UDP flow waits).
    let (_, rec, _) = rounds.run(&steering, 1);
    assert_eq!(rec, Some(Recorded::Steered { from: None, to: 1 }));
    // Round 3 runs on CPU 0: the record moves the flow.
    rounds.follow_the_move_to_cpu_0(&steering, client, server);
    let program = steering.stats().program.unwrap();
    assert_eq!(program.forced, 0, "{program:?}");
    // Every datagram but the first (read before the flow was tracked), and
    // the client's last one.
    assert_eq!(program.delivered, 800, "socket filter counted: {program:?}");
}
