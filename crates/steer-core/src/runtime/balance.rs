//! The load balancer's thread: off the hot path, once per interval while the
//! balancer is on, it turns the workers' busy time and packet counters and
//! each rx queue's per-bucket counts into a [`Round`], asks the
//! [`Balancer`] for moves and writes them as bucket assignments; the
//! dispatchers carry them out through the rx-queue tables' `last_qtail` rule.
//!
//! Invariants: the thread only reads counters and writes assignments (never
//! a flow table, never a ring); while the balancer is off it sleeps until
//! switched on, and switching it off drops every assignment (flows go back
//! to plain RPS, through `last_qtail` like any move); an assignment to a
//! CPU that went offline is dropped at the next round.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::balance::{
    unit_bucket, unit_id, BalanceConfig, Balancer, BucketLoads, Round, UnitSample, WorkerSample,
};
use crate::cpu::{CpuId, CpuSet};
use crate::dispatch::Shared;

/// The running balancer thread.
pub(super) struct BalancerThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl BalancerThread {
    /// Starts the thread for the workers on `cpus`.
    pub(super) fn start(
        shared: Shared,
        cpus: CpuSet,
        cfg: BalanceConfig,
        interval: Duration,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Loop {
            balancer: Balancer::new(cfg),
            cpus: cpus.iter().collect(),
            interval: interval.max(Duration::from_micros(100)),
            shared,
            workers: HashMap::new(),
            units: HashMap::new(),
            last: Instant::now(),
            running: false,
        };
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("steer-balancer".into())
            .spawn(move || state.run(&flag))?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops and joins the thread.
    pub(super) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for BalancerThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread's state.
struct Loop {
    shared: Shared,
    cpus: Vec<CpuId>,
    balancer: Balancer,
    interval: Duration,
    /// Per worker CPU: busy ns and packets handled, as last read.
    workers: HashMap<CpuId, (u64, u64)>,
    /// Per rx queue: its loads and each bucket's count as last read.
    units: HashMap<u32, (Arc<BucketLoads>, Vec<u64>)>,
    last: Instant,
    running: bool,
}

impl Loop {
    fn run(mut self, stop: &AtomicBool) {
        self.shared.balance.set_waker(Some(std::thread::current()));
        while !stop.load(Ordering::SeqCst) {
            if !self.shared.balance.is_on() {
                if self.running {
                    self.switch_off();
                }
                std::thread::park();
                continue;
            }
            if self.running {
                self.round();
            } else {
                self.baseline();
                self.running = true;
            }
            std::thread::park_timeout(self.interval);
        }
        self.shared.balance.set_waker(None);
    }

    /// Switched off: every assignment goes, the history too.
    fn switch_off(&mut self) {
        let mut released = 0;
        for t in self.shared.balance.tables() {
            released += t.clear_all() as u64;
        }
        self.shared.balance.count_released(released);
        self.balancer.reset();
        self.workers.clear();
        self.units.clear();
        self.running = false;
    }

    /// Reads every counter so the first round measures from now.
    fn baseline(&mut self) {
        self.last = Instant::now();
        self.read_workers();
        self.read_units();
    }

    /// Each usable worker's busy time and packets since the last read.
    fn read_workers(&mut self) -> Vec<WorkerSample> {
        let snap = self.shared.stats.snapshot();
        let mut out = Vec::with_capacity(self.cpus.len());
        for &cpu in &self.cpus {
            let Some((_, s)) = snap.per_cpu.get(cpu) else {
                continue;
            };
            let now = (s.busy_ns, s.processed);
            let before = self.workers.insert(cpu, now);
            if !self.shared.layout.is_online(cpu) {
                continue;
            }
            if let Some((busy, packets)) = before {
                out.push(WorkerSample {
                    cpu,
                    busy_ns: now.0.saturating_sub(busy),
                    packets: now.1.saturating_sub(packets),
                });
            }
        }
        out
    }

    /// Each bucket's packets since the last read, and the CPU they went
    /// to; assignments to CPUs that went offline are dropped.
    fn read_units(&mut self) -> Vec<UnitSample> {
        let layout = &self.shared.layout;
        let mut out = Vec::new();
        let mut released = 0;
        for t in self.shared.balance.tables() {
            let rxq = t.rxq();
            let fresh = self
                .units
                .get(&rxq)
                .is_none_or(|(known, _)| !Arc::ptr_eq(known, &t));
            if fresh {
                let counts = (0..t.len()).map(|b| t.seen(b).0).collect();
                self.units.insert(rxq, (t, counts));
                continue;
            }
            let Some((_, counts)) = self.units.get_mut(&rxq) else {
                continue;
            };
            for (b, before) in counts.iter_mut().enumerate() {
                if t.assigned(b).is_some_and(|c| !layout.is_online(c)) {
                    t.clear(b);
                    released += 1;
                }
                let (count, cpu) = t.seen(b);
                let packets = BucketLoads::delta(count, *before);
                *before = count;
                if let (true, Some(cpu)) = (packets > 0, cpu) {
                    out.push(UnitSample {
                        id: unit_id(rxq, b),
                        cpu,
                        packets,
                        movable: true,
                    });
                }
            }
        }
        self.shared.balance.count_released(released);
        out
    }

    fn round(&mut self) {
        let now = Instant::now();
        let interval_ns =
            u64::try_from(now.saturating_duration_since(self.last).as_nanos()).unwrap_or(u64::MAX);
        self.last = now;
        let workers = self.read_workers();
        let units = self.read_units();
        let plan = self.balancer.plan(
            &Round {
                interval_ns,
                workers: &workers,
                units: &units,
            },
            &self.shared.layout,
        );
        let table = |rxq: u32| self.units.get(&rxq).map(|(t, _)| Arc::clone(t));
        for mv in &plan.moves {
            let (rxq, bucket) = unit_bucket(mv.unit);
            if let Some(t) = table(rxq) {
                t.assign(bucket, mv.to);
                self.shared.balance.count_move(mv.reason);
            }
        }
        let mut released = 0;
        for &unit in &plan.forgotten {
            let (rxq, bucket) = unit_bucket(unit);
            if let Some(t) = table(rxq).filter(|t| t.assigned(bucket).is_some()) {
                t.clear(bucket);
                released += 1;
            }
        }
        self.shared.balance.count_released(released);
        let ratio = if plan.mean > 0.0 {
            plan.max / plan.mean
        } else {
            1.0
        };
        self.shared
            .balance
            .count_round(plan.elephants.len(), (ratio * 1000.0).round() as u64);
    }
}
