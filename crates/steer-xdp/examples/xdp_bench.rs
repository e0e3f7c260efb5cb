//! AF_XDP rates on a veth pair, in packets per second: rx-drop (receive and
//! recycle) and rx-tx (turn around and send back), against the kernel-only
//! ceiling measured in the same run (the steer program dropping owned
//! traffic in XDP, with the same parsing work). Also tries `xdp-bench drop`
//! from xdp-tools and reports what it says.
//!
//! Needs root. Builds its own namespace and 2-queue veth pair; the generator
//! is an AF_XDP sender on the peer inside the namespace, pinned to the last
//! CPU; the receiver runs on CPU 0.
//!
//! Usage: `cargo run --release -p flowsteer-xdp --example xdp_bench -- [seconds]`
//! (`XDP_BENCH_NO_TOOLS=1` skips xdp-tools' run). Exits with 2 when a phase
//! moved no packet or the frame census does not balance, so a smoke run
//! catches a broken path.

use std::{
    net::Ipv4Addr,
    sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    time::{Duration, Instant},
};

use steer_core::packet::{
    build::FrameBuilder,
    echo::{echo_in_place, EchoMode},
    EthernetFrame,
};
use steer_xdp::{OwnedAction, PortConfig, Proto, XdpPort};

const PORT: u16 = 9000;
const FLOWS: u16 = 64;

fn pin(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

fn mac(path: &str) -> [u8; 6] {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let mut m = [0u8; 6];
    for (d, p) in m.iter_mut().zip(s.trim().split(':')) {
        *d = u8::from_str_radix(p, 16).unwrap_or(0);
    }
    m
}

/// A 60-byte Ethernet/IPv4/UDP frame (18 bytes of payload).
fn template(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
) -> Vec<u8> {
    let mut f = FrameBuilder::udp(src.into(), dst.into(), sport, PORT)
        .payload(&[0; 18])
        .build();
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    eth.set_dst_addr(dst_mac);
    eth.set_src_addr(src_mac);
    f
}

fn mpps(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64() / 1e6
}

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let phase = Duration::from_secs(secs);
    // Ctrl-C ends the phases early; the port and the namespace are still removed.
    let interrupted = steer_xdp::shutdown::install().expect("signal handlers");
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let net = steer_testbed::TestNet::new();
    let host_mac = mac(&format!("/sys/class/net/{}/address", net.host));
    let mut rx =
        XdpPort::open(PortConfig::new(&net.host).own(Proto::Udp, PORT)).expect("receiver port");
    println!(
        "receiver: {} {:?}, generator: AF_XDP on the peer, {} CPUs",
        net.host,
        rx.modes(),
        ncpu
    );

    let stop = AtomicBool::new(false);
    let sent = AtomicU64::new(0);
    let healthy = std::thread::scope(|s| {
        s.spawn(|| {
            net.in_ns(|| {
                pin(ncpu - 1);
                let peer_mac = mac(&format!("/sys/class/net/{}/address", net.peer));
                let mut gen =
                    XdpPort::open(PortConfig::new(&net.peer).queues([0]).frames(4096, 2048))
                        .expect("generator port");
                let mut socks = gen.take_sockets();
                let sock = &mut socks[0];
                // Write every frame once; they keep their contents when reused.
                let mut frames = Vec::new();
                sock.alloc(usize::MAX, &mut frames);
                for (i, f) in frames.iter_mut().enumerate() {
                    let sport = 40000 + (i as u16 % FLOWS);
                    sock.write(
                        f,
                        &template(host_mac, peer_mac, net.peer_v4, net.host_v4, sport),
                    );
                }
                sock.recycle(frames.drain(..));
                while !stop.load(Relaxed) && !interrupted.load(Relaxed) {
                    sock.alloc(256, &mut frames);
                    for f in frames.iter_mut() {
                        sock.set_len(f, 60);
                    }
                    let n = sock.send(&mut frames).unwrap_or(0);
                    sock.recycle(frames.drain(..));
                    sock.complete();
                    sent.fetch_add(n as u64, Relaxed);
                }
                drop(socks);
            })
        });
        pin(0);
        std::thread::sleep(Duration::from_millis(300));
        let mut sockets = rx.take_sockets();

        // 1. Kernel-only ceiling: owned traffic dropped in XDP.
        rx.program()
            .set_owned_action(OwnedAction::Drop)
            .expect("drop mode");
        let (s0, d0, t0) = (
            sent.load(Relaxed),
            rx.program_stats().unwrap().dropped,
            Instant::now(),
        );
        let t = Instant::now();
        while t.elapsed() < phase && !interrupted.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let (s1, d1, el) = (
            sent.load(Relaxed),
            rx.program_stats().unwrap().dropped,
            t0.elapsed(),
        );
        let ceiling = mpps(d1 - d0, el);
        if std::env::var_os("XDP_BENCH_DEBUG").is_some() {
            eprintln!("program stats: {:?}", rx.program_stats());
            let out = std::process::Command::new("ip")
                .args(["-s", "link", "show", &net.host])
                .output()
                .unwrap();
            eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        }
        println!(
            "xdp/kernel_drop_ceiling  {ceiling:7.3} Mpps  (offered {:.3} Mpps)",
            mpps(s1 - s0, el)
        );
        rx.program()
            .set_owned_action(OwnedAction::Redirect)
            .expect("redirect mode");

        // 2. AF_XDP rx-drop: receive and recycle.
        let mut frames = Vec::with_capacity(64);
        let (s0, t0) = (sent.load(Relaxed), Instant::now());
        let mut got = 0u64;
        while t0.elapsed() < phase && !interrupted.load(Relaxed) {
            for sk in sockets.iter_mut() {
                got += sk.recv(&mut frames, 64).unwrap_or(0) as u64;
                sk.recycle(frames.drain(..));
            }
        }
        let el = t0.elapsed();
        let rxd = mpps(got, el);
        println!(
            "xdp/afxdp_rx_drop        {rxd:7.3} Mpps  (offered {:.3} Mpps)  ratio to ceiling {:.2}",
            mpps(sent.load(Relaxed) - s0, el),
            rxd / ceiling
        );

        // 3. AF_XDP rx-tx: swap MAC/IP/ports, fresh checksums, send back.
        let tx0 = rx.counters().tx_frames;
        let (s0, t0) = (sent.load(Relaxed), Instant::now());
        while t0.elapsed() < phase && !interrupted.load(Relaxed) {
            for sk in sockets.iter_mut() {
                sk.recv(&mut frames, 64).unwrap_or(0);
                for f in frames.iter_mut() {
                    let _ = sk.with_data_mut(f, |d| echo_in_place(d, EchoMode::Plain));
                }
                let _ = sk.send(&mut frames);
                sk.recycle(frames.drain(..));
                sk.complete();
            }
        }
        let el = t0.elapsed();
        let rxtx = mpps(rx.counters().tx_frames - tx0, el);
        println!(
            "xdp/afxdp_rx_tx          {rxtx:7.3} Mpps  (offered {:.3} Mpps)  ratio to ceiling {:.2}",
            mpps(sent.load(Relaxed) - s0, el),
            rxtx / ceiling
        );
        stop.store(true, Relaxed);
        let census = rx.census(&mut sockets);
        println!(
            "frame census after the run: {:?}",
            census.check().map(|_| "balanced")
        );
        let interrupted = interrupted.load(Relaxed);
        interrupted || (ceiling > 0.0 && rxd > 0.0 && rxtx > 0.0 && census.check().is_ok())
    });
    drop(rx);
    if !healthy {
        eprintln!("xdp_bench: a phase moved no packet, or the frames do not balance");
        std::process::exit(2);
    }
    if std::env::var_os("XDP_BENCH_NO_TOOLS").is_some() {
        return;
    }

    // xdp-tools' own kernel-only drop benchmark, for reference.
    let out = std::process::Command::new("timeout")
        .args(["3", "xdp-bench", "drop", "-i", "1", &net.host])
        .output();
    match out {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout).to_string()
                + &String::from_utf8_lossy(&o.stderr);
            let last: Vec<&str> = text.lines().rev().take(3).collect();
            println!(
                "xdp-bench drop (xdp-tools): {}",
                last.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        Err(e) => println!("xdp-bench drop not runnable: {e}"),
    }
}
