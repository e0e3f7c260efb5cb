//! `steer tcp-load`: many TCP connections to an echo server, each sending a
//! message and waiting for it to come back, for a while; prints messages per
//! second and round-trip percentiles, as JSON. The client side of the
//! kernel-socket steering demo and measurements (`steer tcp-echo`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use serde_json::json;

/// `steer tcp-load` arguments.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  \
    steer tcp-load --connect 10.0.0.1:7000 --connections 32 --duration 10")]
pub struct TcpLoadArgs {
    /// The echo server.
    #[arg(long)]
    pub connect: SocketAddr,
    /// Connections (each its own flow).
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Client threads; the connections are spread over them.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Message size in bytes.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0, value_parser = crate::args::seconds)]
    pub duration: f64,
    /// Pause between rounds (every connection sends once per round), in
    /// microseconds: paces the load.
    #[arg(long, default_value_t = 0)]
    pub pause_us: u64,
}

/// How long a connection may go without its echo before the run fails.
const ECHO_TIMEOUT: Duration = Duration::from_secs(5);

/// Says which connection failed and how, in words an operator can act on.
fn connection_error(index: usize, sent: u64, e: std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    if matches!(e.kind(), WouldBlock | TimedOut) {
        anyhow::anyhow!(
            "connection {index}: no echo for {} s after {sent} messages: the connection \
             stalled (on the server, look for TcpInCsumErrors in nstat and for held-back or \
             dropped frames in its steering counters)",
            ECHO_TIMEOUT.as_secs()
        )
    } else {
        anyhow::anyhow!("connection {index} (after {sent} messages): {e}")
    }
}

/// One thread's connections, in rounds: send on each, then read each back.
/// `first` is the index of the first connection, for error messages.
fn drive(
    conns: &mut [TcpStream],
    first: usize,
    size: usize,
    until: Instant,
    pause: Duration,
) -> anyhow::Result<(u64, Vec<u32>)> {
    let msg = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let (mut messages, mut rtts) = (0u64, Vec::new());
    let mut rounds = 0u64;
    while Instant::now() < until {
        let start = Instant::now();
        for (i, c) in conns.iter_mut().enumerate() {
            c.write_all(&msg)
                .map_err(|e| connection_error(first + i, rounds, e))?;
        }
        for (i, c) in conns.iter_mut().enumerate() {
            c.read_exact(&mut back)
                .map_err(|e| connection_error(first + i, rounds, e))?;
            messages += 1;
        }
        rounds += 1;
        rtts.push(u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX));
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    Ok((messages, rtts))
}

pub fn run(args: &TcpLoadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.connections > 0 && args.threads > 0 && args.size > 0,
        "--connections, --threads and --size must be positive"
    );
    let mut conns = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let c = TcpStream::connect(args.connect)
            .with_context(|| format!("connecting to {}", args.connect))?;
        c.set_nodelay(true)?;
        c.set_read_timeout(Some(ECHO_TIMEOUT))?;
        conns.push(c);
    }
    let until = Instant::now() + Duration::from_secs_f64(args.duration.max(0.0));
    let pause = Duration::from_micros(args.pause_us);
    let per = args.connections.div_ceil(args.threads);
    let started = Instant::now();
    let results: Vec<anyhow::Result<(u64, Vec<u32>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .chunks_mut(per)
            .enumerate()
            .map(|(t, chunk)| s.spawn(move || drive(chunk, t * per, args.size, until, pause)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a client thread panicked")))
            })
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let (mut messages, mut rtts) = (0u64, Vec::new());
    for r in results {
        let (m, t) = r?;
        messages += m;
        rtts.extend(t);
    }
    rtts.sort_unstable();
    let pct = |q: f64| {
        rtts.get(((rtts.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    let report = json!({
        "connections": args.connections,
        "size": args.size,
        "elapsed_s": elapsed,
        "messages": messages,
        "messages_per_s": messages as f64 / elapsed.max(1e-9),
        "round_us": { "p50": pct(0.5), "p99": pct(0.99), "max": rtts.last().copied().unwrap_or(0) },
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
