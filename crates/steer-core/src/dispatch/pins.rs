//! Explicit affinity (seed 001: the user names the CPU the forwarding work
//! runs on): pin one flow, or every flow to a destination port, to a CPU,
//! overriding what the desired-CPU table learned.
//!
//! Pins change rarely and are read on every packet, so writers publish a new
//! immutable snapshot and bump a version; each dispatcher keeps its own
//! snapshot and re-reads only when the version moved (one relaxed load per
//! batch). An empty snapshot costs one branch per packet.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::cpu::CpuId;

#[derive(Debug, Default, Clone)]
struct Snapshot {
    flows: HashMap<u32, CpuId>,
    ports: HashMap<u16, CpuId>,
}

impl Snapshot {
    fn is_empty(&self) -> bool {
        self.flows.is_empty() && self.ports.is_empty()
    }
}

/// The shared pin set, written by the application.
///
/// ```
/// use steer_core::dispatch::Pins;
/// let pins = Pins::new();
/// let mut reader = pins.reader();
/// pins.pin_port(5353, 1);
/// pins.pin_flow(0xabcd, 0);
/// reader.refresh();
/// assert_eq!(reader.lookup(0xabcd, 5353), Some(0)); // a flow pin wins over its port's
/// assert_eq!(reader.lookup(0x1234, 5353), Some(1));
/// assert_eq!(reader.lookup(0x1234, 80), None);
/// ```
#[derive(Debug, Default)]
pub struct Pins {
    version: AtomicU64,
    current: Mutex<Arc<Snapshot>>,
}

impl Pins {
    /// No pins.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn update(&self, change: impl FnOnce(&mut Snapshot)) {
        let mut guard = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = (**guard).clone();
        change(&mut next);
        *guard = Arc::new(next);
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Steer the flow with hash `hash` to `cpu`, whatever its consumer does.
    pub fn pin_flow(&self, hash: u32, cpu: CpuId) {
        self.update(|s| {
            s.flows.insert(hash, cpu);
        });
    }

    /// Steer every flow to destination port `port` to `cpu` (a listener's
    /// worker), unless the flow itself is pinned.
    pub fn pin_port(&self, port: u16, cpu: CpuId) {
        self.update(|s| {
            s.ports.insert(port, cpu);
        });
    }

    /// Removes the pin of flow `hash`; it follows its consumer again.
    pub fn unpin_flow(&self, hash: u32) {
        self.update(|s| {
            s.flows.remove(&hash);
        });
    }

    /// Removes the pin of port `port`.
    pub fn unpin_port(&self, port: u16) {
        self.update(|s| {
            s.ports.remove(&port);
        });
    }

    /// A reader for one dispatcher.
    pub fn reader(self: &Arc<Self>) -> PinReader {
        let mut r = PinReader {
            pins: Arc::clone(self),
            seen: u64::MAX,
            snapshot: Arc::new(Snapshot::default()),
            empty: true,
        };
        r.refresh();
        r
    }
}

/// One dispatcher's view of the pins.
#[derive(Debug)]
pub struct PinReader {
    pins: Arc<Pins>,
    seen: u64,
    snapshot: Arc<Snapshot>,
    empty: bool,
}

impl PinReader {
    /// Picks up changes since the last refresh (cheap when there are none).
    #[inline]
    pub fn refresh(&mut self) {
        let v = self.pins.version.load(Ordering::Acquire);
        if v != self.seen {
            let guard = self
                .pins
                .current
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.snapshot = Arc::clone(&guard);
            self.seen = v;
            self.empty = self.snapshot.is_empty();
        }
    }

    /// The pinned CPU for a flow with hash `hash` to destination port `port`.
    #[inline]
    pub fn lookup(&self, hash: u32, port: u16) -> Option<CpuId> {
        if self.empty {
            return None;
        }
        self.snapshot
            .flows
            .get(&hash)
            .or_else(|| self.snapshot.ports.get(&port))
            .copied()
    }
}
