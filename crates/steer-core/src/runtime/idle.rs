//! Adaptive polling before sleep, after the guest `haltpoll` cpuidle
//! governor: a worker that ran out of work keeps polling for a window
//! before it sleeps, and the window follows how long its sleeps turn out
//! to be ([`AdaptiveSpin`]).
//!
//! On a virtual machine a sleeping worker costs twice per packet that
//! wakes it: the sender pays for the wake-up (an inter-processor interrupt,
//! a VM exit) and the halted vCPU takes tens of microseconds or more to
//! run again. Polling a little longer avoids both when the next packet is
//! near; the window grows after a sleep that ended soon (a longer poll
//! would have caught its packet) and shrinks after a long one (polling
//! would have been waste), as haltpoll's `guest_halt_poll_ns` does.
//!
//! Invariants: the window stays within `[0, max]`; polling time spent
//! without finding work is bounded by `budget_percent` of wall time over
//! each [`BUDGET_PERIOD`]: past it the worker polls no more in that period
//! (it sleeps when idle), and the window halves and does not grow until
//! the next; all of it is pure arithmetic on the times the
//! worker already reads (one clock read per round), so tests drive it with
//! made-up instants.

use std::time::{Duration, Instant};

/// How long the spent-polling budget is measured over.
pub const BUDGET_PERIOD: Duration = Duration::from_millis(100);

/// Adaptive polling before sleep (see the module docs).
///
/// ```
/// use std::time::Duration;
/// use steer_core::runtime::{AdaptiveSpin, RuntimeConfig};
/// let cfg = RuntimeConfig { adaptive: Some(AdaptiveSpin::default()), ..RuntimeConfig::default() };
/// assert_eq!(cfg.adaptive.unwrap().max, Duration::from_micros(200));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveSpin {
    /// The first window after one that was zero (haltpoll's
    /// `guest_halt_poll_grow_start`).
    pub grow_start: Duration,
    /// The longest window, and the sleep length that counts as long
    /// (haltpoll's `guest_halt_poll_ns`).
    pub max: Duration,
    /// Most of the wall time, in percent, spent polling without finding
    /// work, over each [`BUDGET_PERIOD`].
    pub budget_percent: u8,
}

impl Default for AdaptiveSpin {
    /// haltpoll's defaults (10 us to start, 200 us at most), with polling
    /// that finds nothing bounded to half of a CPU.
    fn default() -> Self {
        Self {
            grow_start: Duration::from_micros(10),
            max: Duration::from_micros(200),
            budget_percent: 50,
        }
    }
}

/// One worker's current window and budget (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct SpinWindow {
    cfg: AdaptiveSpin,
    window: Duration,
    period_start: Instant,
    /// Polling without work in this budget period.
    spent: Duration,
    /// The budget ran out in this period: no growth until the next.
    over_budget: bool,
}

impl SpinWindow {
    pub(super) fn new(cfg: AdaptiveSpin, now: Instant) -> Self {
        Self {
            cfg,
            window: Duration::ZERO,
            period_start: now,
            spent: Duration::ZERO,
            over_budget: false,
        }
    }

    /// The window now.
    #[cfg(test)]
    pub(super) fn window(&self) -> Duration {
        self.window
    }

    /// Whether a worker idle for `idle_for` (since its last work) keeps
    /// polling rather than sleeping: within the window, and not once the
    /// budget of this period ran out.
    pub(super) fn keep_polling(&self, idle_for: Duration) -> bool {
        !self.over_budget && idle_for < self.window
    }

    /// A round without work took `spent` of polling (ending at `now`).
    pub(super) fn polled_idle(&mut self, spent: Duration, now: Instant) {
        self.roll_period(now);
        self.spent += spent;
        let budget = BUDGET_PERIOD * u32::from(self.cfg.budget_percent.min(100)) / 100;
        if self.spent > budget && !self.over_budget {
            self.over_budget = true;
            self.shrink();
        }
    }

    /// An idle spell (polling, then a sleep) lasted `slept` from the last
    /// work to the wake-up at `now`: haltpoll's rule. Shorter
    /// than `max` and longer than the window: a longer poll would have
    /// caught what woke it, so the window grows (doubles, from
    /// `grow_start`), unless the budget ran out in this period. Longer
    /// than `max`: polling would have been waste, so it shrinks (halves,
    /// to zero under `grow_start`).
    pub(super) fn slept(&mut self, slept: Duration, now: Instant) {
        self.roll_period(now);
        if slept > self.cfg.max {
            self.shrink();
        } else if slept > self.window && !self.over_budget {
            self.window = (self.window * 2).max(self.cfg.grow_start).min(self.cfg.max);
        }
    }

    fn shrink(&mut self) {
        self.window /= 2;
        if self.window < self.cfg.grow_start {
            self.window = Duration::ZERO;
        }
    }

    fn roll_period(&mut self, now: Instant) {
        if now.saturating_duration_since(self.period_start) >= BUDGET_PERIOD {
            self.period_start = now;
            self.spent = Duration::ZERO;
            self.over_budget = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn short_sleeps_grow_the_window_to_its_max_and_long_ones_shrink_it() {
        let t = Instant::now();
        let mut w = SpinWindow::new(AdaptiveSpin::default(), t);
        assert_eq!(w.window(), Duration::ZERO);
        assert!(!w.keep_polling(Duration::ZERO));
        // Woken 30 us into each sleep: 10, 20, 40 us, then no growth (the
        // sleep is no longer than the window).
        for want in [10, 20, 40, 40] {
            w.slept(30 * US, t);
            assert_eq!(w.window(), want * US);
        }
        w.slept(150 * US, t);
        assert_eq!(w.window(), 80 * US);
        w.slept(190 * US, t);
        w.slept(199 * US, t);
        assert_eq!(w.window(), 200 * US, "capped at max");
        assert!(w.keep_polling(150 * US) && !w.keep_polling(200 * US));
        // Long sleeps: halves, then zero under grow_start.
        for want in [100, 50, 25, 12, 0] {
            w.slept(5_000 * US, t);
            assert_eq!(w.window().as_micros(), want);
        }
    }

    #[test]
    fn polling_past_the_budget_shrinks_the_window_and_stops_growth_for_the_period() {
        let t = Instant::now();
        let cfg = AdaptiveSpin {
            budget_percent: 10,
            ..AdaptiveSpin::default()
        };
        let mut w = SpinWindow::new(cfg, t);
        for _ in 0..5 {
            w.slept(150 * US, t);
        }
        assert_eq!(w.window(), 160 * US);
        // 10% of 100 ms is 10 ms of polling without work.
        w.polled_idle(Duration::from_millis(9), t);
        assert_eq!(w.window(), 160 * US);
        w.polled_idle(Duration::from_millis(2), t);
        assert_eq!(w.window(), 80 * US);
        assert!(!w.keep_polling(US), "no polling for the rest of the period");
        w.slept(150 * US, t);
        assert_eq!(w.window(), 80 * US, "no growth while over budget");
        // The next period starts afresh.
        w.slept(150 * US, t + BUDGET_PERIOD);
        assert_eq!(w.window(), 160 * US);
        assert!(w.keep_polling(US));
    }
}
