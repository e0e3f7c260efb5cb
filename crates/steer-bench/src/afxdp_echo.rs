//! The raw AF_XDP rx->tx turnaround (what `scripts/bench-xdp.sh` measures as
//! rx-tx): the steer XDP program redirects the port's traffic to one socket
//! per rx queue, and one pinned thread receives a batch, turns each datagram
//! around in place (MACs, addresses, ports, full UDP checksum) and sends the
//! batch from the same socket, polling without ever sleeping. No steering,
//! no rings between threads: no AF_XDP server can answer faster on this
//! path, so it is the ceiling for steer's echo server.

use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use steer_core::packet::echo::{echo_in_place, EchoMode};
use steer_xdp::{PortConfig, Proto, XdpPort};

use crate::sys::pin;

/// Serves UDP `port` on `interface` from CPU `cpu` until SIGINT/SIGTERM.
pub fn run(interface: &str, port: u16, cpu: usize) -> Result<()> {
    let stop = steer_xdp::shutdown::install().context("installing signal handlers")?;
    pin(cpu).with_context(|| format!("pinning to CPU {cpu}"))?;
    let mut xdp = XdpPort::open(
        PortConfig::new(interface)
            .own(Proto::Udp, port)
            .frames(8192, 2048),
    )
    .with_context(|| format!("opening AF_XDP on {interface}"))?;
    let mut sockets = xdp.take_sockets();
    println!(
        "afxdp echo: ready on {interface} udp port {port}, {} queue(s), {:?}, CPU {cpu}",
        sockets.len(),
        xdp.modes()
    );
    let mut frames = Vec::with_capacity(64);
    let mut echoed = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for s in sockets.iter_mut() {
            frames.clear();
            if s.recv(&mut frames, 64).unwrap_or(0) > 0 {
                for f in frames.iter_mut() {
                    // The same rewrite steer's echo does (addresses and
                    // ports swapped, checksums recomputed), so the two
                    // servers do equal per-packet work.
                    s.with_data_mut(f, |buf| echo_in_place(buf, EchoMode::Plain));
                }
                echoed += s.send(&mut frames).unwrap_or(0) as u64;
                s.recycle(frames.drain(..));
            }
            s.complete();
        }
    }
    let census = xdp.census(&mut sockets);
    println!(
        "afxdp echo: stopped, {echoed} datagrams echoed, frame census {}",
        if census.check().is_ok() {
            "balanced"
        } else {
            "NOT balanced"
        }
    );
    Ok(())
}
