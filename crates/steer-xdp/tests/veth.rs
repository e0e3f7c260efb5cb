//! AF_XDP on a 2-queue veth pair in a test namespace: delivery to the queue
//! sockets, echo back into the namespace, pass-through of non-owned traffic,
//! frame accounting after an overflowing burst, detaching on drop, typed errors.

use std::{
    collections::HashMap,
    net::{SocketAddr, UdpSocket},
    time::{Duration, Instant},
};

use steer_core::{
    flow::flow_key,
    packet::{
        build::FrameBuilder,
        echo::{echo_in_place, EchoMode},
        verify_udp_frame, EthernetFrame, UdpPacket,
    },
};
use steer_testbed::{parse_mac, TestNet};
use steer_xdp::{
    attached_programs, BindMode, FlowMapKey, Frame, PortConfig, ProgramOwner, Proto, QueueSocket,
    XdpAttach, XdpError, XdpMode, XdpPort,
};

const PORT: u16 = 9000;

/// Receives from all sockets until `n` frames arrived or `timeout` passed.
fn recv_n(sockets: &mut [QueueSocket], n: usize, timeout: Duration) -> Vec<(usize, Frame)> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut batch = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        for (i, s) in sockets.iter_mut().enumerate() {
            s.recv(&mut batch, 64).unwrap();
            got.extend(batch.drain(..).map(|f| (i, f)));
        }
        if got.len() < n {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    got
}

fn open(net: &TestNet) -> XdpPort {
    XdpPort::open(PortConfig::new(&net.host).own(Proto::Udp, PORT))
        .expect("open XdpPort on the test veth")
}

#[test]
fn traffic_reaches_queue_sockets_and_echo_returns() {
    let net = TestNet::new();
    let mut port = open(&net);
    let modes = port.modes();
    assert_eq!(
        modes.bind,
        BindMode::Copy,
        "veth offers copy mode only: {modes:?}"
    );
    assert_eq!(modes.xdp, XdpMode::Native, "{modes:?}");
    let mut sockets = port.take_sockets();
    assert_eq!(sockets.len(), 2);

    const FLOWS: usize = 32;
    let dsts: Vec<SocketAddr> = vec![
        SocketAddr::new(net.host_v4.into(), PORT),
        SocketAddr::new(net.host_v6.into(), PORT),
    ];
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            net.in_ns(|| {
                let mut socks = Vec::new();
                for dst in &dsts {
                    for i in 0..FLOWS {
                        let bind: SocketAddr = if dst.is_ipv4() {
                            SocketAddr::new(net.peer_v4.into(), 0)
                        } else {
                            SocketAddr::new(net.peer_v6.into(), 0)
                        };
                        let u = UdpSocket::bind(bind).unwrap();
                        u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        u.send_to(format!("flow {i}").as_bytes(), dst).unwrap();
                        socks.push((u, format!("flow {i}")));
                    }
                }
                // Every sender gets its own payload back, with a valid checksum
                // (the kernel drops it otherwise).
                let mut ok = 0;
                for (u, want) in &socks {
                    let mut buf = [0u8; 64];
                    if let Ok((len, from)) = u.recv_from(&mut buf) {
                        assert_eq!(&buf[..len], want.as_bytes());
                        assert_eq!(from.port(), PORT);
                        ok += 1;
                    }
                }
                ok
            })
        });
        let want = FLOWS * dsts.len();
        // Neighbours are static here; the ping test covers ARP/ND.
        let got = recv_n(&mut sockets, want, Duration::from_secs(10));
        assert_eq!(got.len(), want, "frames received on the queue sockets");
        let mut per_queue = HashMap::new();
        let mut by_queue: Vec<Vec<Frame>> = vec![Vec::new(), Vec::new()];
        // A handler thread without a socket rewrites the frames through a UmemView.
        let view = sockets[0].umem();
        let got = std::thread::spawn(move || {
            got.into_iter()
                .map(|(i, mut f)| {
                    let len = view
                        .with_data_mut(&mut f, |d| echo_in_place(d, EchoMode::Plain))
                        .expect("a frame of this port")
                        .expect("a UDP datagram");
                    assert_eq!(view.set_len(&mut f, len), Some(len));
                    (i, f)
                })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        for (i, f) in got {
            let key = flow_key(sockets[i].data(&f)).unwrap().expect("a UDP frame");
            assert_eq!(key.src_port(), PORT, "turned around");
            *per_queue.entry(sockets[i].queue()).or_insert(0) += 1;
            assert!(verify_udp_frame(sockets[i].data(&f)));
            by_queue[i].push(f);
        }
        assert_eq!(
            per_queue.len(),
            2,
            "flows spread over both rx queues: {per_queue:?}"
        );
        for (s, frames) in sockets.iter_mut().zip(by_queue.iter_mut()) {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !frames.is_empty() && Instant::now() < deadline {
                s.send(frames).unwrap();
            }
            assert!(frames.is_empty());
        }
        // Copy mode sends at most 32 frames per kick: keep completing.
        let deadline = Instant::now() + Duration::from_secs(3);
        while port.counters().in_tx > 0 && Instant::now() < deadline {
            sockets.iter_mut().for_each(|s| {
                s.complete();
            });
        }
        let echoed = sender.join().unwrap();
        assert_eq!(echoed, want, "replies received in the namespace");
    });
    // Completions come back to the free pools; the census balances.
    let deadline = Instant::now() + Duration::from_secs(2);
    while port.counters().in_tx > 0 && Instant::now() < deadline {
        sockets.iter_mut().for_each(|s| {
            s.complete();
        });
    }
    let census = port.census(&mut sockets);
    census.check().unwrap();
    assert_eq!(census.held, 0);
    assert_eq!(port.counters().tx_frames, (FLOWS * 2) as u64);
}

#[test]
fn ping_arp_and_other_ports_keep_working() {
    let net = TestNet::new();
    let mut port = open(&net);
    let mut sockets = port.take_sockets();
    // ARP + ICMP over IPv4, ND + ICMPv6 over IPv6: resolved dynamically.
    net.static_neighbours(false);
    for addr in [net.host_v4.to_string(), net.host_v6.to_string()] {
        // A deadline, not a per-reply timeout: under load the first ARP/ND
        // resolution can take longer than one interval.
        let out = net.ns_cmd(&["ping", "-c", "2", "-i", "0.2", "-w", "10", &addr]);
        assert!(
            out.status.success(),
            "ping {addr} while steer runs: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // UDP to a port steer does not own reaches a kernel socket.
    let kernel = UdpSocket::bind(SocketAddr::new(net.host_v4.into(), PORT + 1)).unwrap();
    kernel
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let owned_sock = UdpSocket::bind(SocketAddr::new(net.host_v4.into(), PORT)).unwrap();
    owned_sock.set_nonblocking(true).unwrap();
    net.send_udp_v4(&[(b"kernel", PORT + 1), (b"steer", PORT)]);
    let mut buf = [0u8; 32];
    let (n, _) = kernel
        .recv_from(&mut buf)
        .expect("non-owned UDP reaches the kernel socket");
    assert_eq!(&buf[..n], b"kernel");
    let got = recv_n(&mut sockets, 1, Duration::from_secs(3));
    assert_eq!(got.len(), 1, "owned UDP reaches AF_XDP");
    assert!(
        owned_sock.recv_from(&mut buf).is_err(),
        "owned UDP must not reach the kernel socket"
    );
    for (i, f) in got {
        sockets[i].recycle([f]);
    }

    // Ownership changes at run time.
    port.set_owned(Proto::Udp, PORT + 1, true).unwrap();
    net.send_udp_v4(&[(b"now steer", PORT + 1)]);
    let got = recv_n(&mut sockets, 1, Duration::from_secs(3));
    assert_eq!(got.len(), 1, "newly owned port redirected");
    let stats = port.program_stats().unwrap();
    assert!(stats.redirected >= 2 && stats.passed >= 4, "{stats:?}");
}

#[test]
fn accounting_holds_after_overflowing_burst() {
    let net = TestNet::new();
    let mut port = XdpPort::open(
        PortConfig::new(&net.host)
            .own(Proto::Udp, PORT)
            .frames(256, 64),
    )
    .expect("open with small rings");
    let mut sockets = port.take_sockets();
    let total = port.total_frames();
    assert_eq!(total, 256);
    port.census(&mut sockets).check().unwrap();
    // 2000 packets into rings of 64 nobody reads: rx ring full, fill ring empty.
    net.in_ns(|| {
        let u = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap();
        for i in 0..2000u32 {
            let _ = u.send_to(&i.to_be_bytes(), SocketAddr::new(net.host_v4.into(), PORT));
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let census = port.census(&mut sockets);
    census.check().unwrap();
    assert!(census.rx_ring > 0, "{census:?}");
    let drops: u64 = sockets
        .iter()
        .map(|s| {
            let k = s.kernel_stats().unwrap();
            k.rx_ring_full + k.rx_fill_ring_empty + k.rx_dropped
        })
        .sum();
    assert!(drops > 0, "the burst must overflow the rings");
    // Drain, hold some, send some, recycle the rest.
    let mut held = Vec::new();
    let mut batch = Vec::new();
    for s in sockets.iter_mut() {
        while s.recv(&mut batch, 64).unwrap() > 0 {}
        held.append(&mut batch);
    }
    assert!(!held.is_empty());
    let mut to_send: Vec<Frame> = held.drain(..held.len().min(10)).collect();
    for f in &mut to_send {
        sockets[0]
            .with_data_mut(f, |d| echo_in_place(d, EchoMode::Plain))
            .unwrap()
            .unwrap();
    }
    let n_send = to_send.len();
    let keep: Vec<Frame> = held.drain(..held.len().min(5)).collect();
    sockets[1].recycle(held.drain(..));
    sockets[0].send(&mut to_send).unwrap();
    assert!(to_send.is_empty());
    let census = port.census(&mut sockets);
    census.check().unwrap();
    assert_eq!(census.held, keep.len() as i64, "{census:?}");
    // Quiet again: completions reaped, kept frames returned.
    let deadline = Instant::now() + Duration::from_secs(2);
    while port.counters().tx_frames < n_send as u64 && Instant::now() < deadline {
        sockets[0].send(&mut Vec::new()).unwrap();
    }
    sockets[0].recycle(keep);
    let census = port.census(&mut sockets);
    census.check().unwrap();
    assert_eq!(
        (census.held, census.kernel_tx, census.completion),
        (0, 0, 0),
        "{census:?}"
    );
    assert_eq!(census.total, i64::from(total));
}

#[test]
fn program_detached_on_drop_and_stale_program_detected() {
    let net = TestNet::new();
    let ifindex = steer_xdp::ifindex(&net.host).unwrap();
    let port = open(&net);
    assert_eq!(port.attach_kind(), XdpAttach::Link);
    let progs = attached_programs(ifindex);
    let steer = progs
        .iter()
        .find(|p| p.is_steer())
        .unwrap_or_else(|| panic!("{progs:?}"));
    // The owner record names this process, alive.
    assert_eq!(steer.owner, ProgramOwner::current(), "{progs:?}");
    assert!(!steer.is_stale());
    assert!(net.link_show().contains("xdp"), "{}", net.link_show());
    drop(port);
    assert!(attached_programs(ifindex).is_empty());
    assert!(!net.link_show().contains("prog/xdp"), "{}", net.link_show());

    // A crashed run attached through netlink leaves its program attached
    // (simulated by leaking the port). Its sockets are closed by the
    // kernel, its program stays; its owner (this process) still runs, so
    // it is not replaced without replace_stale.
    let mut crashed =
        XdpPort::open(PortConfig::new(&net.host).attach(XdpAttach::Netlink)).expect("netlink");
    assert_eq!(crashed.attach_kind(), XdpAttach::Netlink);
    drop(crashed.take_sockets());
    std::mem::forget(crashed);
    std::thread::sleep(Duration::from_millis(50));
    let err = XdpPort::open(PortConfig::new(&net.host)).unwrap_err();
    assert!(matches!(err, XdpError::StaleProgram { .. }), "{err}");
    assert!(err.to_string().contains("xdp off"), "{err}");
    let port = XdpPort::open(PortConfig::new(&net.host).queues([1]).replace_stale(true))
        .expect("replacing the stale program");
    assert!(port.replaced_program().is_some());
    assert_eq!(attached_programs(ifindex).len(), 1);
    drop(port);
    assert!(attached_programs(ifindex).is_empty());
}

#[test]
fn typed_errors() {
    let net = TestNet::new();
    let err = XdpPort::open(PortConfig::new("sxnosuchif0")).unwrap_err();
    assert!(matches!(err, XdpError::UnknownInterface { .. }), "{err}");
    let err = XdpPort::open(PortConfig::new(&net.host).queues([2])).unwrap_err();
    assert!(
        matches!(
            err,
            XdpError::QueueOutOfRange {
                queue: 2,
                count: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("numrxqueues"));
    // Zero-copy requested on veth: the kernel says EOPNOTSUPP.
    let err = XdpPort::open(PortConfig::new(&net.host).bind_mode(BindMode::ZeroCopy)).unwrap_err();
    assert!(matches!(err, XdpError::BindUnsupported { .. }), "{err}");
    // The namespace's loopback has no native XDP.
    let err =
        net.in_ns(|| XdpPort::open(PortConfig::new("lo").xdp_mode(XdpMode::Native)).unwrap_err());
    assert!(matches!(err, XdpError::ModeUnsupported { .. }), "{err}");
    // Generic mode on request.
    let port = XdpPort::open(PortConfig::new(&net.host).xdp_mode(XdpMode::Generic)).unwrap();
    assert_eq!(port.modes().xdp, XdpMode::Generic);
    assert!(!port.sockets().is_empty());
    drop(port);
}

/// A `/proc/meminfo` field's value.
fn meminfo(field: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/meminfo"))
}

/// The machine's huge page pool (`vm.nr_hugepages`), set for one test and
/// restored on drop; an exclusive lock on a file under /tmp keeps tests of
/// other processes from changing it meanwhile.
struct HugePagePool {
    original: u64,
    _lock: std::fs::File,
}

impl HugePagePool {
    const SYSCTL: &'static str = "/proc/sys/vm/nr_hugepages";

    fn take() -> Self {
        use std::os::fd::AsRawFd;
        let lock = std::fs::File::create("/tmp/steer-test-hugepages.lock").unwrap();
        // SAFETY: flock on a descriptor we own; released when it closes.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        let original = std::fs::read_to_string(Self::SYSCTL)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        Self {
            original,
            _lock: lock,
        }
    }

    /// Sets the pool so that `free` pages are free (pages in use stay).
    fn set_free(&self, free: u64) {
        let in_use = meminfo("HugePages_Total") - meminfo("HugePages_Free");
        std::fs::write(Self::SYSCTL, (in_use + free).to_string()).unwrap();
        assert_eq!(meminfo("HugePages_Free"), free, "huge pages free");
    }
}

impl Drop for HugePagePool {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::SYSCTL, self.original.to_string());
    }
}

#[test]
fn the_umem_takes_huge_pages_when_some_are_free_and_falls_back_otherwise() {
    let net = TestNet::new();
    // 256 frames of 2 KiB: half a 2 MiB huge page.
    let config = || PortConfig::new(&net.host).huge_pages(true).frames(256, 64);
    let pool = HugePagePool::take();
    pool.set_free(0);
    let port = XdpPort::open(config()).expect("falls back to normal pages");
    assert!(!port.modes().huge_pages, "{:?}", port.modes());
    drop(port);
    pool.set_free(1);
    let port = XdpPort::open(config()).unwrap();
    assert!(port.modes().huge_pages, "{:?}", port.modes());
    assert_eq!(meminfo("HugePages_Free"), 0, "the UMEM holds the huge page");
    drop(port);
}

#[test]
fn ntuple_backend_is_refused_at_start_on_veth() {
    let net = TestNet::new();
    let err =
        steer_xdp::ntuple::NtupleSteering::new(&net.host, |c| Some(c as u32), 64).unwrap_err();
    assert!(matches!(err, XdpError::NotSupported { .. }), "{err}");
    assert!(err.to_string().contains("no ntuple filters"), "{err}");
}

#[test]
fn flow_map_steers_inside_xdp() {
    let net = TestNet::new();
    let mut port = open(&net);
    let mut sockets = port.take_sockets();
    let kernel = UdpSocket::bind(SocketAddr::new(net.host_v4.into(), PORT)).unwrap();
    kernel
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let src = SocketAddr::new(net.peer_v4.into(), 40123);
    let dst = SocketAddr::new(net.host_v4.into(), PORT);
    // Steer this one flow to socket-map slot 200, where no socket sits: the
    // program falls back to XDP_PASS, so the kernel socket gets it.
    let flow = FlowMapKey::new(Proto::Udp, src, dst);
    port.program().steer_flow(&flow, 200).unwrap();
    // One sender socket for both sends: a rebind of the same port can race
    // with fork+exec in parallel tests holding the old fd for a moment.
    let sender = net.in_ns(|| UdpSocket::bind(src).unwrap());
    sender.send_to(b"steered", dst).unwrap();
    let mut buf = [0u8; 16];
    let (n, _) = kernel.recv_from(&mut buf).expect("flow map entry honoured");
    assert_eq!(&buf[..n], b"steered");
    let stats = port.program_stats().unwrap();
    assert_eq!(
        (stats.flow_hits, stats.redirect_failed),
        (1, 1),
        "{stats:?}"
    );
    // Removing the entry puts the flow back on its queue's socket.
    port.program().unsteer_flow(&flow).unwrap();
    sender.send_to(b"default", dst).unwrap();
    assert_eq!(recv_n(&mut sockets, 1, Duration::from_secs(3)).len(), 1);
    assert_eq!(port.program().steering_calls(), 2);
}

#[test]
fn rx_hash_metadata_when_device_bound() {
    let net = TestNet::new();
    // veth gives XDP programs the receive hash (the rx-hash kfunc, Linux
    // >= 6.3), as the kernel says; the program is then loaded bound to the
    // device in native mode and passes a 5-tuple hash for a UDP datagram.
    let info = steer_xdp::nic::xdp_device_info(&net.host).unwrap();
    assert!(info.rx_hash(), "{info:?}");
    let mut port = open(&net);
    assert!(port.program().dev_bound(), "device-bound load on veth");
    let mut sockets = port.take_sockets();
    net.send_udp_v4(&[(b"hash me", PORT)]);
    let got = recv_n(&mut sockets, 1, Duration::from_secs(3));
    assert_eq!(got.len(), 1);
    let (i, f) = &got[0];
    let meta = sockets[*i]
        .meta(f)
        .expect("steer metadata in front of the packet");
    assert!(meta.rx_hash.is_some(), "{meta:?}");
    assert_ne!(meta.rx_hash_type & steer_xdp::RxMeta::RSS_L4, 0, "{meta:?}");
    assert_eq!(meta.five_tuple_hash(), meta.rx_hash);
    assert_eq!(port.program_stats().unwrap().hash_ok, 1);
    let (i, f) = got.into_iter().next().unwrap();
    assert!(sockets[i].recycle([f]).is_empty());
    drop(sockets);
    drop(port);

    // Generic mode cannot take a device-bound program: the plain variant is
    // loaded and the metadata says "no hash".
    let mut port = XdpPort::open(
        PortConfig::new(&net.host)
            .own(Proto::Udp, PORT)
            .xdp_mode(XdpMode::Generic),
    )
    .expect("generic mode");
    assert!(!port.program().dev_bound());
    let mut sockets = port.take_sockets();
    net.send_udp_v4(&[(b"no hash", PORT)]);
    let got = recv_n(&mut sockets, 1, Duration::from_secs(3));
    assert_eq!(got.len(), 1);
    let (i, f) = &got[0];
    let meta = sockets[*i]
        .meta(f)
        .expect("metadata written in generic mode too");
    assert_eq!(meta.rx_hash, None);
    assert_eq!(port.program_stats().unwrap().hash_ok, 0);
}

/// Runs `f` on a thread of its own mount namespace (private mounts) whose
/// `/sys/fs/bpf` is a fresh bpffs (`bpffs`) or an empty tmpfs (no bpffs at
/// all), whatever the host has mounted there. libxdp looks for its
/// dispatcher's state in bpffs; processes started from the thread share
/// its mounts.
fn with_private_bpffs<R: Send>(bpffs: bool, f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            let c = |p: &str| std::ffi::CString::new(p).unwrap();
            let (none, root, dir) = (c("none"), c("/"), c("/sys/fs/bpf"));
            let fs = c(if bpffs { "bpf" } else { "tmpfs" });
            // SAFETY: unshare/mount with valid NUL-terminated strings; they
            // change only this thread's mount namespace.
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare");
                assert_eq!(
                    libc::mount(
                        none.as_ptr(),
                        root.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null()
                    ),
                    0,
                    "private mounts"
                );
                assert_eq!(
                    libc::mount(fs.as_ptr(), dir.as_ptr(), fs.as_ptr(), 0, std::ptr::null()),
                    0,
                    "mount at /sys/fs/bpf: {}",
                    std::io::Error::last_os_error()
                );
            }
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Loads xdp-filter (xdp-tools) on `interface` in native mode, through
/// libxdp's dispatcher when the caller's mounts have a bpffs.
fn load_xdp_filter(interface: &str) {
    let out = std::process::Command::new("xdp-filter")
        .args(["load", "-m", "native", interface])
        .output()
        .expect("xdp-filter (xdp-tools) must be installed");
    assert!(
        out.status.success(),
        "xdp-filter load: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// Coexistence through libxdp's dispatcher (both programs attached) is not
// tested: it needs a kernel that lets libxdp attach its freplace dispatcher,
// and the machines CI runs on refuse it ("Compatibility check for
// dispatcher program failed: Operation not permitted", even with a bpffs).
#[test]
fn another_xdp_program_is_reported_when_no_dispatcher_can_be_shared() {
    let net = TestNet::new();
    let ifindex = steer_xdp::ifindex(&net.host).unwrap();
    // xdp-filter keeps its dispatcher state in a bpffs of its own; steer's
    // open sees no bpffs, so libxdp cannot add a program beside it.
    with_private_bpffs(true, || load_xdp_filter(&net.host));
    let other = attached_programs(ifindex);
    assert!(
        other.iter().any(|p| p.name.starts_with("xdpfilt")),
        "{other:?}"
    );
    let err = with_private_bpffs(false, || {
        XdpPort::open(PortConfig::new(&net.host)).unwrap_err()
    });
    match &err {
        XdpError::OtherProgram { name, .. } => assert!(name.starts_with("xdpfilt"), "{err}"),
        _ => panic!("expected OtherProgram, got {err}"),
    }
    assert!(err.to_string().contains("xdp-loader unload"), "{err}");
    assert_eq!(
        attached_programs(ifindex),
        other,
        "nothing of steer's attached"
    );
    // xdp-filter's pinned state went with its mount namespace: detach the
    // program through the link itself.
    let _ = std::process::Command::new("ip")
        .args(["link", "set", "dev", &net.host, "xdp", "off"])
        .output();
}

#[test]
fn missing_privileges_are_reported() {
    let net = TestNet::new();
    let host = net.host.clone();
    // Capabilities are per thread: drop the effective set on a helper thread.
    let err = std::thread::spawn(move || {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut hdr = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let mut data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        // SAFETY: capget/capset with a v3 header and two data structs, as the ABI requires.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_capget, &mut hdr as *mut Header, data.as_mut_ptr()),
                0
            );
            for d in data.iter_mut() {
                d.effective = 0;
            }
            assert_eq!(
                libc::syscall(libc::SYS_capset, &mut hdr as *mut Header, data.as_ptr()),
                0
            );
        }
        XdpPort::open(PortConfig::new(&host)).unwrap_err()
    })
    .join()
    .unwrap();
    assert!(matches!(err, XdpError::Privileges { .. }), "{err}");
    assert!(
        err.to_string().contains("CAP_NET_ADMIN") && err.to_string().contains("setcap"),
        "{err}"
    );
    // The program was never attached.
    assert!(attached_programs(steer_xdp::ifindex(&net.host).unwrap()).is_empty());
}

#[test]
fn frames_of_another_port_are_handed_back() {
    let net = TestNet::new();
    let mut a = open(&net);
    let mut sa = a.take_sockets();
    let mut frames = Vec::new();
    assert_eq!(sa[0].alloc(2, &mut frames), 2);
    // A frame made for transmission starts at its frame's first byte: no
    // metadata room, and none is read.
    assert!(sa[0].meta(&frames[0]).is_none());
    // A second port, on the peer inside the namespace (its queue count comes
    // from ethtool there, as sysfs shows the root namespace).
    let peer = net.peer.clone();
    let back = net.in_ns(move || {
        let mut b = XdpPort::open(PortConfig::new(&peer)).expect("port on the namespace side");
        assert_eq!(
            b.sockets().len(),
            2,
            "both peer queues found inside the namespace"
        );
        let mut sb = b.take_sockets();
        let mut back = sb[0].recycle(frames);
        assert!(sb[0].data(&back[0]).is_empty());
        assert_eq!(
            sb[0].send(&mut back).unwrap(),
            0,
            "foreign frames are not sent"
        );
        back
    });
    assert_eq!(back.len(), 2);
    assert!(sa[0].recycle(back).is_empty());
    let census = a.census(&mut sa);
    census.check().unwrap();
    assert_eq!(census.held, 0);
}

/// A UDP socket of the peer (inside the namespace) on `port`, reads
/// timing out after 3 s.
fn peer_listener(net: &TestNet, port: u16) -> UdpSocket {
    let s = net.in_ns(|| UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), port)).unwrap());
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

/// A whole frame from the host end's [`PORT`] to the peer's `dport`
/// carrying `payload`: Ethernet with both ends' MACs (`macs`, as
/// [`TestNet::macs`] gives them), IPv4, UDP with checksum 0 (allowed over
/// IPv4).
fn host_to_peer_frame(
    net: &TestNet,
    (host_mac, peer_mac): &(String, String),
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut pkt = FrameBuilder::udp(net.host_v4.into(), net.peer_v4.into(), PORT, dport)
        .payload(payload)
        .build();
    let mut eth = EthernetFrame::new_unchecked(&mut pkt[..]);
    eth.set_dst_addr(parse_mac(peer_mac).unwrap());
    eth.set_src_addr(parse_mac(host_mac).unwrap());
    UdpPacket::new_checked(&mut pkt[14 + 20..])
        .unwrap()
        .set_checksum(0);
    pkt
}

#[test]
fn frames_built_from_scratch_reach_the_namespace() {
    let net = TestNet::new();
    let mut port = open(&net);
    let mut sockets = port.take_sockets();
    let listener = peer_listener(&net, 7000);
    // Ethernet + IPv4 + UDP with checksum 0 (allowed over IPv4).
    let pkt = host_to_peer_frame(&net, &net.macs(), 7000, b"hello");
    assert_eq!(pkt.len(), 14 + 20 + 8 + 5);
    assert!(verify_udp_frame(&pkt));
    let mut frames = Vec::new();
    assert_eq!(sockets[1].alloc(3, &mut frames), 3);
    for f in frames.iter_mut() {
        assert_eq!(sockets[1].write(f, &pkt), Some(pkt.len()));
        assert_eq!(sockets[1].data(f), &pkt[..]);
    }
    assert_eq!(sockets[1].send(&mut frames).unwrap(), 3);
    let mut buf = [0u8; 16];
    for _ in 0..3 {
        let (n, from) = listener
            .recv_from(&mut buf)
            .expect("frame sent through AF_XDP tx");
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(from, SocketAddr::new(net.host_v4.into(), PORT));
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while port.counters().tx_frames < 3 && Instant::now() < deadline {
        sockets[1].complete();
    }
    assert_eq!(port.counters().tx_frames, 3);
    port.census(&mut sockets).check().unwrap();
}

#[test]
fn one_send_hands_every_frame_to_the_device_in_order_before_it_returns() {
    // In copy mode the kernel sends at most 32 frames per kick: a send of
    // 200 must keep kicking, or 168 would wait on the ring for a later kick.
    let net = TestNet::new();
    let mut port = open(&net);
    let mut sockets = port.take_sockets();
    let listener = peer_listener(&net, 7001);
    let macs = net.macs();
    const N: u32 = 200;
    let mut frames = Vec::new();
    assert_eq!(sockets[0].alloc(N as usize, &mut frames), N as usize);
    for (seq, f) in (0..N).zip(frames.iter_mut()) {
        let pkt = host_to_peer_frame(&net, &macs, 7001, &seq.to_be_bytes());
        assert_eq!(sockets[0].write(f, &pkt), Some(pkt.len()));
    }
    assert_eq!(sockets[0].send(&mut frames).unwrap(), N as usize);
    let census = port.census(&mut sockets);
    assert_eq!(census.tx_ring, 0, "frames left on the tx ring: {census:?}");
    let mut buf = [0u8; 16];
    for seq in 0..N {
        let (n, _) = listener
            .recv_from(&mut buf)
            .expect("every frame of the send reached the namespace");
        assert_eq!(&buf[..n], &seq.to_be_bytes(), "in order");
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while port.counters().tx_frames < u64::from(N) && Instant::now() < deadline {
        sockets[0].complete();
    }
    port.census(&mut sockets).check().unwrap();
}

#[test]
fn the_closed_gate_drops_first_datagrams_of_unadmitted_flows_and_lets_retries_through() {
    let net = TestNet::new();
    let mut port = open(&net);
    let mut sockets = port.take_sockets();
    let gate = port.program().admission_gate().unwrap();
    let dst = SocketAddr::new(net.host_v4.into(), PORT);
    let sender = |sport: u16| {
        let src = SocketAddr::new(net.peer_v4.into(), sport);
        (net.in_ns(|| UdpSocket::bind(src).unwrap()), src)
    };
    let (admitted, admitted_src) = sender(40301);
    let (newcomer, _) = sender(40302);
    gate.admit(&FlowMapKey::new(Proto::Udp, admitted_src, dst));
    gate.set_closed(true).unwrap();
    assert!(gate.is_closed());

    // An admitted flow passes: the engine's slot and the program's agree.
    admitted.send_to(b"open flow", dst).unwrap();
    assert_eq!(recv_n(&mut sockets, 1, Duration::from_secs(3)).len(), 1);
    // A new flow's first datagram is dropped in XDP...
    newcomer.send_to(b"first try", dst).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while port.program_stats().unwrap().gate_dropped == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(recv_n(&mut sockets, 1, Duration::from_millis(200)).is_empty());
    // ...and its retry reaches a socket.
    newcomer.send_to(b"retry", dst).unwrap();
    let got = recv_n(&mut sockets, 1, Duration::from_secs(3));
    assert_eq!(got.len(), 1);
    let stats = port.program_stats().unwrap();
    assert_eq!(
        (stats.gate_dropped, stats.gate_retries),
        (1, 1),
        "{stats:?}"
    );
    let counts = gate.counts();
    assert_eq!((counts.dropped, counts.retries), (1, 1), "{counts:?}");

    // Opened, the gate lets every flow through.
    gate.set_closed(false).unwrap();
    let (late, _) = sender(40303);
    late.send_to(b"gate open", dst).unwrap();
    assert_eq!(recv_n(&mut sockets, 1, Duration::from_secs(3)).len(), 1);
    let stats = port.program_stats().unwrap();
    assert_eq!(stats.gate_dropped, 1, "{stats:?}");
}

#[test]
fn tx_progress_follows_the_sockets_transmit_sequence() {
    // veth binds in copy mode: a path reports no progress (sent when
    // flushed). Forced on, it reports the socket's sequence: flushed is
    // where the socket stood after the path's send, completed catches up
    // once the completion ring handed the frames back.
    use std::sync::{Arc, Mutex};
    use steer_xdp::frames::{SparePool, TxPath};
    let net = TestNet::new();
    let mut port = open(&net);
    assert_eq!(port.modes().bind, BindMode::Copy);
    let mut sockets = port.take_sockets();
    let listener = peer_listener(&net, 7002);
    let macs = net.macs();
    const N: u32 = 40;
    let mut frames = Vec::new();
    assert_eq!(sockets[0].alloc(N as usize, &mut frames), N as usize);
    for (seq, f) in (0..N).zip(frames.iter_mut()) {
        let pkt = host_to_peer_frame(&net, &macs, 7002, &seq.to_be_bytes());
        assert_eq!(sockets[0].write(f, &pkt), Some(pkt.len()));
    }
    let socket = Arc::new(Mutex::new(sockets.remove(0)));
    let spare = Arc::new(SparePool::new(64, 0));
    let mut copy = TxPath::new(Arc::clone(&socket), Arc::clone(&spare), 64);
    assert_eq!(copy.progress(), None);
    let mut tx = TxPath::new(Arc::clone(&socket), spare, 64).with_zero_copy(true);
    let first = frames.split_off(N as usize / 2);
    for f in frames {
        tx.stage(f);
    }
    assert_eq!(tx.flush().sent, u64::from(N / 2));
    let p = tx.progress().expect("zero-copy reports progress");
    assert_eq!(p.flushed, u64::from(N / 2));
    assert!(p.completed <= p.flushed);
    for f in first {
        copy.stage(f);
    }
    assert_eq!(copy.flush().sent, u64::from(N / 2));
    // The other path's frames come after ours in the sequence: ours are
    // complete once the first N/2 are.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut p = tx.progress().unwrap();
    while !p.settled() && Instant::now() < deadline {
        p = tx.progress().unwrap();
    }
    assert_eq!(
        (p.flushed, p.completed),
        (u64::from(N / 2), u64::from(N / 2))
    );
    let (queued, _) = socket.lock().unwrap().tx_sequence();
    assert_eq!(queued, u64::from(N));
    let mut buf = [0u8; 16];
    for _ in 0..N {
        listener.recv_from(&mut buf).expect("every frame sent");
    }
}
