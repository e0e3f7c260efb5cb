//! Flow delivery end to end on a 2-queue veth: flows read from tokio
//! (multi-thread, and one current_thread runtime per pinned core) and from a
//! mio loop, replies sent on the flow; reading records the reader's CPU so
//! the flow's packets follow it; a reader that moves threads mid-flow keeps
//! its order; a slow reader drops only its own datagrams; explicit pins win
//! over learning; tasks on the engine's own workers (thread-per-core) read,
//! answer and end cleanly at stop. Needs root, as CI runs it.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use steer_core::cpu::{CpuId, CpuSet};
use steer_core::flow::{AnyHasher, FlowHasher, FlowKey, KeyedHasher, ToeplitzHasher};
use steer_core::policy::{Policy, WriteReason};
use steer_engine::engine::{Engine, EngineBuilder, EngineStats};
use steer_engine::flows::{AcceptMode, FlowListener, FlowOptions, MioNotifier};
use steer_testbed::TestNet;
use steer_xdp::Proto;
use support::{drive_flows, echo_flows_on_multi_thread, processed_on, PORT};

fn flow_engine(net: &TestNet, policy: Policy, accept: AcceptMode) -> Engine {
    Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .policy(policy)
        .frames(4096, 512)
        .deliver_flows(FlowOptions {
            accept,
            ..FlowOptions::default()
        })
        .start()
        .expect("engine with flow delivery starts")
}

fn assert_all_in_order(got: &[Vec<u32>], per_flow: u32, what: &str) {
    for (i, seqs) in got.iter().enumerate() {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{what}: flow {i} reordered: {seqs:?}"
        );
        assert_eq!(seqs.len(), per_flow as usize, "{what}: flow {i}: {seqs:?}");
    }
}

fn assert_clean_stop(engine: Engine) {
    let report = engine.stop().unwrap();
    assert!(report.census_ok(), "{:?}", report.census);
}

/// Every desired-table write `stats` counts is a flow's first record (or
/// a slot shared with another flow), at least `flows` of them, never a
/// move.
fn assert_first_records_only(stats: &EngineStats, flows: u64) {
    let first_records = stats.desired.written(WriteReason::NewOrOtherFlow);
    assert!(first_records >= flows, "{}", stats.table(None));
    assert_eq!(
        stats.desired.updates(),
        first_records,
        "{}",
        stats.table(None)
    );
}

/// [`assert_clean_stop`], then the flows' runtime.
fn stop_both(engine: Engine, rt: tokio::runtime::Runtime) {
    assert_clean_stop(engine);
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// A test net, a [`flow_engine`] on it accepting on one listener, and
/// that listener.
fn single_listener(policy: Policy) -> (TestNet, Engine, FlowListener) {
    let net = TestNet::new();
    let engine = flow_engine(&net, policy, AcceptMode::Single);
    let listener = engine.listener().unwrap();
    (net, engine, listener)
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn tokio_multi_thread_echo_through_flows_under_both_policies() {
    for policy in [Policy::LlcAffinity, Policy::Always] {
        let (net, engine, listener) = single_listener(policy);
        let rt = echo_flows_on_multi_thread(listener, 2);
        let got = drive_flows(&net, 8, 300, 25);
        assert_all_in_order(&got, 300, &format!("{policy:?}"));
        let stats = engine.flow_stats().unwrap();
        assert_eq!(stats.accepted, 8);
        stop_both(engine, rt);
    }
}

#[test]
fn per_core_current_thread_runtimes_accept_the_flows_their_worker_received() {
    let net = TestNet::new();
    let engine = flow_engine(&net, Policy::LlcAffinity, AcceptMode::PerCpu);
    let cpus: Vec<usize> = engine.topology().online_cpus().iter().collect();
    let mut threads = Vec::new();
    for &cpu in &cpus {
        let listener = engine.listener_for(cpu).unwrap();
        threads.push(std::thread::spawn(move || {
            let _ = steer_topology::thread::pin_current(cpu);
            let rt = current_thread();
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let mut accepted = 0;
                while let Some(mut flow) = listener.accept().await {
                    accepted += 1;
                    tokio::task::spawn_local(async move {
                        while let Some(d) = flow.recv().await {
                            flow.send(&d).unwrap();
                        }
                    });
                }
                accepted
            })
        }));
    }
    let got = drive_flows(&net, 8, 200, 20);
    assert_all_in_order(&got, 200, "per-core");
    let stats = engine.stats();
    assert_clean_stop(engine);
    let accepted: Vec<u32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(accepted.iter().sum::<u32>(), 8, "{accepted:?}");
    // Each flow's reader runs on the CPU that received it and never moves:
    // every desired-table write is a flow's first record (or a slot shared
    // with another flow), never a move, and nothing was suppressed.
    assert_first_records_only(&stats, 8);
    assert_eq!(stats.desired.suppressed, 0, "{}", stats.table(None));
}

#[test]
fn reading_on_a_pinned_thread_steers_the_flow_there_and_a_move_keeps_order() {
    let net = TestNet::new();
    // `Always` so that a move between the two CPUs of this one-LLC machine
    // is followed (under LLC affinity it is suppressed; tested below). One
    // listener per CPU, so the reader knows which CPU received the flow.
    let engine = flow_engine(&net, Policy::Always, AcceptMode::PerCpu);
    let cpus: Vec<usize> = engine.topology().online_cpus().iter().collect();
    assert!(cpus.len() >= 2, "needs two CPUs");
    let listeners: Vec<(usize, FlowListener)> = cpus
        .iter()
        .map(|&c| (c, engine.listener_for(c).unwrap()))
        .collect();
    let shared = engine.shared().clone();

    // The reader runs on the CPU that received the flow for the first
    // half (the flow stays there), then the Flow moves to a thread on the
    // other CPU for the second half. Replies are echoed from each.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let (a, mut flow) = loop {
            if let Some(found) = listeners
                .iter()
                .find_map(|(c, l)| l.try_accept().map(|f| (*c, f)))
            {
                break found;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let b = *cpus.iter().find(|&&c| c != a).unwrap();
        steer_topology::thread::pin_current(a).unwrap();
        let rt = current_thread();
        for _ in 0..150 {
            let d = rt.block_on(flow.recv()).unwrap();
            flow.send(&d).unwrap();
        }
        tx.send((flow.hash(), b)).unwrap();
        std::thread::spawn(move || {
            steer_topology::thread::pin_current(b).unwrap();
            let rt = current_thread();
            for _ in 0..150 {
                let d = rt.block_on(flow.recv()).unwrap();
                flow.send(&d).unwrap();
            }
            flow.hash()
        })
        .join()
        .unwrap()
    });
    let got = drive_flows(&net, 1, 300, 10);
    let (hash, b) = rx.recv().unwrap();
    assert_eq!(reader.join().unwrap(), hash);
    assert_all_in_order(&got, 300, "moving reader");
    assert_eq!(
        shared.desired.lookup(hash),
        Some(b),
        "the last reader's CPU"
    );
    // Exactly two steering updates: the flow's first placement on the CPU
    // that received it, and its one move to the second reader's CPU.
    let stats = engine.stats();
    assert_eq!(stats.total.core.hook_calls, 2, "{}", stats.table(None));
    assert_clean_stop(engine);
}

#[test]
fn under_llc_affinity_a_same_llc_move_is_not_written() {
    let (net, engine, listener) = single_listener(Policy::LlcAffinity);
    let cpus: Vec<usize> = engine.topology().online_cpus().iter().collect();
    let shared = engine.shared().clone();
    let reader = std::thread::spawn(move || {
        let rt = current_thread();
        let mut flow = rt.block_on(listener.accept()).unwrap();
        let mut first = None;
        let all: CpuSet = cpus.iter().copied().collect();
        for i in 0..100 {
            // Move the reading thread to another CPU every 10 datagrams,
            // leaving it allowed everywhere (so the affinity rule does not
            // force the write: only the LLC rule decides).
            if i % 10 == 0 {
                let _ = steer_topology::thread::pin_current(cpus[(i / 10) % cpus.len()]);
                let _ = steer_topology::thread::set_allowed(&all);
            }
            let d = rt.block_on(flow.recv()).unwrap();
            first.get_or_insert(steer_topology::thread::current_cpu().unwrap());
            flow.send(&d).unwrap();
        }
        (flow.hash(), first.unwrap())
    });
    let got = drive_flows(&net, 1, 100, 5);
    let (hash, first_cpu) = reader.join().unwrap();
    assert_all_in_order(&got, 100, "llc");
    // One LLC: the first record wrote, every later CPU change was suppressed.
    assert_eq!(shared.desired.lookup(hash), Some(first_cpu));
    let stats = engine.stats();
    assert!(stats.desired.suppressed > 0, "{}", stats.table(None));
    assert_eq!(stats.desired.updates(), 1, "{}", stats.table(None));
    assert_clean_stop(engine);
}

#[test]
fn a_slow_reader_drops_only_its_own_datagrams() {
    let net = TestNet::new();
    let engine = Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .frames(4096, 512)
        .deliver_flows(FlowOptions {
            queue_depth: 16,
            ..FlowOptions::default()
        })
        .start()
        .unwrap();
    let listener = engine.listener().unwrap();
    // The first flow is never read; the second is echoed.
    let (host, peer) = (net.host_v4, net.peer_v4);
    let slow_tx = net.in_ns(|| {
        let slow = UdpSocket::bind(SocketAddr::new(peer.into(), 0)).unwrap();
        slow.send_to(b"first", SocketAddr::new(host.into(), PORT))
            .unwrap();
        slow
    });
    std::thread::sleep(Duration::from_millis(100));
    let slow_flow = listener.try_accept().expect("slow flow offered");
    let rt = echo_flows_on_multi_thread(listener, 1);
    net.in_ns(|| {
        for i in 0..200u32 {
            slow_tx
                .send_to(&i.to_be_bytes(), SocketAddr::new(host.into(), PORT))
                .unwrap();
        }
    });
    // Bursts below its queue depth: this flow loses nothing.
    let got = drive_flows(&net, 1, 200, 8);
    assert_all_in_order(&got, 200, "the other flow");
    let s = slow_flow.stats();
    assert_eq!(s.delivered, 16, "{s:?}");
    assert_eq!(s.queue_drops, 201 - 16, "{s:?}");
    drop(slow_flow);
    stop_both(engine, rt);
}

#[test]
fn a_mio_event_loop_reads_and_answers_flows() {
    let (net, engine, listener) = single_listener(Policy::LlcAffinity);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loop_stop = Arc::clone(&stop);
    let event_loop = std::thread::spawn(move || {
        let mut poll = mio::Poll::new().unwrap();
        let notifier = MioNotifier::new(poll.registry(), mio::Token(0)).unwrap();
        const LISTENER: usize = usize::MAX - 1;
        listener.notify_mio(&notifier, LISTENER);
        let mut flows = Vec::new();
        let mut events = mio::Events::with_capacity(64);
        let mut answered = 0u64;
        while !loop_stop.load(std::sync::atomic::Ordering::Relaxed) {
            poll.poll(&mut events, Some(Duration::from_millis(50)))
                .unwrap();
            for token in notifier.drain().collect::<Vec<_>>() {
                if token == LISTENER {
                    while let Some(flow) = listener.try_accept() {
                        flow.notify_mio(&notifier, flows.len());
                        flows.push(flow);
                    }
                } else {
                    let flow = &mut flows[token];
                    while let Some(d) = flow.try_recv() {
                        flow.send(&d).unwrap();
                        answered += 1;
                    }
                }
            }
        }
        (flows.len(), answered)
    });
    let got = drive_flows(&net, 4, 200, 20);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (flows, answered) = event_loop.join().unwrap();
    assert_all_in_order(&got, 200, "mio");
    assert_eq!((flows, answered), (4, 800));
    assert_clean_stop(engine);
}

#[test]
fn explicit_flow_and_port_pins_override_learning() {
    let (net, engine, listener) = single_listener(Policy::Always);
    let cpus: Vec<usize> = engine.topology().online_cpus().iter().collect();
    let target = *cpus.last().unwrap();
    engine.pin_port(PORT, target);
    let rt = echo_flows_on_multi_thread(listener, 2);
    let got = drive_flows(&net, 4, 100, 10);
    assert_all_in_order(&got, 100, "pinned");
    let stats = engine.stats();
    // Every packet ran on the pinned CPU, whichever thread read it.
    let on_target = processed_on(&stats, target);
    assert_eq!(
        on_target,
        stats.total.core.processed,
        "{}",
        stats.table(None)
    );
    assert!(stats.desired.updates() > 0, "{}", stats.table(None));
    stop_both(engine, rt);
}

/// Thread-per-core: the flows' tasks run on the engine's worker threads.
/// Every datagram is answered in order, each read happens on a worker
/// thread (so each flow is recorded once, on the CPU that received it, and
/// never moves), and stopping the engine with every task still waiting on
/// its flow (and a timer) ends them all: each sees the end and winds down
/// in the grace period, the acceptors end too, and the frames balance.
#[test]
fn tasks_on_the_workers_answer_every_flow_and_end_at_stop() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let net = TestNet::new();
    let ended = Arc::new(AtomicUsize::new(0));
    let acceptors_ended = Arc::new(AtomicUsize::new(0));
    let off_worker_reads = Arc::new(AtomicUsize::new(0));
    let (e, a, off) = (
        Arc::clone(&ended),
        Arc::clone(&acceptors_ended),
        Arc::clone(&off_worker_reads),
    );
    let engine = Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .frames(4096, 512)
        .deliver_flows_on_workers(FlowOptions::default(), move |cpu, listener| {
            let (ended, acceptors_ended, off) = (Arc::clone(&e), Arc::clone(&a), Arc::clone(&off));
            async move {
                while let Some(mut flow) = listener.accept().await {
                    let (ended, off) = (Arc::clone(&ended), Arc::clone(&off));
                    tokio::task::spawn_local(async move {
                        let worker = format!("steer-worker-{cpu}");
                        loop {
                            tokio::select! {
                                d = flow.recv() => match d {
                                    Some(d) => {
                                        if std::thread::current().name() != Some(worker.as_str()) {
                                            off.fetch_add(1, Ordering::Relaxed);
                                        }
                                        flow.send(&d).unwrap();
                                    }
                                    None => break,
                                },
                                // A timer the task keeps re-arming.
                                () = tokio::time::sleep(Duration::from_millis(5)) => {}
                            }
                        }
                        // Winding down takes a while (the stop's grace).
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        ended.fetch_add(1, Ordering::Relaxed);
                    });
                }
                acceptors_ended.fetch_add(1, Ordering::Relaxed);
            }
        })
        .start()
        .expect("engine with flow tasks on its workers starts");
    assert!(engine.listener().is_none() && engine.listener_for(0).is_none());
    let workers = engine.worker_states().len();
    let got = drive_flows(&net, 8, 300, 25);
    assert_all_in_order(&got, 300, "tasks on the workers");
    assert_eq!(off_worker_reads.load(Ordering::Relaxed), 0);
    let stats = engine.stats();
    assert_eq!(engine.flow_stats().unwrap().accepted, 8);
    assert_first_records_only(&stats, 8);
    // The 8 tasks still wait on their flows: the stop ends them.
    assert_eq!(ended.load(Ordering::Relaxed), 0);
    let started = std::time::Instant::now();
    assert_clean_stop(engine);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        ended.load(Ordering::Relaxed),
        8,
        "every flow task saw the end"
    );
    assert_eq!(acceptors_ended.load(Ordering::Relaxed), workers);
}

/// Thread-per-core with a worker that busy-polls (never sleeps): the tasks
/// still run, their replies leave and their timers fire.
#[test]
fn tasks_on_busy_polling_workers_answer_every_flow() {
    let net = TestNet::new();
    // One busy-polling worker, on the last CPU (the machine is shared).
    let last = steer_topology::Topology::live()
        .unwrap()
        .online_cpus()
        .iter()
        .last()
        .unwrap();
    let engine = Engine::builder(&net.host)
        .own(Proto::Udp, PORT)
        .frames(4096, 512)
        .cpus([last].into_iter().collect())
        .busy_poll(true)
        .deliver_flows_on_workers(FlowOptions::default(), |_cpu, listener| async move {
            while let Some(mut flow) = listener.accept().await {
                tokio::task::spawn_local(async move {
                    while let Some(d) = flow.recv().await {
                        // Answered after a timer: the timer must fire while
                        // the worker polls without sleeping.
                        tokio::time::sleep(Duration::from_micros(100)).await;
                        // (Fails only once the engine stopped.)
                        let _ = flow.send(&d);
                    }
                });
            }
        })
        .start()
        .unwrap();
    let got = drive_flows(&net, 4, 100, 5);
    assert_all_in_order(&got, 100, "busy-polling workers");
    assert_clean_stop(engine);
}

/// Where one flow's packets ran once its reader settled on another CPU.
struct Followed {
    /// The flow as delivered (its key and the hash it records under).
    key: FlowKey,
    hash: u32,
    /// The CPU whose worker received the flow first, and the reader's.
    first: CpuId,
    reader: CpuId,
    /// Packets processed on each of the two CPUs during the last datagrams,
    /// sent after the reader had read for a while: `(on first, on reader)`.
    tail: (u64, u64),
    /// Whether the desired-CPU table names the reader's CPU for `hash`.
    learned: bool,
    /// Frames the XDP program passed a receive hash with.
    rx_hashes: u64,
}

/// Flow delivery started from `builder` (policy `always`, one listener per
/// CPU), one UDP flow from the namespace, its reader pinned to the CPU that
/// did *not* receive it first and echoing each datagram; `warm` ping-pong
/// round trips, then `tail` more whose processing CPUs are counted. When
/// learning works the tail runs entirely on the reader's CPU.
fn follow_the_reader(net: &TestNet, builder: EngineBuilder, warm: u32, tail: u32) -> Followed {
    let engine = builder
        .own(Proto::Udp, PORT)
        .policy(Policy::Always)
        .frames(4096, 512)
        .deliver_flows(FlowOptions {
            accept: AcceptMode::PerCpu,
            ..FlowOptions::default()
        })
        .start()
        .expect("engine with flow delivery starts");
    let cpus: Vec<CpuId> = engine.topology().online_cpus().iter().collect();
    assert!(cpus.len() >= 2, "needs two CPUs");
    let listeners: Vec<_> = cpus
        .iter()
        .map(|&c| engine.listener_for(c).unwrap())
        .collect();
    let to = SocketAddr::new(net.host_v4.into(), PORT);
    let client = net.in_ns(|| {
        let s = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        s
    });
    client.send_to(&0u32.to_be_bytes(), to).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let (first, flow) = loop {
        if let Some(found) = listeners
            .iter()
            .zip(&cpus)
            .find_map(|(l, &c)| l.try_accept().map(|f| (c, f)))
        {
            break found;
        }
        assert!(std::time::Instant::now() < deadline, "flow never offered");
        std::thread::sleep(Duration::from_millis(1));
    };
    let reader_cpu = *cpus.iter().find(|&&c| c != first).unwrap();
    let (key, hash) = (flow.key(), flow.hash());
    let reader = std::thread::spawn(move || {
        let mut flow = flow;
        steer_topology::thread::pin_current(reader_cpu).unwrap();
        let rt = current_thread();
        while let Some(d) = rt.block_on(flow.recv()) {
            flow.send(&d).unwrap();
        }
    });
    let round_trips = |from: u32, n: u32| {
        let mut buf = [0u8; 64];
        for i in from..from + n {
            if i > 0 {
                client.send_to(&i.to_be_bytes(), to).unwrap();
            }
            let (len, _) = client.recv_from(&mut buf).expect("the reader echoes");
            assert_eq!(&buf[..len], &i.to_be_bytes());
        }
    };
    let processed_now = |engine: &Engine| {
        std::thread::sleep(Duration::from_millis(50)); // counters flushed
        let s = engine.stats();
        (processed_on(&s, first), processed_on(&s, reader_cpu))
    };
    round_trips(0, warm);
    let before = processed_now(&engine);
    round_trips(warm, tail);
    let after = processed_now(&engine);
    let learned = engine.shared().desired.lookup(hash) == Some(reader_cpu);
    let rx_hashes = engine.program_stats().unwrap().hash_ok;
    assert_clean_stop(engine);
    reader.join().unwrap();
    Followed {
        key,
        hash,
        first,
        reader: reader_cpu,
        tail: (after.0 - before.0, after.1 - before.1),
        learned,
        rx_hashes,
    }
}

#[test]
fn each_hasher_is_the_one_dispatchers_and_flows_agree_on() {
    // The NIC's Toeplitz hash (the common key), and steer's keyed hash in
    // its symmetric mode: the flow records under the hash the dispatcher
    // steers by, so its packets follow the reader's CPU.
    let toeplitz = ToeplitzHasher::default();
    let keyed_sym = KeyedHasher::random().symmetric(true);
    let cases: [(AnyHasher, &str); 2] = [
        (toeplitz.clone().into(), "toeplitz"),
        (keyed_sym.clone().into(), "keyed symmetric"),
    ];
    for (hasher, what) in cases {
        let net = TestNet::new();
        let want = hasher.clone();
        let f = follow_the_reader(&net, Engine::builder(&net.host).hasher(hasher), 50, 100);
        assert_eq!(f.hash, want.hash(&f.key), "{what}: the flow's hash");
        assert!(f.learned, "{what}: reader CPU {} not learned", f.reader);
        assert_eq!(
            f.tail,
            (0, 100),
            "{what}: the tail ran on the reader's CPU {} (first CPU {})",
            f.reader,
            f.first
        );
    }
    // The symmetric hash does not depend on the direction.
    let key = FlowKey {
        addrs: steer_core::flow::FlowAddrs::V4 {
            src: [198, 18, 0, 2].into(),
            dst: [198, 18, 0, 1].into(),
        },
        protocol: 17,
        ports: Some(steer_core::flow::Ports {
            src: 40000,
            dst: PORT,
        }),
    };
    assert_eq!(keyed_sym.hash(&key), keyed_sym.hash(&key.reversed()));
    assert_ne!(toeplitz.hash(&key), keyed_sym.hash(&key));
}

#[test]
fn with_the_receive_hash_on_flows_learn_under_the_nics_hash() {
    // veth gives XDP programs the skb's hash (a 5-tuple one for UDP): the
    // dispatcher steers by it, the flow records under it, and the flow's
    // packets follow its reader.
    let net = TestNet::new();
    let f = follow_the_reader(&net, Engine::builder(&net.host).use_rx_hash(true), 50, 100);
    assert!(
        f.rx_hashes >= 150,
        "the program passed the hash: {}",
        f.rx_hashes
    );
    assert_ne!(
        f.hash,
        AnyHasher::default().hash(&f.key),
        "the flow's hash is the NIC's, not the engine's own"
    );
    assert!(f.learned, "reader CPU {} not learned", f.reader);
    assert_eq!(
        f.tail,
        (0, 100),
        "the tail ran on the reader's CPU {} (first CPU {})",
        f.reader,
        f.first
    );
}
