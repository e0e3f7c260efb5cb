//! The engine end to end on a 2-queue veth pair: the UDP echo over IPv4 and
//! IPv6 with many flows under both policies and with the fast path on and
//! off (every datagram answered, in order per flow, every frame back at
//! stop); malformed and foreign frames at the owned port. of a bad start. Needs root, as CI runs it.

mod support;

use steer_core::policy::Policy;
use steer_core::runtime::WorkerState;
use steer_testbed::TestNet;
use support::{
    assert_accounted, drive_flows, echo_builder, echo_engine, malformed_frames, send_raw, PORT,
};

#[test]
fn echo_answers_every_datagram_in_order_per_flow_under_each_policy_and_fast_path() {
    for (policy, fast_path) in [(Policy::LlcAffinity, true), (Policy::Always, false)] {
        let net = TestNet::new();
        let engine = echo_engine(&net, policy, fast_path);
        let (flows, per_flow) = (8, 300);
        let got = drive_flows(&net, flows, per_flow, 25);
        let stats = engine.stats();
        let report = engine.stop().unwrap();
        for (i, seqs) in got.iter().enumerate() {
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "{policy:?}/fast {fast_path}: flow {i} reordered: {seqs:?}"
            );
            assert_eq!(
                seqs.len(),
                per_flow as usize,
                "{policy:?}/fast {fast_path}: flow {i} lost replies; stats\n{}",
                stats.table(None)
            );
        }
        let t = &report.stats.total;
        let sent = (flows as u64) * u64::from(per_flow);
        assert_eq!(t.core.rx, sent, "{}", report.stats.table(None));
        assert_eq!(t.engine.tx, sent);
        if fast_path {
            assert!(t.core.fast_path > 0, "some flows are served inline");
        } else {
            assert_eq!(t.core.fast_path, 0);
        }
        assert_accounted(&report);
    }
}

/// The `se.slice` (ns) of every steer worker thread of this process.
fn worker_slices() -> Vec<u64> {
    let mut slices = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("steer-worker") {
            continue;
        }
        let sched = std::fs::read_to_string(task.path().join("sched")).unwrap_or_default();
        if let Some(v) = sched
            .lines()
            .find(|l| l.starts_with("se.slice"))
            .and_then(|l| l.split(':').nth(1))
        {
            slices.push(v.trim().parse().unwrap());
        }
    }
    slices
}

#[test]
fn workers_ask_for_a_short_scheduling_slice_unless_told_not_to() {
    let net = TestNet::new();
    // Other tests' engines (default slice) may run beside this one; only
    // this test starts workers with the kernel's default.
    let engine = echo_engine(&net, Policy::LlcAffinity, true);
    let slices = worker_slices();
    assert!(slices.len() >= 2, "{slices:?}");
    assert!(slices.iter().all(|&s| s == 100_000), "{slices:?}");
    engine.stop().unwrap();

    let engine = support::echo_builder(&net, Policy::LlcAffinity, true)
        .worker_slice(None)
        .start()
        .unwrap();
    let kernel_default = worker_slices().iter().filter(|&&s| s != 100_000).count();
    assert!(kernel_default >= 2, "{:?}", worker_slices());
    engine.stop().unwrap();
}

#[test]
fn malformed_and_foreign_frames_at_the_owned_port_are_counted_never_fatal() {
    let net = TestNet::new();
    let engine = echo_engine(&net, Policy::LlcAffinity, true);
    let bad = malformed_frames(&net);
    for _ in 0..50 {
        send_raw(&net, &bad);
    }
    // The engine still serves.
    let got = drive_flows(&net, 2, 20, 10);
    assert!(got.iter().all(|g| g.len() == 20), "{got:?}");
    let states = engine.worker_states();
    assert!(
        states.iter().all(|(_, s)| *s == WorkerState::Running),
        "{states:?}"
    );
    let program = engine.program_stats().unwrap();
    let report = engine.stop().unwrap();
    let t = &report.stats.total;
    // What the program redirected, the engine received; the bad part of it
    // was dropped with a counter (malformed, or refused by the echo).
    assert_eq!(t.core.rx, program.redirected, "{program:?} {t:?}");
    assert_eq!(t.engine.tx, 40);
    assert!(t.drops() > 0, "{t:?}");
    assert_accounted(&report);
}

#[test]
fn handlers_see_the_hash_each_packet_was_steered_by() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use steer_core::flow::{flow_key, FlowHasher, ToeplitzHasher};
    use steer_engine::engine::{PacketContext, Verdict};
    let net = TestNet::new();
    let (right, wrong) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (r, w) = (Arc::clone(&right), Arc::clone(&wrong));
    let engine = support::echo_builder(&net, Policy::LlcAffinity, true)
        .hasher(ToeplitzHasher::default())
        .handler(move |_cpu| {
            let (r, w) = (Arc::clone(&r), Arc::clone(&w));
            let hasher = ToeplitzHasher::default();
            Box::new(move |p: &mut [u8], ctx: &PacketContext| {
                let key = flow_key(p).unwrap().unwrap();
                let counter = if ctx.hash() == hasher.hash(&key) {
                    &r
                } else {
                    &w
                };
                counter.fetch_add(1, Ordering::Relaxed);
                match steer_engine::echo::echo_in_place(p, steer_engine::echo::EchoMode::Plain) {
                    Ok(len) => Verdict::Transmit(len),
                    Err(_) => Verdict::Drop,
                }
            })
        })
        .start()
        .unwrap();
    let got = drive_flows(&net, 4, 50, 10);
    assert!(got.iter().all(|g| g.len() == 50), "{got:?}");
    let report = engine.stop().unwrap();
    assert_eq!(
        (right.load(Ordering::Relaxed), wrong.load(Ordering::Relaxed)),
        (200, 0)
    );
    assert_accounted(&report);
}

#[test]
fn a_receive_hash_the_device_cannot_give_is_refused_at_start() {
    let net = TestNet::new();
    // Generic XDP mode: the program cannot be bound to the device, so it
    // gets no receive hash.
    let err = support::echo_builder(&net, Policy::LlcAffinity, true)
        .xdp_mode(steer_xdp::XdpMode::Generic)
        .use_rx_hash(true)
        .start()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("use_rx_hash") && err.contains("native") && !err.contains('\n'),
        "{err}"
    );
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
    // The namespace's loopback: a driver without XDP metadata at all.
    let err = net.in_ns(|| {
        steer_engine::engine::Engine::builder("lo")
            .own(steer_xdp::Proto::Udp, support::PORT)
            .handler(|_cpu| {
                Box::new(|_: &mut [u8], _: &steer_engine::engine::PacketContext| {
                    steer_engine::engine::Verdict::Drop
                })
            })
            .use_rx_hash(true)
            .start()
            .map(|_| ())
    });
    let err = err.unwrap_err().to_string();
    assert!(err.contains("no receive hash"), "{err}");
}

/// A copy of this machine's CPU tree in sysfs (online and possible lists,
/// caches, NUMA nodes) under a temporary root, for a topology whose
/// hotplug a test drives; removed on drop.
struct FakeSysfs(std::path::PathBuf);

impl FakeSysfs {
    fn copy_of_this_machine() -> Self {
        use std::fs;
        let root = std::env::temp_dir().join(format!("steer-fake-sysfs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let cpu = std::path::Path::new("/sys/devices/system/cpu");
        let to = root.join("sys/devices/system/cpu");
        fs::create_dir_all(&to).unwrap();
        for f in ["online", "possible"] {
            fs::copy(cpu.join(f), to.join(f)).unwrap();
        }
        let possible: steer_core::cpu::CpuSet = fs::read_to_string(cpu.join("possible"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        for c in possible.iter() {
            let cache = cpu.join(format!("cpu{c}/cache"));
            for index in fs::read_dir(&cache).unwrap().flatten() {
                let name = index.file_name();
                if !name.to_string_lossy().starts_with("index") {
                    continue;
                }
                let dir = to.join(format!("cpu{c}/cache")).join(&name);
                fs::create_dir_all(&dir).unwrap();
                for f in ["level", "type", "shared_cpu_list"] {
                    fs::copy(index.path().join(f), dir.join(f)).unwrap();
                }
            }
        }
        Self(root)
    }

    fn set_online(&self, list: &str) {
        std::fs::write(
            self.0.join("sys/devices/system/cpu/online"),
            format!("{list}\n"),
        )
        .unwrap();
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_running_engine_follows_a_cpu_going_offline_and_coming_back() {
    use std::time::{Duration, Instant};
    let sysfs = FakeSysfs::copy_of_this_machine();
    let topology = steer_topology::Topology::from_sysfs(&sysfs.0).unwrap();
    let cpus: Vec<usize> = topology.online_cpus().iter().collect();
    assert!(cpus.len() >= 2, "needs two CPUs");
    let last = *cpus.last().unwrap();
    let others: Vec<String> = cpus[..cpus.len() - 1]
        .iter()
        .map(usize::to_string)
        .collect();
    let net = TestNet::new();
    let engine = support::echo_builder(&net, Policy::LlcAffinity, true)
        .topology(topology)
        .hotplug_watch(Some(Duration::from_millis(10)))
        .start()
        .unwrap();
    // Packets processed on the CPUs but the last, and on the last, while
    // `flows` flows send.
    let processed_while = |flows: usize| {
        let on = support::processed_on;
        let before = engine.stats();
        let got = drive_flows(&net, flows, 50, 10);
        for (i, seqs) in got.iter().enumerate() {
            assert_eq!(seqs.len(), 50, "flow {i}: {seqs:?}");
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "flow {i}: {seqs:?}");
        }
        std::thread::sleep(Duration::from_millis(50)); // counters flushed
        let after = engine.stats();
        let others: u64 = cpus[..cpus.len() - 1]
            .iter()
            .map(|&c| on(&after, c) - on(&before, c))
            .sum();
        (others, on(&after, last) - on(&before, last))
    };
    let wait_online = |cpu: usize, online: bool| {
        let deadline = Instant::now() + Duration::from_secs(2);
        while engine.topology().is_online(cpu) != online {
            assert!(
                Instant::now() < deadline,
                "CPU {cpu} online={online} never seen"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // 16 flows over both rx queues: both CPUs work.
    let (a, b) = processed_while(16);
    assert!(a > 0 && b > 0, "both CPUs process: {a} {b}");

    // The last CPU goes offline: every packet runs on the others, even
    // those of the rx queue its worker dispatches.
    sysfs.set_online(&others.join(","));
    wait_online(last, false);
    let (a, b) = processed_while(16);
    assert_eq!(b, 0, "nothing on the offline CPU {last}");
    assert_eq!(a, 16 * 50, "every packet on the other CPUs");

    // It comes back: flows return to it.
    let all: Vec<String> = cpus.iter().map(usize::to_string).collect();
    sysfs.set_online(&all.join(","));
    wait_online(last, true);
    let (_, b) = processed_while(16);
    assert!(b > 0, "the CPU back online works again");
    let report = engine.stop().unwrap();
    assert_accounted(&report);
}

/// A hook that keeps every move it is told of.
struct Capture(std::sync::Arc<std::sync::Mutex<Vec<steer_core::hook::FlowMove>>>);

impl steer_core::hook::SteerHook for Capture {
    fn steer(
        &mut self,
        mv: &steer_core::hook::FlowMove,
    ) -> Result<Option<steer_core::hook::FilterId>, steer_core::hook::HookError> {
        self.0.lock().unwrap().push(*mv);
        Ok(None)
    }
    fn remove(&mut self, _rxq: u32, _bucket: usize, _filter: steer_core::hook::FilterId) {}
}

#[test]
fn the_builders_hook_is_told_of_every_move_with_the_flows_key() {
    let net = TestNet::new();
    let moves = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let m = moves.clone();
    let engine = echo_builder(&net, Policy::Always, true)
        .hook(move |_rxq| Capture(m.clone()))
        .start()
        .unwrap();
    let cpus: Vec<usize> = engine.worker_states().iter().map(|(c, _)| *c).collect();
    let got = drive_flows(&net, 4, 50, 10);
    assert!(got.iter().all(|g| g.len() == 50));
    let report = engine.stop().unwrap();
    let moves = moves.lock().unwrap();
    assert!(!moves.is_empty());
    assert_eq!(moves.len() as u64, report.stats.steering_updates());
    for mv in moves.iter() {
        let key = mv.key.expect("the dispatcher passes the flow's key");
        assert_eq!((key.protocol, key.dst_port()), (17, PORT), "{mv:?}");
        assert!(cpus.contains(&mv.to), "{mv:?}");
    }
}
