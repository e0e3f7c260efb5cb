//! `steer proxy --io kernel`: the same UDP forwarder written the way a proxy
//! author would without steer, as the baseline steer's proxy is measured
//! against. One current_thread tokio runtime per CPU (pinned), each with its
//! own socket on the proxy port (`SO_REUSEPORT`, so the kernel spreads
//! flows over them by hash and RPS/RFS steers their packets); each client
//! flow gets a task and a connected backend socket, exactly as in steer's
//! proxy; replies go back from the runtime's port socket.
//!
//! Invariants: a flow is served by the runtime whose socket received its
//! first datagram (the kernel keeps a flow on one `SO_REUSEPORT` socket);
//! datagrams of a flow are forwarded in arrival order (one bounded queue
//! per flow; a full queue drops and counts, like steer's flow queue).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::Relayed;

/// Datagrams queued per flow before the proxy drops (steer's flow queue
/// default is of the same order).
const FLOW_QUEUE: usize = 256;

/// A UDP socket on `port` for IPv4 and IPv6 (dual-stack; IPv4 only where
/// the host has no IPv6), bound to `interface`, with `SO_REUSEPORT` (one per
/// runtime) and a 4 MiB receive buffer, non-blocking for tokio.
fn reuseport_socket(interface: &str, port: u16) -> io::Result<std::net::UdpSocket> {
    let any6 = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
    match bound(interface, any6) {
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => bound(
            interface,
            SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port)),
        ),
        r => r,
    }
}

fn bound(interface: &str, addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(false)?;
    }
    s.bind_device(Some(interface.as_bytes()))?;
    s.set_reuse_port(true)?;
    let _ = s.set_recv_buffer_size(4 << 20);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// Binds every runtime's socket up front (so a port in use is one error at
/// start), then serves each on its own pinned thread until `stop`.
#[allow(clippy::too_many_arguments)]
pub(super) fn serve(
    interface: &str,
    port: u16,
    backend: SocketAddr,
    cpus: &[usize],
    pin: bool,
    idle: Duration,
    relayed: Arc<Relayed>,
    stop: impl Fn() -> bool + Send + Sync + 'static,
    set_up: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let sockets = cpus
        .iter()
        .map(|_| reuseport_socket(interface, port))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| {
            anyhow::anyhow!("binding udp port {port} on {interface} with SO_REUSEPORT: {e}")
        })?;
    // Bound (SO_BINDTODEVICE needs CAP_NET_RAW): the privileges can go.
    set_up()?;
    println!(
        "steer proxy: ready (io kernel) on {interface} udp port {port} -> {backend}, {} socket(s)",
        sockets.len()
    );
    let stop = Arc::new(stop);
    let threads = cpus
        .iter()
        .zip(sockets)
        .map(|(&cpu, socket)| {
            let (relayed, stop) = (Arc::clone(&relayed), Arc::clone(&stop));
            super::spawn_local_runtime(
                format!("kproxy-{cpu}"),
                pin.then_some(cpu),
                move || async move {
                    let socket = Rc::new(UdpSocket::from_std(socket)?);
                    tokio::select! {
                        r = accept_loop(socket, backend, idle, relayed) => r,
                        () = async {
                            while !stop() {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        } => Ok(()),
                    }
                },
            )
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut first_error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert(anyhow::anyhow!("a proxy thread panicked"));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Receives on the port socket and hands each datagram to its flow's task,
/// starting one for a new client address.
async fn accept_loop(
    socket: Rc<UdpSocket>,
    backend: SocketAddr,
    idle: Duration,
    relayed: Arc<Relayed>,
) -> anyhow::Result<()> {
    let mut flows: HashMap<SocketAddr, mpsc::Sender<Vec<u8>>> = HashMap::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, client) = socket.recv_from(&mut buf).await?;
        let datagram = buf[..n].to_vec();
        let queue = match flows.get(&client) {
            Some(q) if !q.is_closed() => q,
            _ => {
                let (tx, rx) = mpsc::channel(FLOW_QUEUE);
                relayed.flows_multi.fetch_add(1, Ordering::Relaxed);
                tokio::task::spawn_local(relay(
                    rx,
                    Rc::clone(&socket),
                    client,
                    backend,
                    idle,
                    Arc::clone(&relayed),
                ));
                flows.insert(client, tx);
                &flows[&client]
            }
        };
        if queue.try_send(datagram).is_err() {
            relayed.send_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Forwards one flow's datagrams to the backend and the backend's replies
/// to the client, until the flow is idle for `idle`.
async fn relay(
    mut from_client: mpsc::Receiver<Vec<u8>>,
    port: Rc<UdpSocket>,
    client: SocketAddr,
    backend: SocketAddr,
    idle: Duration,
    relayed: Arc<Relayed>,
) {
    let Ok(socket) = super::backend_socket(backend).await else {
        relayed.send_errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let mut buf = vec![0u8; 65536];
    loop {
        tokio::select! {
            d = tokio::time::timeout(idle, from_client.recv()) => match d {
                Ok(Some(d)) => relayed.count(socket.send(&d).await.is_ok(), &relayed.to_backend),
                // Idle: dropping the receiver closes the flow; the accept
                // loop starts a new one on the client's next datagram.
                Ok(None) | Err(_) => break,
            },
            n = socket.recv(&mut buf) => match n {
                Ok(n) => relayed.count(port.send_to(&buf[..n], client).await.is_ok(), &relayed.to_client),
                Err(_) => relayed.count(false, &relayed.to_client),
            },
        }
    }
}
