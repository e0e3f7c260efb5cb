//! The demo's clients: one UDP socket per flow, made inside the peer's
//! network namespace (a thread that joins it with `setns`; a socket stays
//! in the namespace it was made in), sending numbered datagrams at a steady
//! rate and counting the echoes: sent, answered, and answered out of order.
//!
//! Invariants: one thread owns every socket; [`Clients::tally`] reads
//! counters it publishes, so the phases can be cut at any moment. The
//! clients are made before the engine starts (joining a namespace needs
//! CAP_SYS_ADMIN, which the engine drops) and send nothing until
//! [`Clients::go`]; unless told to keep them, their thread drops every
//! capability of its own once its sockets are open.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// Counters of all flows so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Datagrams sent.
    pub sent: u64,
    /// Echoes received.
    pub answered: u64,
    /// Echoes with a lower number than one already received on their flow.
    pub reordered: u64,
}

#[derive(Debug, Default)]
struct Shared {
    go: AtomicBool,
    stop: AtomicBool,
    sent: AtomicU64,
    answered: AtomicU64,
    reordered: AtomicU64,
}

/// What the clients' thread drops of its own capabilities once set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// Nothing (`--keep-capabilities`).
    Nothing,
    /// The bounding set only: the process switches user later, which
    /// clears the rest, and every thread must still be able to take part.
    Bounding,
    /// Every capability.
    All,
}

/// The running clients.
#[derive(Debug)]
pub struct Clients {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Clients {
    /// Makes `flows` flows from network namespace `netns` (a name under
    /// `/run/netns`) to `server`, each to send `rate` datagrams a second
    /// from [`Clients::go`] on; `shed`: what their thread drops of its own
    /// capabilities once the sockets are open.
    pub fn start(
        netns: &str,
        server: SocketAddr,
        flows: usize,
        rate: f64,
        shed: Shed,
    ) -> anyhow::Result<Self> {
        let path = format!("/run/netns/{netns}");
        let ns = File::open(&path).with_context(|| format!("opening the namespace {path}"))?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("demo-clients".into())
            .spawn(move || -> anyhow::Result<()> {
                let joined = nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| anyhow::anyhow!("joining the namespace {path}: {e}"));
                let sockets = joined.and_then(|()| open_sockets(server, flows));
                let sockets = sockets.and_then(|v| {
                    let none = Default::default();
                    match shed {
                        Shed::Nothing => {}
                        Shed::Bounding => steer_xdp::privileges::lower_bounding(&none)
                            .context("lowering the clients' bounding set")?,
                        Shed::All => steer_xdp::privileges::drop_all_but(&none)
                            .context("dropping the clients' capabilities")?,
                    }
                    Ok(v)
                });
                let sockets = match sockets {
                    Ok(v) => {
                        let _ = ready_tx.send(Ok(()));
                        v
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                        return Ok(());
                    }
                };
                while !s.go.load(Relaxed) && !s.stop.load(Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                run(&sockets, rate, &s)
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                shared,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(anyhow::anyhow!(e)),
            Err(_) => Err(anyhow::anyhow!("the client thread died")),
        }
    }

    /// Starts sending.
    pub fn go(&self) {
        self.shared.go.store(true, Relaxed);
    }

    /// The counters now.
    pub fn tally(&self) -> Tally {
        Tally {
            sent: self.shared.sent.load(Relaxed),
            answered: self.shared.answered.load(Relaxed),
            reordered: self.shared.reordered.load(Relaxed),
        }
    }

    /// Stops sending and waits for the thread.
    pub fn stop(mut self) -> anyhow::Result<Tally> {
        self.shared.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            t.join()
                .map_err(|_| anyhow::anyhow!("the client thread panicked"))??;
        }
        Ok(self.tally())
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
    }
}

fn open_sockets(server: SocketAddr, flows: usize) -> anyhow::Result<Vec<UdpSocket>> {
    (0..flows)
        .map(|_| {
            let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
            s.connect(server)?;
            s.set_nonblocking(true)?;
            Ok(s)
        })
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("opening the client sockets to {server}"))
}

/// Sends every millisecond what the rate owes by then, and drains echoes.
fn run(sockets: &[UdpSocket], rate: f64, s: &Shared) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut seq = vec![0u32; sockets.len()];
    let mut highest: Vec<Option<u32>> = vec![None; sockets.len()];
    let mut buf = [0u8; 256];
    while !s.stop.load(Relaxed) {
        let owed = (started.elapsed().as_secs_f64() * rate) as u32;
        for (i, sock) in sockets.iter().enumerate() {
            while seq[i] < owed {
                let mut msg = [0u8; 32];
                msg[..4].copy_from_slice(&seq[i].to_be_bytes());
                msg[4..].copy_from_slice(b"steer demo flow payload....!");
                match sock.send(&msg) {
                    Ok(_) => s.sent.fetch_add(1, Relaxed),
                    // A full socket buffer: try again next round.
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e).context("sending a client datagram"),
                };
                seq[i] += 1;
            }
            while let Ok(len) = sock.recv(&mut buf) {
                if len < 4 {
                    continue;
                }
                let n = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
                s.answered.fetch_add(1, Relaxed);
                match highest[i] {
                    Some(h) if n < h => {
                        s.reordered.fetch_add(1, Relaxed);
                    }
                    _ => highest[i] = Some(n),
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}
