//! [`Balancer`]: the decision of which flow buckets to move from the most
//! loaded workers to the least loaded ones, from one round's measurements
//! (see the [`balance`](super) module docs for the rule and its invariants).

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::Serialize;

use crate::cpu::{CpuId, CpuLayout};

/// Identifies one unit the balancer may move: in the engine an rx queue's
/// flow-table bucket ([`unit_id`]), in a model whatever the caller chooses.
pub type UnitId = u64;

/// The unit id of bucket `bucket` of rx queue `rxq`'s flow table.
///
/// ```
/// use steer_core::balance::{unit_bucket, unit_id};
/// assert_eq!(unit_bucket(unit_id(3, 17)), (3, 17));
/// ```
#[inline]
pub fn unit_id(rxq: u32, bucket: usize) -> UnitId {
    (u64::from(rxq) << 32) | (bucket as u64 & 0xffff_ffff)
}

/// The rx queue and bucket of a [`unit_id`].
#[inline]
pub fn unit_bucket(id: UnitId) -> (u32, usize) {
    ((id >> 32) as u32, (id & 0xffff_ffff) as usize)
}

/// The balancer's knobs. The defaults are what the model was tuned with
/// (`docs/balancer.md`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BalanceConfig {
    /// Act only when the most loaded worker is above the mean by more than
    /// this fraction (0.05: 5 % above the mean); the hysteresis band.
    pub trigger: f64,
    /// A move must lower the larger of the two workers' loads by at least
    /// this fraction of the mean load (moves that only chase noise are not
    /// worth a steering update).
    pub min_gain: f64,
    /// At most this many moves per round.
    pub max_moves: usize,
    /// A unit that moved stays where it went for this many rounds (no
    /// ping-pong).
    pub cooldown_rounds: u32,
    /// A worker that gave or took a unit is neither a source nor a target
    /// for this many rounds, until its measured load shows the move.
    pub settle_rounds: u32,
    /// Below this mean worker load (fraction of a CPU) the system is idle:
    /// nothing moves.
    pub idle_load: f64,
    /// Weight of the newest round in the smoothed loads (1: no smoothing).
    pub smoothing: f64,
    /// A target behind the source's LLC is taken when its move gains at
    /// least this fraction of the best move to any target.
    pub llc_slack: f64,
    /// A unit with no packets for this many rounds is forgotten (its
    /// assignment is dropped by the caller).
    pub forget_rounds: u32,
}

impl Default for BalanceConfig {
    fn default() -> Self {
        Self {
            trigger: 0.05,
            min_gain: 0.002,
            max_moves: 32,
            cooldown_rounds: 200,
            settle_rounds: 2,
            idle_load: 0.02,
            smoothing: 0.2,
            llc_slack: 0.5,
            forget_rounds: 2_000,
        }
    }
}

/// One worker's measurements over a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerSample {
    /// The worker's CPU.
    pub cpu: CpuId,
    /// Time it spent working (ns) during the round.
    pub busy_ns: u64,
    /// Packets it handled during the round (every packet, movable or not).
    pub packets: u64,
}

/// One unit's measurements over a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitSample {
    /// The unit.
    pub id: UnitId,
    /// The CPU its packets went to.
    pub cpu: CpuId,
    /// Its packets during the round.
    pub packets: u64,
    /// Whether the balancer may move it (false for explicit pins and flows
    /// with a recorded application CPU).
    pub movable: bool,
}

/// What one round measured.
#[derive(Debug, Clone, Copy)]
pub struct Round<'a> {
    /// The round's length (ns).
    pub interval_ns: u64,
    /// Every usable worker (a unit on a CPU not listed is left alone).
    pub workers: &'a [WorkerSample],
    /// The units seen (a unit missing from a round had no packets).
    pub units: &'a [UnitSample],
}

/// Why a unit moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveReason {
    /// Off an overloaded worker, to a worker behind the same LLC.
    SameLlc,
    /// Off an overloaded worker, to a worker behind another LLC (none of
    /// its own LLC had the room).
    CrossLlc,
}

impl MoveReason {
    /// Every reason.
    pub const ALL: [Self; 2] = [Self::SameLlc, Self::CrossLlc];

    /// Snake-case name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::SameLlc => "same_llc",
            Self::CrossLlc => "cross_llc",
        }
    }
}

impl fmt::Display for MoveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A move the balancer decided.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Move {
    /// The unit.
    pub unit: UnitId,
    /// The CPU it is on.
    pub from: CpuId,
    /// The CPU it goes to.
    pub to: CpuId,
    /// Its estimated load (fraction of a CPU).
    pub load: f64,
    /// Why.
    pub reason: MoveReason,
}

/// A unit that alone carries at least a worker's fair share (the mean
/// load): no placement brings its worker below it. It stays where it is,
/// and the balancer moves the other units off its worker instead; it only
/// moves itself when that lowers the hot spot by four times the band (two
/// elephants on one worker, one to an idle worker).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Elephant {
    /// The unit.
    pub unit: UnitId,
    /// Its CPU.
    pub cpu: CpuId,
    /// Its estimated load (fraction of a CPU).
    pub load: f64,
}

/// The state of the system as the balancer saw it in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Mean load below [`BalanceConfig::idle_load`]: nothing to do.
    Idle,
    /// Every worker within the band: nothing to do.
    Balanced,
    /// Some worker above the band: moves were looked for.
    Unbalanced,
}

/// What [`Balancer::plan`] decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The moves, in the order decided.
    pub moves: Vec<Move>,
    /// Movable units that alone carry at least the mean load, left in place
    /// this round.
    pub elephants: Vec<Elephant>,
    /// Units idle for [`BalanceConfig::forget_rounds`]: drop their assignment.
    pub forgotten: Vec<UnitId>,
    /// Mean worker load (smoothed, fraction of a CPU) before the moves.
    pub mean: f64,
    /// Largest worker load (smoothed) before the moves.
    pub max: f64,
    /// What the round found.
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Copy)]
struct WorkerState {
    /// Smoothed busy time per round (ns).
    busy: f64,
    /// Smoothed packets per round.
    packets: f64,
    /// No move from or to it before this round.
    settle_until: u64,
}

#[derive(Debug, Clone, Copy)]
struct UnitState {
    /// Smoothed packets per round.
    packets: f64,
    cpu: CpuId,
    movable: bool,
    /// Not moved again before this round.
    cooldown_until: u64,
    /// Last round with packets.
    last_active: u64,
    /// Whether the unit was in this round's samples.
    seen: bool,
}

/// The balancer: smoothed per-worker and per-unit loads across rounds, and
/// the greedy rule that moves the fewest units (see the module docs).
///
/// ```
/// use steer_core::balance::{BalanceConfig, Balancer, Round, UnitSample, WorkerSample};
/// use steer_core::cpu::CpuLayout;
///
/// let layout = CpuLayout::uniform(2, 2).unwrap();
/// let mut b = Balancer::new(BalanceConfig { smoothing: 1.0, ..Default::default() });
/// // CPU 0 is 90 % busy with units 1, 2 and 3 (450, 300 and 150 packets),
/// // CPU 1 is 10 % busy: 1 us per packet on both.
/// let workers = [
///     WorkerSample { cpu: 0, busy_ns: 900_000, packets: 900 },
///     WorkerSample { cpu: 1, busy_ns: 100_000, packets: 100 },
/// ];
/// let units = [
///     UnitSample { id: 1, cpu: 0, packets: 450, movable: true },
///     UnitSample { id: 2, cpu: 0, packets: 300, movable: true },
///     UnitSample { id: 3, cpu: 1, packets: 100, movable: true },
///     UnitSample { id: 4, cpu: 0, packets: 150, movable: true },
/// ];
/// let plan = b.plan(&Round { interval_ns: 1_000_000, workers: &workers, units: &units }, &layout);
/// // Moving unit 2 (30 %) leaves 60 % / 40 %; unit 1 (45 %) would overload
/// // CPU 1, unit 4 (15 %) gains less.
/// assert_eq!(plan.moves.len(), 1);
/// assert_eq!((plan.moves[0].unit, plan.moves[0].from, plan.moves[0].to), (2, 0, 1));
/// ```
#[derive(Debug, Clone)]
pub struct Balancer {
    cfg: BalanceConfig,
    round: u64,
    workers: HashMap<CpuId, WorkerState>,
    units: HashMap<UnitId, UnitState>,
}

impl Balancer {
    /// A balancer with no history.
    pub fn new(cfg: BalanceConfig) -> Self {
        Self {
            cfg,
            round: 0,
            workers: HashMap::new(),
            units: HashMap::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &BalanceConfig {
        &self.cfg
    }

    /// Rounds planned so far.
    pub fn rounds(&self) -> u64 {
        self.round
    }

    /// Forgets every unit and worker (after the balancer was switched off).
    pub fn reset(&mut self) {
        self.workers.clear();
        self.units.clear();
    }

    fn smooth(&self, old: Option<f64>, new: f64) -> f64 {
        let a = self.cfg.smoothing.clamp(0.0, 1.0);
        match old {
            Some(old) => old + a * (new - old),
            None => new,
        }
    }

    /// Takes one round's measurements and decides the moves. Deterministic:
    /// the same rounds in the same order give the same plans (ties go to
    /// the lower CPU and to the unit listed first).
    pub fn plan(&mut self, round: &Round<'_>, layout: &CpuLayout) -> Plan {
        self.round += 1;
        let now = self.round;
        let interval = round.interval_ns.max(1) as f64;

        // Smoothed worker loads; workers not listed are gone.
        let listed: HashSet<CpuId> = round.workers.iter().map(|w| w.cpu).collect();
        self.workers.retain(|cpu, _| listed.contains(cpu));
        for w in round.workers {
            let old = self.workers.get(&w.cpu).copied();
            let busy = self.smooth(old.map(|s| s.busy), w.busy_ns as f64);
            let packets = self.smooth(old.map(|s| s.packets), w.packets as f64);
            self.workers.insert(
                w.cpu,
                WorkerState {
                    busy,
                    packets,
                    settle_until: old.map_or(0, |s| s.settle_until),
                },
            );
        }
        // Smoothed unit packets; a unit missing from the round had none.
        for u in self.units.values_mut() {
            u.seen = false;
        }
        for s in round.units {
            let old = self.units.get(&s.id).copied();
            let packets = self.smooth(old.map(|u| u.packets), s.packets as f64);
            let st = UnitState {
                packets,
                cpu: s.cpu,
                movable: s.movable,
                cooldown_until: old.map_or(0, |u| u.cooldown_until),
                last_active: if s.packets > 0 {
                    now
                } else {
                    old.map_or(now, |u| u.last_active)
                },
                seen: true,
            };
            self.units.insert(s.id, st);
        }
        let a = self.cfg.smoothing.clamp(0.0, 1.0);
        let forget = u64::from(self.cfg.forget_rounds.max(1));
        let mut forgotten = Vec::new();
        self.units.retain(|&id, u| {
            if !u.seen {
                u.packets -= a * u.packets;
            }
            let keep = now.saturating_sub(u.last_active) < forget;
            if !keep {
                forgotten.push(id);
            }
            keep
        });
        forgotten.sort_unstable();

        // Loads as fractions of a CPU, in CPU order (deterministic ties).
        let mut cpus: Vec<CpuId> = self.workers.keys().copied().collect();
        cpus.sort_unstable();
        let mut load: HashMap<CpuId, f64> = cpus
            .iter()
            .map(|&c| (c, self.workers[&c].busy / interval))
            .collect();
        let n = cpus.len().max(1) as f64;
        let mean = load.values().sum::<f64>() / n;
        let max = load.values().copied().fold(0.0, f64::max);
        let mut plan = Plan {
            moves: Vec::new(),
            elephants: Vec::new(),
            forgotten,
            mean,
            max,
            verdict: Verdict::Balanced,
        };
        if cpus.is_empty() || mean < self.cfg.idle_load {
            plan.verdict = Verdict::Idle;
            return plan;
        }
        let hi = mean * (1.0 + self.cfg.trigger);
        if max <= hi {
            return plan;
        }
        plan.verdict = Verdict::Unbalanced;

        // Each unit's load: its packets at its worker's mean cost per packet.
        let cost = |cpu: CpuId| -> f64 {
            self.workers
                .get(&cpu)
                .filter(|w| w.packets > 0.0)
                .map_or(0.0, |w| w.busy / w.packets / interval)
        };
        let mut on: HashMap<CpuId, Vec<(UnitId, f64)>> = HashMap::new();
        for s in round.units {
            let Some(u) = self.units.get(&s.id) else {
                continue;
            };
            if !u.movable || !load.contains_key(&u.cpu) {
                continue;
            }
            let l = u.packets * cost(u.cpu);
            if l <= 0.0 {
                continue;
            }
            if l >= mean {
                plan.elephants.push(Elephant {
                    unit: s.id,
                    cpu: u.cpu,
                    load: l,
                });
            }
            if u.cooldown_until > now {
                continue;
            }
            on.entry(u.cpu).or_default().push((s.id, l));
        }
        // Largest first, so the best fit is found by a scan from the top.
        for units in on.values_mut() {
            units.sort_by(|x, y| y.1.total_cmp(&x.1));
        }

        // A target should not end above the mean by more than half the band
        // (no new hot spot); only a move that gains four bands may overfill
        // it (an elephant leaving another one's worker).
        let fit_cap = mean * (1.0 + self.cfg.trigger / 2.0);
        let big_gain = 4.0 * mean * self.cfg.trigger;
        let min_gain = self.cfg.min_gain * mean;
        let settled = |cpu: CpuId, ws: &HashMap<CpuId, WorkerState>| {
            ws.get(&cpu).is_some_and(|w| w.settle_until <= now)
        };
        let mut exhausted: HashSet<CpuId> = HashSet::new();
        let mut touched: HashSet<CpuId> = HashSet::new();
        // A worker that took a unit this round gives none away in it.
        let mut received: HashSet<CpuId> = HashSet::new();
        while plan.moves.len() < self.cfg.max_moves {
            // The most loaded source still worth relieving.
            let Some(h) = cpus
                .iter()
                .copied()
                .filter(|&c| load[&c] > hi && !exhausted.contains(&c) && !received.contains(&c))
                .filter(|&c| settled(c, &self.workers))
                .max_by(|&x, &y| load[&x].total_cmp(&load[&y]).then(y.cmp(&x)))
            else {
                break;
            };
            let units = on.get(&h).map(Vec::as_slice).unwrap_or(&[]);
            let targets: Vec<CpuId> = cpus
                .iter()
                .copied()
                .filter(|&c| c != h && load[&c] < mean && settled(c, &self.workers))
                .collect();
            let coolest = |same: bool| {
                targets
                    .iter()
                    .copied()
                    .filter(|&c| !same || layout.shares_llc(c, h))
                    .min_by(|&x, &y| load[&x].total_cmp(&load[&y]).then(x.cmp(&y)))
            };
            let best = |c: CpuId| best_unit(units, load[&h], load[&c], fit_cap, min_gain, big_gain);
            let same = coolest(true).and_then(|c| best(c).map(|(i, g)| (c, i, g)));
            let any = coolest(false).and_then(|c| best(c).map(|(i, g)| (c, i, g)));
            let chosen = match (same, any) {
                (Some(s), Some(a)) if s.2 >= self.cfg.llc_slack * a.2 => Some(s),
                (Some(s), None) => Some(s),
                (_, a) => a,
            };
            let Some((c, i, _)) = chosen else {
                exhausted.insert(h);
                continue;
            };
            let Some(units) = on.get_mut(&h) else {
                exhausted.insert(h);
                continue;
            };
            let (unit, l) = units.remove(i);
            *load.entry(h).or_default() -= l;
            *load.entry(c).or_default() += l;
            touched.insert(h);
            touched.insert(c);
            received.insert(c);
            if let Some(u) = self.units.get_mut(&unit) {
                u.cpu = c;
                u.cooldown_until = now + u64::from(self.cfg.cooldown_rounds);
            }
            plan.moves.push(Move {
                unit,
                from: h,
                to: c,
                load: l,
                reason: if layout.shares_llc(h, c) {
                    MoveReason::SameLlc
                } else {
                    MoveReason::CrossLlc
                },
            });
        }
        plan.elephants
            .retain(|e| plan.moves.iter().all(|m| m.unit != e.unit));
        // The smoothed loads start from the prediction, and the workers
        // involved wait until their measurements show the moves.
        for cpu in touched {
            if let Some(w) = self.workers.get_mut(&cpu) {
                w.busy = load[&cpu] * interval;
                w.settle_until = now + 1 + u64::from(self.cfg.settle_rounds);
            }
        }
        plan
    }
}

/// The unit of `units` (largest first) whose move from a worker at `from`
/// to one at `to` lowers the larger of the two the most, keeping the target
/// at or below `fit_cap`; when no unit fits, one that overfills the target
/// but still lowers the pair's larger load by `big_gain` (an elephant
/// sharing a worker with another); `None` when no move gains `min_gain`.
fn best_unit(
    units: &[(UnitId, f64)],
    from: f64,
    to: f64,
    fit_cap: f64,
    min_gain: f64,
    big_gain: f64,
) -> Option<(usize, f64)> {
    let gain = |l: f64| from - (from - l).max(to + l);
    let mut best: Option<(usize, f64)> = None;
    for (i, &(_, l)) in units.iter().enumerate() {
        if to + l > fit_cap {
            continue;
        }
        let g = gain(l);
        if g >= min_gain.max(f64::MIN_POSITIVE) && best.is_none_or(|(_, b)| g > b) {
            best = Some((i, g));
        }
        // Units only get smaller from here: once one fits under half the
        // gap, no later one gains more.
        if l <= (from - to) / 2.0 && best.is_some() {
            break;
        }
    }
    if best.is_some() {
        return best;
    }
    units
        .iter()
        .enumerate()
        .map(|(i, &(_, l))| (i, gain(l)))
        .filter(|&(_, g)| g >= big_gain.max(min_gain).max(f64::MIN_POSITIVE))
        .fold(None, |b: Option<(usize, f64)>, (i, g)| match b {
            Some((_, bg)) if bg >= g => b,
            _ => Some((i, g)),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(cpu: CpuId, busy_pct: u64, packets: u64) -> WorkerSample {
        WorkerSample {
            cpu,
            busy_ns: busy_pct * 10_000,
            packets,
        }
    }

    fn u(id: UnitId, cpu: CpuId, packets: u64) -> UnitSample {
        UnitSample {
            id,
            cpu,
            packets,
            movable: true,
        }
    }

    fn raw() -> BalanceConfig {
        BalanceConfig {
            smoothing: 1.0,
            ..Default::default()
        }
    }

    fn plan(b: &mut Balancer, layout: &CpuLayout, ws: &[WorkerSample], us: &[UnitSample]) -> Plan {
        b.plan(
            &Round {
                interval_ns: 1_000_000,
                workers: ws,
                units: us,
            },
            layout,
        )
    }

    #[test]
    fn prefers_a_target_behind_the_same_llc() {
        // LLCs {0,1} and {2,3}; CPU 0 hot, CPU 1 (same LLC) a little cooler
        // than CPU 3, which is the coolest.
        let layout = CpuLayout::uniform(4, 2).unwrap();
        let mut b = Balancer::new(raw());
        let ws = [w(0, 90, 90), w(1, 30, 30), w(2, 50, 50), w(3, 20, 20)];
        let mut us: Vec<UnitSample> = (1..=9).map(|id| u(id, 0, 10)).collect();
        us.push(u(10, 1, 30));
        let p = plan(&mut b, &layout, &ws, &us);
        assert_eq!(p.moves[0].to, 1);
        assert_eq!(p.moves[0].reason, MoveReason::SameLlc);
    }

    #[test]
    fn a_unit_that_moved_cools_down_and_workers_settle() {
        let layout = CpuLayout::uniform(2, 2).unwrap();
        let mut b = Balancer::new(raw());
        let ws = [w(0, 80, 80), w(1, 20, 20)];
        let us = [u(1, 0, 30), u(2, 0, 50), u(3, 1, 20)];
        let p = plan(&mut b, &layout, &ws, &us);
        assert_eq!(p.moves.len(), 1);
        let moved = p.moves[0].unit;
        // The same skew again at once: the workers are settling.
        assert!(plan(&mut b, &layout, &ws, &us).moves.is_empty());
        assert!(plan(&mut b, &layout, &ws, &us).moves.is_empty());
        // Later, with the unit now on CPU 1 and CPU 1 hot, it stays put.
        let ws = [w(0, 20, 20), w(1, 80, 80)];
        let us2 = [u(1, 1, 30), u(2, 0, 20), u(3, 1, 25), u(4, 1, 25)];
        assert_eq!(moved, 1);
        for _ in 0..5 {
            let p = plan(&mut b, &layout, &ws, &us2);
            assert!(p.moves.iter().all(|m| m.unit != moved), "{p:?}");
        }
    }

    #[test]
    fn an_elephant_stays_and_the_rest_leave_its_worker() {
        let layout = CpuLayout::uniform(2, 2).unwrap();
        let mut b = Balancer::new(raw());
        // Unit 1 alone is 70 % of CPU 0; the mean is 50 %.
        let ws = [w(0, 90, 90), w(1, 10, 10)];
        let us = [u(1, 0, 70), u(2, 0, 20), u(3, 1, 10)];
        let p = plan(&mut b, &layout, &ws, &us);
        assert_eq!(p.elephants.len(), 1);
        assert_eq!(p.elephants[0].unit, 1);
        assert_eq!(p.moves.len(), 1);
        assert_eq!(p.moves[0].unit, 2);
    }

    #[test]
    fn two_elephants_on_one_worker_split() {
        let layout = CpuLayout::uniform(3, 3).unwrap();
        let mut b = Balancer::new(raw());
        // Units 1 and 2 are 45 % each on CPU 0; the mean is about 33 %.
        let ws = [w(0, 90, 90), w(1, 5, 5), w(2, 5, 5)];
        let us = [u(1, 0, 45), u(2, 0, 45), u(3, 1, 5), u(4, 2, 5)];
        let p = plan(&mut b, &layout, &ws, &us);
        assert_eq!(p.moves.len(), 1, "{p:?}");
        assert_eq!((p.moves[0].from, p.moves[0].to), (0, 1));
        // The one that stayed is reported.
        assert_eq!(p.elephants.len(), 1);
        assert_ne!(p.elephants[0].unit, p.moves[0].unit);
    }

    #[test]
    fn idle_units_are_forgotten() {
        let layout = CpuLayout::uniform(2, 2).unwrap();
        let mut b = Balancer::new(BalanceConfig {
            forget_rounds: 3,
            ..raw()
        });
        let ws = [w(0, 1, 1), w(1, 1, 1)];
        plan(&mut b, &layout, &ws, &[u(9, 0, 1)]);
        let mut forgotten = Vec::new();
        for _ in 0..4 {
            forgotten.extend(plan(&mut b, &layout, &ws, &[]).forgotten);
        }
        assert_eq!(forgotten, vec![9]);
    }

    #[test]
    fn best_unit_picks_the_largest_gain() {
        let units = [(1, 0.5), (2, 0.3), (3, 0.1)];
        // Gap 0.6: moving 0.3 evens the pair.
        let b = best_unit(&units, 0.9, 0.3, 1.0, 0.0, 1.0).unwrap();
        assert_eq!(b.0, 1);
        assert!((b.1 - 0.3).abs() < 1e-12);
        // Too big for the target's cap: only 0.1 fits.
        let b = best_unit(&units, 0.9, 0.3, 0.45, 0.0, 0.01).unwrap();
        assert_eq!(b.0, 2);
        assert!((b.1 - 0.1).abs() < 1e-12);
        // Nothing gains enough.
        assert_eq!(best_unit(&units, 0.9, 0.3, 1.0, 0.5, 1.0), None);
        // Nothing fits: the move that gains a big step overfills the target.
        let b = best_unit(&units, 0.9, 0.3, 0.35, 0.0, 0.25).unwrap();
        assert_eq!(b.0, 1);
        assert_eq!(best_unit(&units, 0.9, 0.3, 0.35, 0.0, 0.5), None);
    }

    #[test]
    fn unit_ids_round_trip() {
        assert_eq!(unit_bucket(unit_id(u32::MAX, 4095)), (u32::MAX, 4095));
    }
}
