//! Least privilege in the library: an engine started with
//! `drop_privileges(true)` keeps only what it needs at run time on the
//! thread that started it (and the threads after it). Needs root.

mod support;

use steer_engine::engine::{Engine, PacketContext, Verdict};
use steer_testbed::TestNet;
use steer_xdp::Proto;
use support::PORT;

/// The effective capabilities of the calling thread.
fn cap_eff() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap()
}

/// Least privilege with a steering hook: the thread that started the
/// engine (and every thread after it) keeps CAP_NET_ADMIN for the hook's
/// kernel calls (ntuple rules), and nothing else; without a hook, nothing.
/// Capability sets are per thread: each engine starts on a thread of its
/// own.
#[test]
fn a_steering_hook_keeps_net_admin_and_nothing_else() {
    const NET_ADMIN: u64 = 1 << 12;
    let net = TestNet::new();
    for with_hook in [true, false] {
        let host = net.host.clone();
        let eff = std::thread::spawn(move || {
            let mut b = Engine::builder(&host)
                .own(Proto::Udp, PORT)
                .frames(4096, 512)
                .stats_dir(std::env::temp_dir().join(format!("steer-caps-{}", std::process::id())))
                .drop_privileges(true)
                .handler(|_cpu| Box::new(|_: &mut [u8], _: &PacketContext| Verdict::Consume));
            if with_hook {
                b = b.hook(|_rxq| steer_core::hook::CountingHook::default());
            }
            let engine = b.start().expect("engine starts on the test veth");
            let eff = cap_eff();
            drop(engine.stop());
            eff
        })
        .join()
        .unwrap();
        let want = if with_hook { NET_ADMIN } else { 0 };
        assert_eq!(eff, want, "hook {with_hook}: CapEff {eff:#x}");
    }
}

/// The ntuple hook under least privilege: built at start, before the drop,
/// it opens its record of the rules next to the interface's owner lock
/// (under a root-owned directory) while it may, records the rules it
/// installs through that descriptor once only CAP_NET_ADMIN is left, and
/// at stop deletes them and its record.
#[test]
fn the_ntuple_hook_records_its_rules_with_privileges_dropped() {
    use std::net::{SocketAddr, UdpSocket};
    use steer_xdp::ntuple::{MemoryNic, NtupleSteering};
    let net = TestNet::new();
    let nic = MemoryNic::new(64);
    let records = || {
        let lock = steer_xdp::owner_lock::InterfaceLock::acquire(&net.host).unwrap();
        let stem = lock
            .path()
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        std::fs::read_dir(lock.path().parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{stem}.ntuple."))
            })
            .map(|e| e.metadata().unwrap().len())
            .collect::<Vec<u64>>()
    };
    // Started on a thread of its own, whose capabilities drop; the
    // traffic comes from this one, which may still enter the namespace.
    let (engine, eff) = std::thread::scope(|s| {
        s.spawn(|| {
            let (n, host) = (nic.clone(), net.host.clone());
            let engine = support::echo_builder(&net, steer_core::policy::Policy::Always, true)
                .drop_privileges(true)
                .hook(move |_rxq| {
                    NtupleSteering::with_ioctl(&host, n.clone(), |cpu| Some(cpu as u32), 16)
                        .unwrap()
                })
                .start()
                .expect("engine starts on the test veth");
            (engine, cap_eff())
        })
        .join()
        .unwrap()
    });
    assert_eq!(eff, 1 << 12, "CAP_NET_ADMIN only");
    let cpus: Vec<usize> = engine.topology().online_cpus().iter().collect();
    engine.pin_port(PORT, *cpus.last().unwrap());
    net.in_ns(|| {
        let u = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap();
        u.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        u.send_to(b"x", SocketAddr::new(net.host_v4.into(), PORT))
            .unwrap();
        u.recv_from(&mut [0u8; 16]).expect("the echo answers");
    });
    let rules = nic.rules();
    assert_eq!(rules.len(), 1, "{rules:?}");
    // One record per rx queue's hook; the rule's slot is written.
    let sizes = records();
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert_eq!(
        sizes.iter().max(),
        Some(&(16 * (u64::from(rules[0].location) + 1)))
    );
    drop(engine.stop());
    assert!(nic.rules().is_empty());
    assert!(records().is_empty(), "records left at stop");
}
