//! How often a worker whose handler panicked is restarted in place
//! ([`RestartLimit`], systemd's `StartLimitBurst` within
//! `StartLimitIntervalSec`), and each worker's record of its restarts.
//!
//! Invariant: a worker is restarted only while fewer than `burst` restarts
//! happened within the last `interval`; past that it dies as it did before
//! restarts existed (its work moves to the survivors).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// At most `burst` restarts of one worker within any `interval`.
///
/// ```
/// use std::time::Duration;
/// use steer_core::runtime::RestartLimit;
/// assert_eq!(RestartLimit::default(), RestartLimit::per_minute(5));
/// assert_eq!(RestartLimit::NEVER.burst, 0);
/// let tight = RestartLimit { burst: 2, interval: Duration::from_secs(10) };
/// assert!(tight.allows_any());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartLimit {
    /// Restarts allowed within `interval` (0: a panic always ends the
    /// worker).
    pub burst: u32,
    /// The sliding window the burst is counted in.
    pub interval: Duration,
}

impl RestartLimit {
    /// Never restart: a panic ends the worker.
    pub const NEVER: Self = Self {
        burst: 0,
        interval: Duration::ZERO,
    };

    /// `burst` restarts a minute.
    pub const fn per_minute(burst: u32) -> Self {
        Self {
            burst,
            interval: Duration::from_secs(60),
        }
    }

    /// Whether any restart is allowed at all.
    pub fn allows_any(&self) -> bool {
        self.burst > 0
    }
}

impl Default for RestartLimit {
    /// Five restarts a minute.
    fn default() -> Self {
        Self::per_minute(5)
    }
}

/// When one worker was restarted, within the limit's window.
#[derive(Debug, Default)]
pub(super) struct RestartHistory {
    at: VecDeque<Instant>,
}

impl RestartHistory {
    /// Whether `limit` allows a restart at `now`; if so it is recorded.
    pub(super) fn allow(&mut self, limit: &RestartLimit, now: Instant) -> bool {
        while self
            .at
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) >= limit.interval)
        {
            self.at.pop_front();
        }
        if self.at.len() >= limit.burst as usize {
            return false;
        }
        self.at.push_back(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_refused_until_the_window_moves_on() {
        let limit = RestartLimit {
            burst: 2,
            interval: Duration::from_secs(10),
        };
        let t0 = Instant::now();
        let mut h = RestartHistory::default();
        assert!(h.allow(&limit, t0));
        assert!(h.allow(&limit, t0 + Duration::from_secs(1)));
        assert!(!h.allow(&limit, t0 + Duration::from_secs(2)));
        // The first restart leaves the window at t0 + 10 s.
        assert!(h.allow(&limit, t0 + Duration::from_secs(10)));
        assert!(!h.allow(&limit, t0 + Duration::from_secs(10)));
    }

    #[test]
    fn never_refuses_the_first() {
        assert!(!RestartHistory::default().allow(&RestartLimit::NEVER, Instant::now()));
    }
}
