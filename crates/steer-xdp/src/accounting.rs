//! Frame accounting: where every UMEM frame is. A frame is always in exactly
//! one place: a socket's free pool, its fill ring or the kernel's rx side, its
//! rx ring, held by the application (engine, steer ring, handler), its tx ring
//! or the kernel's tx side, or its completion ring.
//!
//! Each socket keeps signed per-place counters ([`Ledger`](crate::accounting::Ledger)) updated once per
//! batch; frames may move between sockets while held, so only the sum over
//! all sockets is meaningful. At a quiet moment (no thread inside a socket
//! call) [`FrameCensus`] adds the ring occupancies read from the rings and
//! checks `total == sum of places`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

/// Per-socket place counters, shared with the port for reporting.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Frames in this socket's free pool.
    pub(crate) free: AtomicI64,
    /// Frames given to the fill ring and not yet taken back from the rx ring.
    pub(crate) in_rx: AtomicI64,
    /// Frames taken from rx/free minus frames given back through this socket.
    pub(crate) held: AtomicI64,
    /// Frames given to the tx ring and not yet taken back from the completion ring.
    pub(crate) in_tx: AtomicI64,
    /// Frames received in total.
    pub(crate) rx_frames: AtomicU64,
    /// Frames transmitted (completed) in total.
    pub(crate) tx_frames: AtomicU64,
    /// Wakeup system calls made (tx kicks and fill-ring wakeups).
    pub(crate) wakeups: AtomicU64,
    /// Multi-buffer packets received (gathered from several frames).
    pub(crate) multi_rx: AtomicU64,
    /// Multi-buffer packets put on the tx ring.
    pub(crate) multi_tx: AtomicU64,
    /// Multi-buffer packets refused: too many frames, no frames for a
    /// reply, or a tx ring without room for the whole chain.
    pub(crate) multi_refused: AtomicU64,
}

impl Ledger {
    pub(crate) fn add(counter: &AtomicI64, n: usize) {
        counter.fetch_add(n as i64, Relaxed);
    }
    pub(crate) fn sub(counter: &AtomicI64, n: usize) {
        counter.fetch_sub(n as i64, Relaxed);
    }

    /// A snapshot of the counters.
    pub fn snapshot(&self) -> LedgerSnapshot {
        LedgerSnapshot {
            free: self.free.load(Relaxed),
            in_rx: self.in_rx.load(Relaxed),
            held: self.held.load(Relaxed),
            in_tx: self.in_tx.load(Relaxed),
            rx_frames: self.rx_frames.load(Relaxed),
            tx_frames: self.tx_frames.load(Relaxed),
            wakeups: self.wakeups.load(Relaxed),
            multi_rx: self.multi_rx.load(Relaxed),
            multi_tx: self.multi_tx.load(Relaxed),
            multi_refused: self.multi_refused.load(Relaxed),
        }
    }
}

/// Counter values of one socket (or summed over sockets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerSnapshot {
    /// In the free pool.
    pub free: i64,
    /// In the fill ring, the kernel's rx side or the rx ring.
    pub in_rx: i64,
    /// Held by the application.
    pub held: i64,
    /// In the tx ring, the kernel's tx side or the completion ring.
    pub in_tx: i64,
    /// Received in total.
    pub rx_frames: u64,
    /// Completed transmissions in total.
    pub tx_frames: u64,
    /// Wakeup system calls.
    pub wakeups: u64,
    /// Multi-buffer packets received.
    pub multi_rx: u64,
    /// Multi-buffer packets transmitted (put on the tx ring).
    pub multi_tx: u64,
    /// Multi-buffer packets refused.
    pub multi_refused: u64,
}

impl std::ops::Add for LedgerSnapshot {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        LedgerSnapshot {
            free: self.free + o.free,
            in_rx: self.in_rx + o.in_rx,
            held: self.held + o.held,
            in_tx: self.in_tx + o.in_tx,
            rx_frames: self.rx_frames + o.rx_frames,
            tx_frames: self.tx_frames + o.tx_frames,
            wakeups: self.wakeups + o.wakeups,
            multi_rx: self.multi_rx + o.multi_rx,
            multi_tx: self.multi_tx + o.multi_tx,
            multi_refused: self.multi_refused + o.multi_refused,
        }
    }
}

/// Ring occupancies of one socket, read from the rings themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingCensus {
    /// Descriptors in the fill ring the kernel has not taken yet.
    pub fill_ring: u32,
    /// Descriptors in the rx ring not yet consumed.
    pub rx_ring: u32,
    /// Descriptors in the tx ring the kernel has not taken yet.
    pub tx_ring: u32,
    /// Descriptors in the completion ring not yet consumed.
    pub completion: u32,
}

/// Where all frames of a UMEM are, at a quiet moment.
///
/// Its serde form (a missing place reads as 0) is the `frames` of a running
/// engine's stats snapshot, which takes it live, while frames move: there
/// the places are approximate and only [`check`](Self::check) at a quiet
/// moment holds.
///
/// ```
/// use steer_xdp::{FrameCensus, LedgerSnapshot, RingCensus};
/// // 64 frames: 16 free, 40 given to the fill ring (30 still there, 10 in
/// // the rx ring), 8 held by the application.
/// let counters = LedgerSnapshot { free: 16, in_rx: 40, held: 8, ..Default::default() };
/// let rings = RingCensus { fill_ring: 30, rx_ring: 10, ..Default::default() };
/// let census = FrameCensus::new(64, counters, rings);
/// assert_eq!(census.kernel_rx, 0);
/// assert!(census.check().is_ok());
/// // One frame fewer accounted for than exist: a leak.
/// assert!(FrameCensus::new(65, counters, rings).check().is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FrameCensus {
    /// Frames in the UMEM.
    pub total: i64,
    /// In free pools.
    pub free: i64,
    /// In fill rings.
    pub fill_ring: i64,
    /// Taken from a fill ring by the kernel, not yet in an rx ring.
    pub kernel_rx: i64,
    /// In rx rings.
    pub rx_ring: i64,
    /// Held by the application (the engine: steer rings, handlers, the
    /// spare pool).
    pub held: i64,
    /// In tx rings.
    pub tx_ring: i64,
    /// Taken from a tx ring by the kernel, not yet in a completion ring.
    pub kernel_tx: i64,
    /// In completion rings.
    pub completion: i64,
}

impl FrameCensus {
    /// Combines the counters (summed over all sockets) and the rings (summed)
    /// of a UMEM of `total` frames.
    pub fn new(total: u32, counters: LedgerSnapshot, rings: RingCensus) -> Self {
        let fill_ring = i64::from(rings.fill_ring);
        let rx_ring = i64::from(rings.rx_ring);
        let tx_ring = i64::from(rings.tx_ring);
        let completion = i64::from(rings.completion);
        FrameCensus {
            total: i64::from(total),
            free: counters.free,
            fill_ring,
            kernel_rx: counters.in_rx - fill_ring - rx_ring,
            rx_ring,
            held: counters.held,
            tx_ring,
            kernel_tx: counters.in_tx - tx_ring - completion,
            completion,
        }
    }

    /// `(name, frames)` of every place, in the order a frame moves.
    pub fn places(&self) -> [(&'static str, i64); 8] {
        [
            ("free", self.free),
            ("fill_ring", self.fill_ring),
            ("kernel_rx", self.kernel_rx),
            ("rx_ring", self.rx_ring),
            ("held", self.held),
            ("tx_ring", self.tx_ring),
            ("kernel_tx", self.kernel_tx),
            ("completion", self.completion),
        ]
    }

    /// The sum of all places.
    pub fn sum(&self) -> i64 {
        self.places().iter().map(|(_, n)| n).sum()
    }

    /// Frames not idle: every frame except those in a free pool or posted
    /// empty on a fill ring.
    pub fn in_use(&self) -> i64 {
        self.total - self.free - self.fill_ring
    }

    /// Checks `total == sum of places` and that no place is negative.
    pub fn check(&self) -> Result<(), String> {
        let places = self.places();
        if let Some((name, v)) = places.iter().find(|(_, v)| *v < 0) {
            return Err(format!("place {name} is negative ({v}): {self:?}"));
        }
        if self.sum() != self.total {
            return Err(format!(
                "frames total {} != sum of places {}: {self:?}",
                self.total,
                self.sum()
            ));
        }
        Ok(())
    }
}

impl std::ops::Add for RingCensus {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        RingCensus {
            fill_ring: self.fill_ring + o.fill_ring,
            rx_ring: self.rx_ring + o.rx_ring,
            tx_ring: self.tx_ring + o.tx_ring,
            completion: self.completion + o.completion,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn census_balances_and_detects_leaks() {
        let counters = LedgerSnapshot {
            free: 10,
            in_rx: 20,
            held: 5,
            in_tx: 7,
            ..Default::default()
        };
        let rings = RingCensus {
            fill_ring: 15,
            rx_ring: 3,
            tx_ring: 2,
            completion: 5,
        };
        let c = FrameCensus::new(42, counters, rings);
        assert_eq!(c.kernel_rx, 2);
        assert_eq!(c.kernel_tx, 0);
        c.check().unwrap();
        // A frame lost from the counters shows up.
        let leak = FrameCensus::new(43, counters, rings);
        assert!(leak.check().unwrap_err().contains("43"));
        // More in the rings than the counters allow is a negative place.
        let bad = FrameCensus::new(
            42,
            counters,
            RingCensus {
                fill_ring: 30,
                ..rings
            },
        );
        assert!(bad.check().unwrap_err().contains("kernel_rx"));
    }

    #[test]
    fn frames_in_use_leave_out_free_and_posted_frames() {
        let f = FrameCensus {
            total: 100,
            free: 40,
            fill_ring: 50,
            held: 6,
            tx_ring: 4,
            ..Default::default()
        };
        assert_eq!(f.in_use(), 10);
        assert_eq!(f.places().iter().map(|p| p.1).sum::<i64>(), 100);
    }
}
