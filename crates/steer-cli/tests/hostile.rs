//! `steer proxy` in front of hostile traffic, end to end: a sprayer in a
//! namespace opens new flows from random sources at thousands a second
//! while a well-behaved client sends its requests; the proxy runs with its
//! defaults under `ulimit -n` (prlimit). It must stay up, answer the
//! client, and keep descriptors and memory within bounds, shedding the
//! spray (refused or evicted flows, counted). The spray is shorter than
//! the benchmark's (steer-bench hostile, benches/README.md) to keep CI
//! quick; the bounds are the same. The latency bound runs against release
//! builds only (ci/test.sh runs this file with `--release`). Needs root, as
//! CI runs it.

use std::path::PathBuf;

use steer_bench::hostile::{self, HostileConfig, HostileResult, ProxyKind};

/// Seconds of spray in CI (the benchmark runs 10).
const SECS: f64 = 4.0;

/// The client's p99 during a 20k new flows/s spray must stay under this: a
/// collapse bound, not the speed target. steer holds 25-27 ms on a quiet
/// machine and 85 ms was seen with a compiler running beside it; the plain
/// tokio proxy shows 550-660 ms. The tail itself is measured, in
/// interleaved runs, by `steer-bench hostile` (benches/README.md).
const TAIL_BOUND_US: f64 = 300_000.0;

/// The test bed is named after the process: one run at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(nofile: u64, rate: u32) -> HostileResult {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let r = hostile::run(&HostileConfig {
        steer_bin: PathBuf::from(env!("CARGO_BIN_EXE_steer")),
        proxy: ProxyKind::Steer,
        nofile,
        spray_rate: rate,
        spray_sources: 0,
        secs: SECS,
        requests: 50,
        proxy_args: Vec::new(),
        pin: None,
        log_dir: std::env::temp_dir().join(format!("steer-hostile-test-{}", std::process::id())),
    })
    .expect("the hostile run completes");
    eprintln!("{}", hostile::table(std::slice::from_ref(&r)));
    r
}

fn assert_survived(r: &HostileResult, max_rss_mib: f64) {
    let why = format!("{r:#?}");
    assert!(r.alive, "the proxy died under the spray: {}", r.log_tail);
    assert_eq!(r.exit_code, 0, "the proxy did not quit cleanly: {why}");
    assert!(
        r.sprayed as f64 >= 0.8 * f64::from(r.spray_rate) * r.secs,
        "the sprayer fell short: {why}"
    );
    assert!(r.baseline.answered >= 49, "baseline: {why}");
    assert!(
        r.spray.answered >= 49,
        "the client got {}/50 answers during the spray: {why}",
        r.spray.answered
    );
    assert!(
        r.max_fds <= r.nofile,
        "{} descriptors open under a limit of {}",
        r.max_fds,
        r.nofile
    );
    assert!(
        r.max_rss_mib <= max_rss_mib,
        "RSS {:.0} MiB, bound {max_rss_mib} MiB: {why}",
        r.max_rss_mib
    );
    assert!(r.shed() > 0, "nothing was refused or evicted: {why}");
    assert!(
        r.flows("open") <= r.flows("max_flows"),
        "more flows open than the budget: {why}"
    );
}

#[test]
fn under_ulimit_1024_a_spray_of_new_flows_is_shed_and_the_client_answered() {
    let r = run(1024, 5_000);
    assert_survived(&r, 256.0);
    // The budget fills within the first second: from then on the spray's
    // first datagrams drop in the XDP program, before the proxy sees them.
    assert!(
        r.flows("gate_dropped") > 0 && r.flows("gate_closings") > 0,
        "the XDP gate never closed: {r:#?}"
    );
    // A client that comes once the budget is full loses its first try at
    // the gate and gets in on a retry.
    assert!(
        r.late.answered + 2 >= r.late.sent,
        "the client that came mid-spray got {}/{} answers: {r:#?}",
        r.late.answered,
        r.late.sent
    );
    assert!(
        r.flows("max_flows") < 1024,
        "the derived budget ignores the descriptor limit"
    );
}

/// A speed bound: run against an optimized proxy (`cargo test --release
/// -p flowsteer-cli --test hostile`, as ci/test.sh does); a debug build's
/// proxy is ten times slower per flow and says nothing about the tail.
///
/// The bound catches a collapse (the plain proxy's half second), not a
/// noisy machine: the client's worst requests fall in the second in which
/// the spray fills the budget and evictions begin.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "a speed bound: run with --release (ci/test.sh does)"
)]
fn a_fast_spray_keeps_the_clients_tail_far_from_collapse() {
    let r = run(20_000, 20_000);
    assert_survived(&r, 512.0);
    assert!(
        r.spray.p99_us <= TAIL_BOUND_US,
        "client p99 {:.0} us during the spray (alone {:.0} us): {r:#?}",
        r.spray.p99_us,
        r.baseline.p99_us
    );
}
