//! The sockets from event loops: mio `Source`, tokio `AsyncFd`, and the
//! busy-poll loop, each woken by traffic sent from the test namespace.

use std::{
    net::{SocketAddr, UdpSocket},
    ops::ControlFlow,
    time::{Duration, Instant},
};

use steer_testbed::TestNet;
use steer_xdp::{readiness, PortConfig, Proto, QueueSocket, XdpPort};

const PORT: u16 = 9100;

fn open(net: &TestNet) -> XdpPort {
    XdpPort::open(PortConfig::new(&net.host).own(Proto::Udp, PORT)).expect("open XdpPort")
}

/// Sends `n` datagrams from distinct source ports in the namespace.
fn send_from_ns(net: &TestNet, n: usize) {
    net.in_ns(|| {
        for i in 0..n {
            let u = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap();
            u.send_to(
                format!("m{i}").as_bytes(),
                SocketAddr::new(net.host_v4.into(), PORT),
            )
            .unwrap();
        }
    });
}

#[test]
fn mio_source_wakes_on_rx() {
    let net = TestNet::new();
    let mut port = open(&net);
    let mut sockets = port.take_sockets();
    let mut poll = mio::Poll::new().unwrap();
    for (i, s) in sockets.iter_mut().enumerate() {
        poll.registry()
            .register(s, mio::Token(i), mio::Interest::READABLE)
            .unwrap();
    }
    let mut events = mio::Events::with_capacity(8);
    // Nothing yet: the poll times out without events.
    poll.poll(&mut events, Some(Duration::from_millis(50)))
        .unwrap();
    assert!(events.is_empty());
    send_from_ns(&net, 16);
    let mut received = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut frames = Vec::new();
    while received < 16 && Instant::now() < deadline {
        poll.poll(&mut events, Some(Duration::from_secs(1)))
            .unwrap();
        for ev in events.iter() {
            assert!(ev.is_readable());
            let s: &mut QueueSocket = &mut sockets[ev.token().0];
            received += s.recv(&mut frames, 64).unwrap();
            s.recycle(frames.drain(..));
        }
    }
    assert_eq!(received, 16);
    for s in sockets.iter_mut() {
        poll.registry().deregister(s).unwrap();
    }
}

#[test]
fn tokio_async_fd_wakes_on_rx() {
    let net = TestNet::new();
    let mut port = open(&net);
    let sockets = port.take_sockets();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let received = rt.block_on(async {
        let fds: Vec<_> = sockets
            .into_iter()
            .map(|s| readiness::async_fd(s).unwrap())
            .collect();
        let mut handles = Vec::new();
        let local = tokio::task::LocalSet::new();
        for mut fd in fds {
            handles.push(local.spawn_local(async move {
                let mut n = 0;
                let mut frames = Vec::new();
                while let Ok(Ok(mut guard)) =
                    tokio::time::timeout(Duration::from_millis(1500), fd.readable_mut()).await
                {
                    let s = guard.get_inner_mut();
                    let got = s.recv(&mut frames, 64).unwrap();
                    s.recycle(frames.drain(..));
                    n += got;
                    if got == 0 {
                        guard.clear_ready();
                    }
                }
                n
            }));
        }
        local
            .run_until(async {
                tokio::task::spawn_blocking({
                    let ns = net.ns.clone();
                    let (peer, host) = (net.peer_v4, net.host_v4);
                    move || {
                        let out = std::process::Command::new("ip")
                            .args(["netns", "exec", &ns, "bash", "-c"])
                            .arg(format!(
                                "for i in $(seq 1 12); do echo m$i > /dev/udp/{host}/{PORT}; done"
                            ))
                            .output()
                            .unwrap();
                        assert!(
                            out.status.success(),
                            "{}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        let _ = peer;
                    }
                })
                .await
                .unwrap();
                let mut total = 0;
                for h in handles {
                    total += h.await.unwrap();
                }
                total
            })
            .await
    });
    assert_eq!(received, 12);
}

#[test]
fn busy_poll_loop_receives_and_stops() {
    let net = TestNet::new();
    let mut port = XdpPort::open(
        PortConfig::new(&net.host)
            .own(Proto::Udp, PORT)
            .queues([0, 1])
            .busy_poll(20, 64),
    )
    .expect("open with busy-poll options");
    let mut sockets = port.take_sockets();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            send_from_ns(&net, 24);
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = 0;
        let mut idx = 0;
        // Alternate queues: one round of the loop per socket at a time.
        while seen < 24 && Instant::now() < deadline {
            let s = &mut sockets[idx % 2];
            idx += 1;
            let got =
                readiness::busy_poll(s, 32, |_, frames| ControlFlow::Break(frames.len())).unwrap();
            seen += got;
        }
        let kstats: Vec<_> = sockets.iter().map(|s| s.kernel_stats()).collect();
        assert_eq!(
            seen,
            24,
            "program {:?}, sockets {kstats:?}, {:?}",
            port.program_stats(),
            port.counters()
        );
    });
    // Frames the handler left in the batch were recycled.
    assert_eq!(port.counters().held, 0);
}
