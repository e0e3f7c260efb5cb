//! Pacing: a token bucket that hands out send credit in batches at a fixed
//! rate, or without limit.
//!
//! Invariants: time is passed in (nanoseconds from any fixed origin), so the
//! bucket is deterministic under test; credit never exceeds `burst` packets,
//! so a generator that fell behind catches up by at most one burst and the
//! shortfall shows in its offered rate instead of as a flood.

/// Send credit at `rate` packets per second (`None`: unlimited).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: Option<f64>,
    burst: u64,
    last_ns: u64,
    credit: f64,
}

impl TokenBucket {
    /// A bucket starting empty at `now_ns`.
    pub fn new(rate: Option<f64>, burst: u64, now_ns: u64) -> Self {
        TokenBucket {
            rate,
            burst: burst.max(1),
            last_ns: now_ns,
            credit: 0.0,
        }
    }

    /// Packets that may be sent now (at most `burst`); call [`Self::spend`]
    /// with what was actually sent.
    pub fn available(&mut self, now_ns: u64) -> u64 {
        let Some(rate) = self.rate else {
            return self.burst;
        };
        let dt = now_ns.saturating_sub(self.last_ns) as f64 * 1e-9;
        self.last_ns = self.last_ns.max(now_ns);
        self.credit = (self.credit + dt * rate).min(self.burst as f64);
        self.credit as u64
    }

    /// Takes `n` packets of credit.
    pub fn spend(&mut self, n: u64) {
        if self.rate.is_some() {
            self.credit = (self.credit - n as f64).max(0.0);
        }
    }

    /// Nanoseconds until `n` packets of credit are available (0 when unlimited).
    pub fn wait_ns(&self, n: u64) -> u64 {
        match self.rate {
            None => 0,
            Some(rate) => {
                let missing = (n.min(self.burst) as f64 - self.credit).max(0.0);
                (missing / rate * 1e9).ceil() as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_at_the_rate_in_batches() {
        let mut b = TokenBucket::new(Some(50_000.0), 64, 0);
        let mut sent = 0;
        // 1 s in steps of 100 us: 5 packets per step.
        for step in 1..=10_000u64 {
            let n = b.available(step * 100_000);
            b.spend(n);
            sent += n;
        }
        assert!((49_990..=50_000).contains(&sent), "{sent}");
        assert_eq!(b.wait_ns(5), 100_000);
    }

    #[test]
    fn credit_is_capped_at_one_burst() {
        let mut b = TokenBucket::new(Some(1e6), 32, 0);
        assert_eq!(b.available(1_000_000_000), 32);
        b.spend(32);
        assert_eq!(b.available(1_000_000_000), 0);
        let mut u = TokenBucket::new(None, 32, 0);
        assert_eq!(u.available(0), 32);
        assert_eq!(u.wait_ns(32), 0);
    }
}
