//! Load balancing beyond RPS: move flows nobody claimed off overloaded
//! workers, by measured load (the RSS++ idea, on steer's flow tables).
//!
//! RPS places a flow where its hash says, whatever the load: with a few
//! heavy flows some workers saturate while others idle. The balancer runs
//! off the hot path, once per round (every few milliseconds): it reads each
//! worker's busy time and packet count and each movable unit's packet count,
//! and moves the fewest units from the most loaded workers to the least
//! loaded, preferring a worker behind the same LLC.
//!
//! A *unit* is what moves together: in the engine one bucket of an rx
//! queue's flow table (the flows that share a bucket share its CPU there
//! anyway). Only units whose flows have no explicit pin and no recorded
//! application CPU are movable: a pin or a recorded CPU always wins, since
//! the dispatcher consults them before the balancer's assignment.
//!
//! The rule ([`Balancer::plan`]), per round:
//! 1. smooth each worker's busy time and packet count and each unit's
//!    packet count (exponentially, [`BalanceConfig::smoothing`]); a unit's
//!    load is its packets at its worker's mean cost per packet (per-packet
//!    costs are not timed: the feedback of the next rounds corrects);
//! 2. nothing moves when the system is idle (mean load below
//!    [`BalanceConfig::idle_load`]) or balanced (no worker above the mean by
//!    more than [`BalanceConfig::trigger`]): the hysteresis band;
//! 3. an *elephant*, a unit whose load alone is at least the mean, stays
//!    (it would only carry the hot spot along) and is reported; the other
//!    units leave its worker instead;
//! 4. greedy: the most loaded worker above the band gives the unit whose
//!    move lowers the larger of the pair the most to the least loaded
//!    worker below the mean, never filling the target past half the band
//!    (unless nothing fits and the move lowers the hot spot by four bands:
//!    two elephants sharing a worker split);
//!    a target behind the same LLC is preferred when its best move gains at
//!    least [`BalanceConfig::llc_slack`] of the best move anywhere; repeated
//!    up to [`BalanceConfig::max_moves`] per round;
//! 5. a unit that moved stays put for [`BalanceConfig::cooldown_rounds`],
//!    and both workers of a move sit out [`BalanceConfig::settle_rounds`]
//!    until their measurements show it (no ping-pong).
//!
//! The balancer only decides. Moving a unit is the caller's: in the engine
//! it writes the unit's [`BucketLoads`] assignment, and the dispatcher moves
//! the flows through the rx-queue table's `last_qtail` rule like any other
//! move, so no flow is ever reordered.
//!
//! Where things are: the decision ([`Balancer`], `decide.rs`); the
//! per-rx-queue counters and assignments the dispatcher and the balancer
//! share, and the run-time switch and counters ([`BucketLoads`],
//! [`BalanceShared`], `table.rs`). `sim::load` models the balancer over a
//! workload, deterministically.

mod decide;
mod table;

pub use decide::{
    unit_bucket, unit_id, BalanceConfig, Balancer, Elephant, Move, MoveReason, Plan, Round, UnitId,
    UnitSample, Verdict, WorkerSample,
};
pub use table::{BalanceShared, BalanceStats, BucketLoads};
