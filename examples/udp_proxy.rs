//! A UDP forwarder on steer's flow delivery in a few lines: each client flow
//! becomes a tokio task that forwards to the backend and relays its replies.
//! Reading a flow records the task's CPU, so steer steers the flow's next
//! packets to the worker on that CPU. The full proxy, with run-time policy
//! and runtime switches and counters, is `steer proxy`.
//!
//! ```text
//! cargo run --example udp_proxy -- eth1 7000 127.0.0.1:11111   # as root
//! ```

use std::net::SocketAddr;

use steer::engine::Engine;
use steer::flows::{Flow, FlowOptions};
use steer::xdp::Proto;
use tokio::net::UdpSocket;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: udp_proxy INTERFACE PORT BACKEND";
    let mut args = std::env::args().skip(1);
    let interface = args.next().ok_or(usage)?;
    let port: u16 = args.next().ok_or(usage)?.parse()?;
    let backend: SocketAddr = args.next().ok_or(usage)?.parse()?;

    let engine = Engine::builder(&interface)
        .own(Proto::Udp, port)
        .deliver_flows(FlowOptions::default())
        .start()?;
    let listener = engine.listener().ok_or("flow delivery is on")?;
    println!("forwarding udp port {port} on {interface} to {backend}");
    while let Some(flow) = listener.accept().await {
        tokio::spawn(relay(flow, backend));
    }
    Ok(())
}

/// One flow: client datagrams to the backend, the backend's replies back.
async fn relay(mut flow: Flow, backend: SocketAddr) -> std::io::Result<()> {
    let socket = UdpSocket::bind(if backend.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .await?;
    socket.connect(backend).await?;
    let writer = flow.writer();
    let mut buf = vec![0u8; 65536];
    loop {
        tokio::select! {
            datagram = flow.recv() => match datagram {
                Some(d) => { socket.send(&d).await?; }
                None => return Ok(()), // the engine stopped
            },
            n = socket.recv(&mut buf) => { let _ = writer.send(&buf[..n?]); }
        }
    }
}
