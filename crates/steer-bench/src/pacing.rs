//! Pacing: a token bucket that hands out send credit in batches at a fixed
//! rate, or without limit; the generator's burst size, its tick schedule,
//! and how weighted flows share the sockets (`Weights`: each socket's
//! share of the rate, and which flow each of its frames belongs to).
//!
//! Invariants: time is passed in (nanoseconds from any fixed origin), so the
//! bucket is deterministic under test; credit accrues continuously and is
//! released to the sender in whole arrivals (one packet when smooth, `B`
//! at once when bursty); what is released and not yet sent (`owed`) and
//! what waits to be released never exceed `burst` packets together, so a generator that fell behind catches up by
//! at most one burst and the shortfall shows in its offered rate (and in
//! [`TokenBucket::dropped`](crate::pacing::TokenBucket::dropped)) instead of as a flood.

/// How requests arrive at a fixed mean rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Spread evenly: each tick sends what accrued since the last.
    Smooth,
    /// In bursts of this many packets back to back, the bursts spaced so
    /// the mean rate is the same.
    Bursty(u64),
}

impl Arrivals {
    /// From `--arrivals smooth|bursty` and `--burst N` (N >= 1).
    pub fn parse(mode: &str, burst: u64) -> Result<Arrivals, String> {
        match mode {
            "smooth" => Ok(Arrivals::Smooth),
            "bursty" if burst >= 1 => Ok(Arrivals::Bursty(burst)),
            "bursty" => Err("--burst must be at least 1".into()),
            other => Err(format!("--arrivals {other:?}: smooth or bursty")),
        }
    }

    /// Packets one arrival brings.
    pub fn size(self) -> u64 {
        match self {
            Arrivals::Smooth => 1,
            Arrivals::Bursty(b) => b.max(1),
        }
    }

    /// A short label: `smooth`, `bursty64`.
    pub fn label(self) -> String {
        match self {
            Arrivals::Smooth => "smooth".into(),
            Arrivals::Bursty(b) => format!("bursty{b}"),
        }
    }
}

/// Send credit at `rate` packets per second (`None`: unlimited).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: Option<f64>,
    burst: u64,
    last_ns: u64,
    credit: f64,
    arrivals: Arrivals,
    owed: u64,
    dropped: f64,
}

impl TokenBucket {
    /// A smooth bucket starting empty at `now_ns`.
    pub fn new(rate: Option<f64>, burst: u64, now_ns: u64) -> Self {
        Self::with_arrivals(rate, burst, now_ns, Arrivals::Smooth)
    }

    /// A bucket starting empty at `now_ns` that releases credit in whole
    /// arrivals; its cap is at least one arrival.
    pub fn with_arrivals(rate: Option<f64>, burst: u64, now_ns: u64, arrivals: Arrivals) -> Self {
        TokenBucket {
            rate,
            burst: burst.max(arrivals.size()).max(1),
            last_ns: now_ns,
            credit: 0.0,
            arrivals,
            owed: 0,
            dropped: 0.0,
        }
    }

    /// Packets that may be sent now (at most `burst`): released arrivals
    /// not yet sent; call [`Self::spend`] with what was actually sent.
    pub fn available(&mut self, now_ns: u64) -> u64 {
        let Some(rate) = self.rate else {
            return self.burst;
        };
        let dt = now_ns.saturating_sub(self.last_ns) as f64 * 1e-9;
        self.last_ns = self.last_ns.max(now_ns);
        self.credit += dt * rate;
        let size = self.arrivals.size();
        // Owed and waiting credit together hold at most one burst: beyond
        // it, credit is lost (counted).
        let cap = (self.burst - self.owed.min(self.burst)) as f64;
        if self.credit > cap {
            self.dropped += self.credit - cap;
            self.credit = cap;
        }
        let whole = (self.credit / size as f64).floor() as u64 * size;
        self.credit -= whole as f64;
        self.owed += whole;
        self.owed
    }

    /// Takes `n` packets of credit.
    pub fn spend(&mut self, n: u64) {
        if self.rate.is_some() {
            self.owed = self.owed.saturating_sub(n);
        }
    }

    /// Packets of credit lost at the cap so far (the generator was held up
    /// for longer than one burst's worth of time: a pacing stall).
    pub fn dropped(&self) -> u64 {
        self.dropped as u64
    }

    /// Nanoseconds until `n` packets of credit are available (0 when unlimited).
    pub fn wait_ns(&self, n: u64) -> u64 {
        match self.rate {
            None => 0,
            Some(rate) => {
                let have = self.owed as f64 + self.credit;
                let missing = (n.min(self.burst) as f64 - have).max(0.0);
                (missing / rate * 1e9).ceil() as u64
            }
        }
    }
}

/// The credit a bucket at `rate` may hold: five milliseconds of it, and
/// at least `min` (one batch); `min` when unlimited. A generator delayed by
/// another task or by the VM's host catches up in bursts of this size;
/// longer stalls show as a rate not held.
pub fn burst(rate: Option<f64>, min: u64) -> u64 {
    match rate {
        None => min,
        Some(r) => ((r * CREDIT_SECS) as u64).max(min),
    }
}

/// Seconds of sending a bucket holds by [`burst`].
pub const CREDIT_SECS: f64 = 5e-3;

/// Seconds of sending the generator's bucket holds: a stall of up to this
/// long (the VM's host, another task) loses nothing, as the generator
/// catches up in passes of one batch per socket without sleeping.
pub const CATCH_UP_SECS: f64 = 20e-3;

/// The generator's cap: [`CATCH_UP_SECS`] of credit at `rate`, at least
/// `min` and one arrival; `min` when unlimited.
pub fn catch_up(rate: Option<f64>, min: u64, arrivals: Arrivals) -> u64 {
    match rate {
        None => min,
        Some(r) => ((r * CATCH_UP_SECS) as u64).max(min).max(arrivals.size()),
    }
}

/// Whether the generator sleeps to its next tick after a pass: at a fixed
/// rate when it owes nothing more, or when the pass sent nothing (a full
/// tx ring: waiting beats spinning on it); while draining always; at `max`
/// never.
pub fn sleep_after_pass(fixed_rate: bool, sending: bool, owed: u64, sent: u64) -> bool {
    !sending || (fixed_rate && (owed == 0 || sent == 0))
}

/// The next wake-up at a fixed tick: one `tick` after `last`, or after one
/// tick before `now` when the sleeper fell behind (it never schedules a
/// burst of catch-up wake-ups).
pub fn next_wake(last: u64, now: u64, tick: u64) -> u64 {
    last.max(now - now.min(tick)) + tick
}

/// How `flows` flows with per-flow weights share `sockets` sockets: flow
/// `f` goes out on socket `f % sockets` and sends `weight(f)` requests in a
/// row at its turn; each socket's share of the rate is its flows' share of
/// the weights.
#[derive(Debug, Clone)]
pub struct Weights {
    weights: Vec<u32>,
    flows: usize,
    sockets: usize,
    cursor: Vec<usize>,
    repeat: Vec<u32>,
}

impl Weights {
    /// Flow `f`'s weight is `weights[f % len]` (at least 1; empty: all 1).
    pub fn new(weights: &[u32], flows: usize, sockets: usize) -> Self {
        let mut w = Weights {
            weights: weights.to_vec(),
            flows,
            sockets: sockets.max(1),
            cursor: (0..sockets).collect(),
            repeat: Vec::new(),
        };
        w.repeat = (0..sockets).map(|s| w.weight(s)).collect();
        w
    }

    /// Flow `flow`'s weight.
    pub fn weight(&self, flow: usize) -> u32 {
        match self.weights.len() {
            0 => 1,
            n => self.weights[flow % n].max(1),
        }
    }

    /// Each socket's share of the rate (empty without weights: no socket
    /// waits for the others).
    pub fn shares(&self) -> Vec<f64> {
        if self.weights.is_empty() {
            return Vec::new();
        }
        let w: Vec<f64> = (0..self.sockets)
            .map(|s| {
                (s..self.flows)
                    .step_by(self.sockets)
                    .map(|f| f64::from(self.weight(f)))
                    .sum()
            })
            .collect();
        let total: f64 = w.iter().sum();
        w.iter().map(|x| x / total.max(1.0)).collect()
    }

    /// The flow of socket `s`'s next frame: its current flow until that
    /// flow sent its weight's worth in a row, then the socket's next flow
    /// (wrapping to its first).
    pub fn next_flow(&mut self, s: usize) -> usize {
        let flow = self.cursor[s];
        if self.repeat[s] > 1 {
            self.repeat[s] -= 1;
        } else {
            self.cursor[s] = if flow + self.sockets < self.flows {
                flow + self.sockets
            } else {
                s
            };
            self.repeat[s] = self.weight(self.cursor[s]);
        }
        flow
    }
}

/// Whether a socket that has sent `sent` of `sent_all` frames is ahead of
/// its `share` once `want` more go out: it lets the others send first.
pub fn ahead_of_share(share: Option<f64>, sent: u64, sent_all: u64, want: u64) -> bool {
    share.is_some_and(|sh| sent as f64 > sh * (sent_all + want) as f64)
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

    #[test]
    fn bursty_arrivals_come_whole_at_the_same_mean_rate() {
        let mut b = TokenBucket::with_arrivals(Some(50_000.0), 250, 0, Arrivals::Bursty(64));
        let (mut sent, mut sizes) = (0, Vec::new());
        for step in 1..=10_000u64 {
            let n = b.available(step * 100_000);
            if n > 0 {
                sizes.push(n);
            }
            b.spend(n);
            sent += n;
        }
        assert!(sizes.iter().all(|&n| n == 64), "{sizes:?}");
        assert!((49_920..=50_000).contains(&sent), "{sent}");
        // The cap is at least one burst, so a burst comes whole.
        let mut big = TokenBucket::with_arrivals(Some(1_000.0), 32, 0, Arrivals::Bursty(100));
        assert_eq!(big.available(100_000_000), 100);
        assert_eq!(Arrivals::parse("bursty", 8), Ok(Arrivals::Bursty(8)));
        assert_eq!(Arrivals::parse("smooth", 0), Ok(Arrivals::Smooth));
        assert!(Arrivals::parse("bursty", 0).is_err());
        assert!(Arrivals::parse("poisson", 8).is_err());
        assert_eq!(Arrivals::Bursty(8).label(), "bursty8");
    }

    #[test]
    fn a_sender_behind_keeps_what_it_owes_and_a_long_stall_is_counted() {
        let mut b = TokenBucket::new(Some(50_000.0), 250, 0);
        // 4 ms late: 200 owed, sent 64 a pass without losing the rest.
        assert_eq!(b.available(4_000_000), 200);
        b.spend(64);
        assert_eq!(b.available(4_000_000), 136);
        b.spend(136);
        assert_eq!(b.dropped(), 0);
        // 20 ms late: one burst owed, the rest lost.
        assert_eq!(b.available(24_000_000), 250);
        assert_eq!(b.dropped(), 750);
        b.spend(250);
        assert_eq!(b.available(24_000_000), 0);
        assert_eq!(catch_up(Some(50_000.0), 32, Arrivals::Smooth), 1000);
        assert_eq!(catch_up(Some(100.0), 32, Arrivals::Bursty(64)), 64);
        assert_eq!(catch_up(None, 32, Arrivals::Smooth), 32);
        // Sleep only when nothing is owed or nothing could be sent.
        assert!(sleep_after_pass(true, true, 0, 5));
        assert!(!sleep_after_pass(true, true, 10, 64));
        assert!(sleep_after_pass(true, true, 10, 0));
        assert!(!sleep_after_pass(false, true, 32, 32), "max never sleeps");
        assert!(sleep_after_pass(false, false, 0, 0), "draining sleeps");
    }

    #[test]
    fn bursts_are_five_milliseconds_of_credit() {
        assert_eq!(burst(None, 32), 32);
        assert_eq!(burst(Some(50_000.0), 32), 250);
        assert_eq!(burst(Some(1_000.0), 32), 32, "at least one batch");
    }

    #[test]
    fn ticks_follow_the_schedule_and_never_catch_up_in_bursts() {
        assert_eq!(next_wake(1_000, 1_050, 100), 1_100);
        // Far behind: one tick from now, not a run of past ticks.
        assert_eq!(next_wake(1_000, 5_000, 100), 5_000);
        // Near time zero the subtraction does not wrap.
        assert_eq!(next_wake(0, 50, 100), 100);
    }

    #[test]
    fn equal_flows_take_turns_per_socket() {
        let mut w = Weights::new(&[], 5, 2);
        assert!(w.shares().is_empty());
        let s0: Vec<usize> = (0..4).map(|_| w.next_flow(0)).collect();
        let s1: Vec<usize> = (0..3).map(|_| w.next_flow(1)).collect();
        assert_eq!(s0, [0, 2, 4, 0]);
        assert_eq!(s1, [1, 3, 1]);
    }

    #[test]
    fn weighted_flows_send_in_a_row_and_share_by_weight() {
        // Weights 3,1: flows 0 and 2 weigh 3, flows 1 and 3 weigh 1.
        let mut w = Weights::new(&[3, 1], 4, 2);
        assert_eq!(w.shares(), [0.75, 0.25]);
        let s0: Vec<usize> = (0..7).map(|_| w.next_flow(0)).collect();
        assert_eq!(s0, [0, 0, 0, 2, 2, 2, 0]);
        assert_eq!(w.weight(5), 1);
        assert_eq!(
            Weights::new(&[0], 2, 1).weight(0),
            1,
            "a zero weight counts 1"
        );
        // One socket of two that sent 80 of 100 is ahead of a 0.75 share.
        assert!(ahead_of_share(Some(0.75), 80, 100, 0));
        assert!(!ahead_of_share(Some(0.75), 70, 100, 0));
        assert!(!ahead_of_share(None, 100, 100, 32));
    }
}
