//! The sweeper's walk of the RFS program's state map: `tracked` reads it
//! with batch lookups (`BPF_MAP_LOOKUP_BATCH`, thousands of flows a system
//! call) and must return exactly what the key-by-key walk returns, every
//! tracked flow once with its state, IPv4 and IPv6 alike, and nothing
//! forgotten. Needs root.

mod support;

use std::collections::HashSet;
use std::time::Instant;

use steer_kernel::{KernelSteering, Proto};
use steer_xdp::FlowMapKey;
use support::Pair;

const PORT: u16 = 7120;

fn flow(i: u32) -> FlowMapKey {
    let (a, b) = ((i >> 8) as u8, i as u8);
    let src = if i.is_multiple_of(3) {
        format!("[fd00:78::{:x}]:{}", i, 1024 + i % 50_000)
    } else {
        format!("10.78.{a}.{b}:{}", 1024 + i % 50_000)
    };
    let dst = if i.is_multiple_of(3) {
        format!("[fd00:78::1]:{PORT}")
    } else {
        format!("10.77.0.1:{PORT}")
    };
    FlowMapKey::new(Proto::Udp, src.parse().unwrap(), dst.parse().unwrap())
}

#[test]
fn the_batch_walk_returns_every_tracked_flow_once_as_the_key_walk_does() {
    let pair = Pair::new();
    let dev = pair.srv_dev.clone();
    let steering = Pair::in_ns(&pair.srv_ns, move || {
        KernelSteering::builder(&dev)
            .own(Proto::Udp, PORT)
            .start()
            .unwrap()
    });
    let program = steering.program().unwrap();
    const FLOWS: u32 = 20_000;
    for i in 0..FLOWS {
        program.track(&flow(i)).unwrap();
    }
    for i in (0..FLOWS).step_by(7) {
        program.steer(&flow(i), 1).unwrap();
    }

    let t = Instant::now();
    let batch = program.tracked().unwrap();
    let batch_time = t.elapsed();
    let t = Instant::now();
    let walk = program.tracked_by_keys().unwrap();
    let walk_time = t.elapsed();
    eprintln!("{FLOWS} flows: batch {batch_time:?}, key by key {walk_time:?}");

    let want: HashSet<FlowMapKey> = (0..FLOWS).map(flow).collect();
    let got: HashSet<FlowMapKey> = batch.iter().map(|(k, _)| *k).collect();
    assert_eq!(batch.len(), FLOWS as usize, "a flow read twice or missed");
    assert_eq!(got, want);
    let mut batch = batch;
    let mut walk = walk;
    let order =
        |a: &(FlowMapKey, _), b: &(FlowMapKey, _)| format!("{:?}", a.0).cmp(&format!("{:?}", b.0));
    batch.sort_by(order);
    walk.sort_by(order);
    assert_eq!(batch, walk, "the two walks disagree on a state");
    assert!(batch.iter().all(|(_, s)| s.cpu.is_none() && s.seen == 0));

    // Forgotten flows are gone from the next walk.
    for i in (0..FLOWS).filter(|i| i.is_multiple_of(2)) {
        program.forget(&flow(i)).unwrap();
    }
    let left: HashSet<FlowMapKey> = program
        .tracked()
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let want: HashSet<FlowMapKey> = (0..FLOWS).filter(|i| i % 2 == 1).map(flow).collect();
    assert_eq!(left, want);
}
