//! Receive coalescing that follows the traffic, after NIC interrupt
//! moderation (`rx-usecs` with adaptive moderation, the kernel's `net_dim`):
//! while packets come close together, a worker that ran out of work naps
//! on a timer instead of waiting to be woken, for a window sized to gather
//! about [`Coalesce::batch`] packets; while they come far apart it sleeps
//! until woken, as without coalescing.
//!
//! A wake-up costs its sender an inter-processor interrupt and, on a
//! virtual machine, the halted vCPU a round trip through the host: on the
//! 2-vCPU guest of the benchmarks, tens of microseconds of the worker's own
//! CPU per wake-up, more than handling a packet. A nap costs the same once,
//! but its timer wakes the worker to a batch. Sizing the nap to a batch
//! keeps that cost per packet about constant as the load changes (at 50,000
//! packets a second a nap is 160 us, at 200,000 it is 40 us), and so the
//! latency it adds falls as the load rises.
//!
//! Invariants: a nap lasts between `min_nap` and `max_nap`; naps are taken
//! only while traffic is dense, after an idle spell (from the last work to
//! the wake-up that ended it) shorter than half of `max_nap`, so a nap finds
//! two packets or more where one wake-up would have fetched one; the window
//! is pure arithmetic on durations the worker already measures, so tests
//! drive it with made-up numbers.

use std::time::Duration;

/// Receive coalescing (see the module docs).
///
/// ```
/// use std::time::Duration;
/// use steer_core::runtime::{Coalesce, RuntimeConfig};
/// let cfg = RuntimeConfig { coalesce: Some(Coalesce::default()), ..RuntimeConfig::default() };
/// assert_eq!(cfg.coalesce.unwrap().max_nap, Duration::from_micros(200));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(alias("rx-usecs", "adaptive-rx", "net_dim", "gro_flush_timeout"))]
pub struct Coalesce {
    /// The shortest nap.
    pub min_nap: Duration,
    /// The longest nap: the most latency coalescing adds to a packet.
    pub max_nap: Duration,
    /// Packets a nap is sized to gather.
    pub batch: u32,
}

impl Default for Coalesce {
    /// Naps of 20 to 200 us, sized for batches of 8.
    fn default() -> Self {
        Self {
            min_nap: Duration::from_micros(20),
            max_nap: Duration::from_micros(200),
            batch: 8,
        }
    }
}

/// One worker's coalescing state: its estimate of the time between
/// packets, and the nap that follows from it.
#[derive(Debug, Clone)]
pub(super) struct CoalesceWindow {
    cfg: Coalesce,
    /// Smoothed time between packets.
    gap: Duration,
}

impl CoalesceWindow {
    pub(super) fn new(cfg: Coalesce) -> Self {
        let max_nap = cfg.max_nap.max(cfg.min_nap);
        Self {
            cfg: Coalesce { max_nap, ..cfg },
            gap: max_nap,
        }
    }

    /// Whether a worker that ran out of work naps, given its last idle
    /// spell that ended in a wake-up (`None`: none yet).
    pub(super) fn naps(&self, last_spell: Option<Duration>) -> bool {
        last_spell.is_some_and(|spell| spell < self.cfg.max_nap / 2)
    }

    /// The nap to take now: `batch` gaps, within `[min_nap, max_nap]`.
    pub(super) fn nap(&self) -> Duration {
        (self.gap * self.cfg.batch.max(1)).clamp(self.cfg.min_nap, self.cfg.max_nap)
    }

    /// A nap of `slept` found `found` packets (0: the traffic stopped; the
    /// worker then sleeps until woken, and the spell that ends it says how
    /// far apart packets are).
    pub(super) fn after_nap(&mut self, slept: Duration, found: usize) {
        if found > 0 {
            let found = u32::try_from(found).unwrap_or(u32::MAX);
            self.learn(slept / found);
        }
    }

    /// An idle spell of `spell` ended in a wake-up: one packet in that time.
    pub(super) fn after_sleep(&mut self, spell: Duration) {
        self.learn(spell.min(self.cfg.max_nap));
    }

    /// Moves the estimate a quarter of the way to `gap`.
    fn learn(&mut self, gap: Duration) {
        self.gap = (self.gap * 3 + gap) / 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn naps_only_after_short_idle_spells() {
        let w = CoalesceWindow::new(Coalesce::default());
        assert!(!w.naps(None), "nothing learned yet");
        assert!(w.naps(Some(20 * US)));
        assert!(w.naps(Some(99 * US)));
        assert!(!w.naps(Some(100 * US)), "half of the longest nap");
        assert!(!w.naps(Some(Duration::from_millis(5))));
    }

    #[test]
    fn the_nap_gathers_a_batch_and_follows_the_rate() {
        let mut w = CoalesceWindow::new(Coalesce::default());
        // 50,000 packets a second: 20 us apart, naps of 8 x 20 = 160 us (a
        // nap finds whole packets: up to one gap more).
        for _ in 0..40 {
            let nap = w.nap();
            w.after_nap(nap, (nap.as_micros() / 20) as usize);
        }
        assert!((150..=180).contains(&w.nap().as_micros()), "{:?}", w.nap());
        // 200,000 a second: 5 us apart, naps of 40 us.
        for _ in 0..40 {
            let nap = w.nap();
            w.after_nap(nap, (nap.as_micros() / 5) as usize);
        }
        assert!((38..=45).contains(&w.nap().as_micros()), "{:?}", w.nap());
        // A million a second: the shortest nap.
        for _ in 0..40 {
            let nap = w.nap();
            w.after_nap(nap, (nap.as_micros()) as usize);
        }
        assert_eq!(w.nap(), 20 * US);
    }

    #[test]
    fn an_empty_nap_teaches_nothing_and_long_spells_lengthen_the_nap_to_its_max() {
        let mut w = CoalesceWindow::new(Coalesce::default());
        for _ in 0..40 {
            w.after_nap(40 * US, 8);
        }
        let before = w.nap();
        w.after_nap(before, 0);
        assert_eq!(w.nap(), before);
        for _ in 0..40 {
            w.after_sleep(Duration::from_millis(3));
        }
        assert_eq!(w.nap(), 200 * US);
    }

    #[test]
    fn a_max_below_the_min_is_the_min() {
        let w = CoalesceWindow::new(Coalesce {
            min_nap: 50 * US,
            max_nap: 10 * US,
            batch: 8,
        });
        assert_eq!(w.nap(), 50 * US);
    }
}
