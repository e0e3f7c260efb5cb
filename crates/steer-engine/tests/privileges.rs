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
