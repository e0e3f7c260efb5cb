//! The load generator and checker: one thread, pinned, inside the
//! namespace, with an AF_XDP socket per queue of the generator's veth end.
//! It sends N flows (source ports `sport_base..sport_base+N`, spread over the
//! queues), paced by a token bucket or as fast as it can, and checks every
//! reply: per flow sent, answered, lost, duplicated, reordered; latency from
//! the send time in the payload to the arrival time gen_rx stamped in XDP.
//!
//! A phase is warm-up, measurement window, drain. Rates, CPU use (whole
//! machine, /proc/stat sampled at the window's edges) and latency cover the
//! window only (by arrival time); the per-flow counts cover the whole phase,
//! replies included that arrive during the drain. Replies of an earlier
//! phase carry another tag and are counted as stale, never as answers.
//!
//! At a fixed rate the thread sleeps between ticks (absolute sleeps,
//! 1 ns timer slack), so what it costs stays small and the same for every
//! server; at `max` it never sleeps.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;
use steer_xdp::{object::XdpObject, BindMode, Frame, PortConfig, QueueSocket};

use crate::{
    cpustat::{self, CpuUse},
    flows::{FlowBook, FlowCounts, Verdict},
    pacing::{self, ahead_of_share, Arrivals, TokenBucket, Weights},
    payload::{parse_reply, Endpoints, Template, FRAME_LEN},
    sys::{current_cpu, mono_ns, sleep_until},
    xdp,
};

/// Frames per queue in the generator's UMEM, and its ring size.
const FRAMES_PER_QUEUE: u32 = 8192;
const RING: u32 = 2048;
/// Copy-mode AF_XDP transmits at most 32 frames per kick.
const TX_BATCH: usize = 32;
const RX_BATCH: usize = 64;

/// The generator's fixed setup.
#[derive(Debug, Clone)]
pub struct GenSetup {
    /// The generator's interface (inside the namespace).
    pub interface: String,
    /// Addresses and the server's port.
    pub endpoints: Endpoints,
    /// Number of flows.
    pub flows: u16,
    /// Source port of flow 0.
    pub sport_base: u16,
    /// Flow `f`'s rate is proportional to `weights[f % len]`: each queue
    /// gets the share of the rate its flows' weights add up to, and flow `f`
    /// sends that many requests in a row at its turn (empty: every flow 1,
    /// the same rate).
    pub weights: Vec<u32>,
}

/// One phase.
#[derive(Debug, Clone)]
pub struct PhaseSpec {
    /// Packets per second; `None`: as fast as possible.
    pub rate: Option<f64>,
    /// Sending before the window opens.
    pub warmup: Duration,
    /// The measurement window.
    pub window: Duration,
    /// Waiting for late replies after sending stops.
    pub drain: Duration,
    /// Wake-up period at a fixed rate.
    pub tick: Duration,
    /// Tag written into every request of the phase.
    pub tag: u32,
    /// How requests arrive at a fixed rate: smooth or in bursts.
    pub arrivals: Arrivals,
}

/// Latency percentiles, microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Replies measured.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Latency {
    /// The percentiles of round trips recorded in nanoseconds, in
    /// microseconds; `None` when none was recorded.
    pub fn of(hist: &Histogram<u64>) -> Option<Latency> {
        (!hist.is_empty()).then(|| Latency {
            count: hist.len(),
            p50_us: hist.value_at_quantile(0.5) as f64 / 1e3,
            p99_us: hist.value_at_quantile(0.99) as f64 / 1e3,
            p999_us: hist.value_at_quantile(0.999) as f64 / 1e3,
            max_us: hist.max() as f64 / 1e3,
        })
    }
}

/// What one phase measured.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    /// The rate asked for (pps), `None` for max.
    pub asked_pps: Option<f64>,
    /// Window length, seconds.
    pub window_secs: f64,
    /// Requests sent per second in the window.
    pub offered_pps: f64,
    /// First replies per second in the window (by arrival time).
    pub answered_pps: f64,
    /// Counts over the whole phase, all flows.
    pub total: FlowCounts,
    /// Counts per flow.
    pub per_flow: Vec<FlowCounts>,
    /// Replies of an earlier phase.
    pub stale: u64,
    /// Frames that were not steer-bench replies.
    pub foreign: u64,
    /// Requests built but never sent (tx ring full until the phase ended).
    pub unsent: u64,
    /// Times the generator found no free frame or a full tx ring.
    pub tx_stalls: u64,
    /// Packets of send credit lost while sending because the generator was
    /// held up longer than its bucket holds (a pacing stall).
    pub credit_dropped: u64,
    /// Wake-ups while sending that came over a millisecond late.
    pub late_wakes: u64,
    /// Attempts at this phase (the bench retries a rate not held).
    pub attempts: u32,
    /// Why the asked rate was not held, after the last attempt.
    pub not_held: Option<String>,
    /// Latency of the window's replies.
    pub latency: Option<Latency>,
    /// Whole-machine CPU use in the window.
    pub cpu: CpuUse,
    /// CPU seconds other processes (not this one, not its children, not
    /// kernel threads) used in the window: interference.
    pub foreign_cpu_secs: f64,
    /// Whole-machine busy CPU time per reply in the window, microseconds.
    pub cpu_us_per_reply: Option<f64>,
    /// Whole-machine context switches per reply in the window.
    pub switches_per_reply: Option<f64>,
    /// The server process's threads per reply, over the whole phase (set
    /// by the bench for servers with a process): their context switches,
    /// the voluntary ones (a thread blocked: the hops of the design, not
    /// preemption by other load) and their CPU time (us).
    pub server_switches_per_reply: Option<f64>,
    /// See `server_switches_per_reply`.
    pub server_voluntary_per_reply: Option<f64>,
    /// See `server_switches_per_reply`.
    pub server_cpu_us_per_reply: Option<f64>,
    /// The CPU time of a proxy's backend per reply, us.
    pub backend_cpu_us_per_reply: Option<f64>,
    /// The CPU the generator ran on.
    pub generator_cpu: u32,
}

/// The generator: its XDP program, sockets and request template.
pub struct Generator {
    // Sockets first: closed before the program that redirects to them.
    sockets: Vec<QueueSocket>,
    program: XdpObject,
    template: Template,
    setup: GenSetup,
    pending: Vec<Vec<Frame>>,
}

impl Generator {
    /// Attaches gen_rx and opens the sockets. Call on a thread inside the
    /// namespace.
    pub fn open(setup: GenSetup) -> Result<Self> {
        if setup.flows == 0 || usize::from(setup.flows) > 4096 {
            bail!("--flows must be 1..=4096");
        }
        let mut program = xdp::attach_gen_rx(&setup.interface, setup.endpoints.dst_port)?;
        let queues = steer_xdp::rx_queue_count(&setup.interface)?;
        let mut cfg = PortConfig::new(&setup.interface)
            .frames(FRAMES_PER_QUEUE * queues, RING)
            .bind_mode(BindMode::Copy);
        cfg.need_wakeup = true;
        let sockets = program
            .open_sockets(&cfg, "xsks_map")
            .context("opening the generator's AF_XDP sockets")?;
        let pending = sockets.iter().map(|_| Vec::new()).collect();
        Ok(Generator {
            sockets,
            program,
            template: Template::new(&setup.endpoints),
            setup,
            pending,
        })
    }

    /// gen_rx's counters: (redirected, passed, failed).
    pub fn program_stats(&self) -> Result<(u64, u64, u64)> {
        xdp::stats(&self.program)
    }

    /// Runs one phase. `stop` ends it early (Ctrl-C): an error then.
    pub fn run(&mut self, spec: &PhaseSpec, stop: &AtomicBool) -> Result<PhaseResult> {
        let nflows = usize::from(self.setup.flows);
        let nsock = self.sockets.len();
        let mut books = vec![FlowBook::default(); nflows];
        let mut weights = Weights::new(&self.setup.weights, nflows, nsock);
        let share = weights.shares();
        let mut sent_by = vec![0u64; nsock];
        let mut sent_all = 0u64;
        let mut hist =
            Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).context("latency histogram")?;
        let tick = spec.tick.as_nanos().max(1_000) as u64;
        let cap = pacing::catch_up(spec.rate, TX_BATCH as u64, spec.arrivals);
        let t0 = mono_ns();
        let mut bucket = TokenBucket::with_arrivals(spec.rate, cap, t0, spec.arrivals);
        let mut late_wakes = 0u64;
        let mut dropped_at_win = (0u64, 0u64);
        let win_start = t0 + spec.warmup.as_nanos() as u64;
        let win_end = win_start + spec.window.as_nanos() as u64;
        let drain_end = win_end + spec.drain.as_nanos() as u64;
        let (mut cpu_a, mut cpu_b) = (None, None);
        let (mut sent_w, mut answered_w) = (0u64, 0u64);
        let (mut stale, mut foreign, mut stalls) = (0u64, 0u64, 0u64);
        let mut txf: Vec<Frame> = Vec::with_capacity(TX_BATCH);
        let mut rxf: Vec<Frame> = Vec::with_capacity(RX_BATCH);
        let mut buf = [0u8; FRAME_LEN];
        let mut next_wake = t0;
        let mut rr = 0usize;
        loop {
            if stop.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            let now = mono_ns();
            if cpu_a.is_none() && now >= win_start {
                cpu_a = Some((cpustat::sample()?, cpustat::foreign_cpu_secs()));
                dropped_at_win.0 = bucket.dropped();
            }
            if cpu_b.is_none() && now >= win_end {
                cpu_b = Some((cpustat::sample()?, cpustat::foreign_cpu_secs()));
                dropped_at_win.1 = bucket.dropped();
            }
            if now >= drain_end {
                break;
            }
            // Send.
            let sending = now < win_end;
            let mut budget = if sending { bucket.available(now) } else { 0 };
            let mut spent = 0u64;
            rr += 1;
            for i in 0..nsock {
                let s = (rr + i) % nsock;
                let sock = &mut self.sockets[s];
                // Frames a full tx ring left behind go first.
                if !self.pending[s].is_empty() {
                    let _ = sock.send(&mut self.pending[s]);
                    if !self.pending[s].is_empty() {
                        stalls += 1;
                        continue;
                    }
                }
                if budget == 0 || s >= nflows {
                    continue;
                }
                let want = (budget as usize).min(TX_BATCH);
                if ahead_of_share(share.get(s).copied(), sent_by[s], sent_all, want as u64) {
                    continue;
                }
                txf.clear();
                let got = sock.alloc(want, &mut txf);
                if got < want {
                    stalls += 1;
                    sock.complete();
                }
                if got == 0 {
                    continue;
                }
                let ts = mono_ns();
                for f in txf.iter_mut() {
                    let flow = weights.next_flow(s);
                    let seq = books[flow].next_seq();
                    self.template.fill(
                        &mut buf,
                        self.setup.sport_base + flow as u16,
                        flow as u32,
                        seq,
                        spec.tag,
                        ts,
                    );
                    sock.write(f, &buf);
                }
                let _ = sock.send(&mut txf);
                if !txf.is_empty() {
                    stalls += 1;
                    self.pending[s].append(&mut txf);
                }
                if (win_start..win_end).contains(&ts) {
                    sent_w += got as u64;
                }
                spent += got as u64;
                budget -= got as u64;
                sent_by[s] += got as u64;
                sent_all += got as u64;
            }
            bucket.spend(spent);
            // Receive and check.
            for s in 0..nsock {
                loop {
                    rxf.clear();
                    let n = self.sockets[s].recv(&mut rxf, RX_BATCH).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    for f in &rxf {
                        let Some(r) = parse_reply(self.sockets[s].data(f)) else {
                            foreign += 1;
                            continue;
                        };
                        if r.tag != spec.tag || r.flow as usize >= nflows {
                            stale += 1;
                            continue;
                        }
                        let v = books[r.flow as usize].reply_at(r.seq, r.rx_ns);
                        let first = matches!(v, Verdict::InOrder | Verdict::Reordered);
                        if first && (win_start..win_end).contains(&r.rx_ns) {
                            answered_w += 1;
                            if r.rx_ns > r.tx_ns {
                                let _ = hist.record(r.rx_ns - r.tx_ns);
                            }
                        }
                    }
                    // Back to the socket with the fewest free frames.
                    let home = (0..nsock)
                        .min_by_key(|&i| self.sockets[i].free_frames())
                        .unwrap_or(s);
                    self.sockets[home].recycle(rxf.drain(..));
                    if n < RX_BATCH {
                        break;
                    }
                }
                self.sockets[s].complete();
            }
            // Sleep to the next tick at a fixed rate once nothing is owed
            // (a generator behind catches up first), and while draining.
            if pacing::sleep_after_pass(spec.rate.is_some(), sending, budget, spent) {
                next_wake = pacing::next_wake(next_wake, now, tick);
                sleep_until(next_wake);
                let woke = mono_ns();
                if sending && woke > next_wake + 1_000_000 && (win_start..win_end).contains(&woke) {
                    late_wakes += 1;
                }
            }
        }
        let mut unsent = 0;
        for (s, p) in self.pending.iter_mut().enumerate() {
            unsent += p.len() as u64;
            self.sockets[s].recycle(p.drain(..));
        }
        let (Some(a), Some(b)) = (cpu_a, cpu_b) else {
            bail!("the phase ended before its window");
        };
        let window_secs = spec.window.as_secs_f64();
        let cpu = cpustat::delta(&a.0, &b.0, cpustat::ticks_per_sec());
        let foreign_cpu_secs = (b.1 - a.1).max(0.0);
        let per_flow: Vec<FlowCounts> = books.iter().map(FlowBook::counts).collect();
        let mut total = FlowCounts::default();
        for c in &per_flow {
            total += *c;
        }
        total.lost = total.lost.saturating_sub(unsent);
        let latency = Latency::of(&hist);
        Ok(PhaseResult {
            asked_pps: spec.rate,
            window_secs,
            offered_pps: sent_w as f64 / window_secs,
            answered_pps: answered_w as f64 / window_secs,
            cpu_us_per_reply: (answered_w > 0).then(|| cpu.busy_secs * 1e6 / answered_w as f64),
            switches_per_reply: (answered_w > 0)
                .then(|| cpu.context_switches as f64 / answered_w as f64),
            server_switches_per_reply: None,
            server_voluntary_per_reply: None,
            server_cpu_us_per_reply: None,
            backend_cpu_us_per_reply: None,
            total,
            per_flow,
            stale,
            foreign,
            unsent,
            tx_stalls: stalls,
            credit_dropped: dropped_at_win.1.saturating_sub(dropped_at_win.0),
            late_wakes,
            attempts: 1,
            not_held: None,
            latency,
            cpu,
            foreign_cpu_secs,
            generator_cpu: current_cpu(),
        })
    }
}

/// A phase result for other modules' tests: `asked` and `offered` rates,
/// every reply answered, the CPUs' busy shares, the rest zero.
#[cfg(test)]
pub(crate) fn test_phase(asked: Option<f64>, offered: f64, busy: &[f64]) -> PhaseResult {
    PhaseResult {
        asked_pps: asked,
        window_secs: 1.0,
        offered_pps: offered,
        answered_pps: offered,
        total: FlowCounts::default(),
        per_flow: Vec::new(),
        stale: 0,
        foreign: 0,
        unsent: 0,
        tx_stalls: 0,
        credit_dropped: 0,
        late_wakes: 0,
        attempts: 1,
        not_held: None,
        latency: None,
        cpu: CpuUse {
            busy_secs: busy.iter().sum(),
            per_cpu_busy: busy.to_vec(),
            per_cpu_softirq: vec![0.0; busy.len()],
            context_switches: 0,
        },
        foreign_cpu_secs: 0.0,
        cpu_us_per_reply: None,
        switches_per_reply: None,
        server_switches_per_reply: None,
        server_voluntary_per_reply: None,
        server_cpu_us_per_reply: None,
        backend_cpu_us_per_reply: None,
        generator_cpu: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_in_microseconds() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        assert!(Latency::of(&h).is_none());
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let l = Latency::of(&h).unwrap();
        assert_eq!(l.count, 1000);
        // Three significant digits: within 0.1%.
        for (got, want) in [
            (l.p50_us, 500.0),
            (l.p99_us, 990.0),
            (l.p999_us, 999.0),
            (l.max_us, 1000.0),
        ] {
            assert!((got - want).abs() <= want * 1e-3, "{got} vs {want}");
        }
    }
}
