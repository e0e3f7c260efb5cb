//! The ethtool ntuple steering hook inside a running engine, against a NIC
//! rule table in memory (`MemoryNic`; a veth has no ntuple filters): the
//! echo on a 2-queue test veth, 2 workers, the hook of each rx queue built
//! with `NtupleSteering::with_ioctl` over one shared table. Moved flows get
//! exact rules naming the rx queue of their new CPU, updated in place when
//! they move again; a stopped engine leaves the table empty; and the rules
//! of an engine that ended as a killed one would (its hooks abandoned: their
//! rules stay on the NIC and in their records) are removed by the next
//! engine's start on the same interface.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use steer_core::hook::{FilterId, FlowMove, HookError, SteerHook};
use steer_core::policy::Policy;
use steer_engine::engine::{Engine, EngineBuilder};
use steer_testbed::TestNet;
use steer_xdp::ntuple::{MemoryNic, NtupleSteering};
use support::{echo_builder, peer_udp_key, PORT};

/// The source ports of the test's flows (fixed, so the rules can be told
/// apart by flow).
const SPORTS: [u16; 4] = [41001, 41002, 41003, 41004];

/// The rx queue of each worker CPU: queue i serves the i-th CPU (as
/// `steer --steer-hook ntuple` maps them).
fn queue_of(cpus: Vec<usize>) -> impl Fn(usize) -> Option<u32> + Send + Clone + 'static {
    move |cpu| cpus.iter().position(|&c| c == cpu).map(|i| i as u32)
}

/// The echo engine with an ntuple hook over `nic` on each rx queue.
fn with_ntuple(net: &TestNet, nic: &MemoryNic, cpus: &[usize]) -> EngineBuilder {
    let (nic, host, q) = (nic.clone(), net.host.clone(), queue_of(cpus.to_vec()));
    echo_builder(net, Policy::Always, true).hook(move |_rxq| {
        NtupleSteering::with_ioctl(&host, nic.clone(), q.clone(), 64)
            .expect("the memory NIC has ntuple filters")
    })
}

/// Sends `n` datagrams on each of the test's flows and waits for each
/// echo, so every flow has been seen (and moved) by the engine.
fn echo_each_flow(net: &TestNet, n: usize) {
    net.in_ns(|| {
        let to = SocketAddr::new(net.host_v4.into(), PORT);
        for sport in SPORTS {
            let u = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), sport)).unwrap();
            u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 64];
            for i in 0..n {
                u.send_to(&(i as u32).to_be_bytes(), to).unwrap();
                let (len, _) = u.recv_from(&mut buf).expect("the echo answers");
                assert_eq!(buf[..len], (i as u32).to_be_bytes());
            }
        }
    });
}

/// The rules on `nic`, as (source port, rx queue), sorted; every one an
/// exact rule for one of the test's flows.
fn rules_by_flow(net: &TestNet, nic: &MemoryNic) -> Vec<(u16, u64)> {
    let mut rules: Vec<(u16, u64)> = nic
        .rules()
        .iter()
        .map(|r| {
            let key = r.flow.expect("an exact 5-tuple rule");
            let sport = key.src_port();
            assert_eq!(key, peer_udp_key(net, sport), "{r:?}");
            (sport, r.queue)
        })
        .collect();
    rules.sort_unstable();
    rules
}

fn worker_cpus(engine: &Engine) -> Vec<usize> {
    let cpus: Vec<usize> = engine.topology().online_cpus().iter().collect();
    assert!(cpus.len() >= 2, "needs two CPUs");
    cpus
}

/// Files named after `interface`'s owner lock other than the lock itself
/// (the hooks' records).
fn records_of(interface: &str) -> Vec<String> {
    let lock = steer_xdp::owner_lock::InterfaceLock::acquire(interface).unwrap();
    let name = lock
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let stem = name.trim_end_matches(".lock").to_owned();
    let dir = lock.path().parent().unwrap().to_path_buf();
    drop(lock);
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{stem}.ntuple.")))
        .collect()
}

#[test]
fn moved_flows_get_exact_rules_for_their_new_cpus_queue_and_a_stop_removes_them() {
    let net = TestNet::new();
    let nic = MemoryNic::new(256);
    let cpus = online_cpus();
    let engine = with_ntuple(&net, &nic, &cpus).start().unwrap();
    assert_eq!(worker_cpus(&engine), cpus);
    let q = queue_of(cpus.clone());
    assert!(nic.rules().is_empty());
    assert_eq!(
        records_of_running(&net),
        2,
        "one record per rx queue's hook"
    );

    // Every flow to the second CPU: one rule each, naming its queue.
    engine.pin_port(PORT, cpus[1]);
    echo_each_flow(&net, 3);
    let want: Vec<(u16, u64)> = SPORTS
        .iter()
        .map(|&s| (s, u64::from(q(cpus[1]).unwrap())))
        .collect();
    assert_eq!(rules_by_flow(&net, &nic), want);
    let locations: Vec<u32> = nic.rules().iter().map(|r| r.location).collect();

    // Moved again, to the first CPU: the same rules, rewritten in place.
    engine.pin_port(PORT, cpus[0]);
    echo_each_flow(&net, 3);
    let want: Vec<(u16, u64)> = SPORTS
        .iter()
        .map(|&s| (s, u64::from(q(cpus[0]).unwrap())))
        .collect();
    assert_eq!(rules_by_flow(&net, &nic), want);
    let again: Vec<u32> = nic.rules().iter().map(|r| r.location).collect();
    assert_eq!(again, locations, "updated in place");

    let report = engine.stop().unwrap();
    assert!(report.stats.steering_updates() >= 8);
    assert!(
        nic.rules().is_empty(),
        "rules left at stop: {:?}",
        nic.rules()
    );
    assert!(records_of(&net.host).is_empty(), "records left at stop");
}

/// A hook that ends as a killed process's would: its rules stay.
struct Abandoned(Option<NtupleSteering<MemoryNic>>);

impl SteerHook for Abandoned {
    fn steer(&mut self, mv: &FlowMove) -> Result<Option<FilterId>, HookError> {
        self.0
            .as_mut()
            .map_or(Err(HookError::Unsupported), |h| h.steer(mv))
    }
    fn remove(&mut self, rxq: u32, bucket: usize, filter: FilterId) {
        if let Some(h) = &mut self.0 {
            h.remove(rxq, bucket, filter);
        }
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abandon();
        }
    }
}

#[test]
fn the_next_engine_on_the_interface_removes_the_rules_a_killed_one_left() {
    let net = TestNet::new();
    let nic = MemoryNic::new(256);
    let cpus = online_cpus();
    let (n, host, q) = (nic.clone(), net.host.clone(), queue_of(cpus.clone()));
    let dead = echo_builder(&net, Policy::Always, true)
        .hook(move |_rxq| {
            Abandoned(Some(
                NtupleSteering::with_ioctl(&host, n.clone(), q.clone(), 64).unwrap(),
            ))
        })
        .start()
        .unwrap();
    assert_eq!(worker_cpus(&dead), cpus);
    dead.pin_port(PORT, cpus[1]);
    echo_each_flow(&net, 2);
    dead.stop().unwrap();
    assert_eq!(
        rules_by_flow(&net, &nic).len(),
        SPORTS.len(),
        "a killed engine leaves its rules on the NIC"
    );
    assert!(!records_of(&net.host).is_empty(), "and their records");

    // The next engine on the interface: its hooks, built at start, remove
    // them before they install anything.
    let next = with_ntuple(&net, &nic, &cpus).start().unwrap();
    assert!(nic.rules().is_empty(), "left: {:?}", nic.rules());
    let deletes = nic.commands().iter().filter(|&&c| c == 0x31).count();
    assert_eq!(deletes, SPORTS.len());
    assert_eq!(records_of_running(&net), 2, "only the live hooks' records");

    // And it steers as usual, and stops clean.
    next.pin_port(PORT, cpus[0]);
    echo_each_flow(&net, 2);
    let q0 = u64::from(queue_of(cpus.clone())(cpus[0]).unwrap());
    assert!(rules_by_flow(&net, &nic).iter().all(|&(_, q)| q == q0));
    assert_eq!(nic.rules().len(), SPORTS.len());
    next.stop().unwrap();
    assert!(nic.rules().is_empty());
    assert!(records_of(&net.host).is_empty());
}

/// Records of the hooks of the engine running on `net` (its owner lock is
/// held by this process, so looking is sharing it).
fn records_of_running(net: &TestNet) -> usize {
    records_of(&net.host).len()
}

/// The CPUs the test engines run on: every online one.
fn online_cpus() -> Vec<usize> {
    steer_topology::Topology::live()
        .unwrap()
        .online_cpus()
        .iter()
        .collect()
}
