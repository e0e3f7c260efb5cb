//! The engine's open flows and who leaves when the budget is full: the
//! conntrack of flow delivery.
//!
//! [`FlowTable`] maps each open flow's 5-tuple to its state and admits new
//! flows against the [`FlowLimits`]: a per-source token bucket first
//! (refused: `rate_limited`), then the total and the receiving worker's
//! budget. At the budget it evicts, in this order:
//! 1. an *unassured* flow, oldest first: one that has not sent a datagram
//!    after a reply was sent on it (a one-shot probe, a spoofed source that
//!    never saw the reply, a flow whose exchange is over). Like conntrack's
//!    ASSURED bit, only real two-way traffic makes a flow worth keeping;
//! 2. else an assured flow not touched since the eviction clock last passed
//!    it (CLOCK, the usual approximation of least recently used);
//! 3. else nobody: the new flow is refused (`refused`).
//!
//! Evictions are paced ([`FlowLimits::evictions_per_second`]): once the
//! bucket is empty, new flows are refused (`refused`) rather than
//! replacing open ones, so a spray costs the application at most that many
//! flow replacements a second, however fast it sends. A flow's first
//! datagram draws on a slower pace of its own
//! ([`FlowLimits::first_try_evictions_per_second`]); a flow refused a
//! moment ago that sends again ([`Refused`]: a client retrying, which a
//! spray of one-datagram flows never does) draws on the whole pace, so
//! under a spray the replacements go to retrying clients first.
//! The table drives the XDP new-flow gate (`gate`): it counts every flow it
//! holds there, closes it at the full budget and opens it a sixteenth
//! below; behind a closed gate every arrival is a retry.
//!
//! Invariants:
//! - `open` (total and per worker) counts exactly the flows in the map, and
//!   never exceeds the limits after an admission.
//! - No assured flow is evicted while the worker's queues hold an
//!   unassured one; an evicted flow is marked closed and its reader woken
//!   (its `recv` ends), its queued datagrams freed.
//! - The eviction queues hold each open flow once, plus closed flows not
//!   yet skipped; they are compacted when the dead outnumber the live, so
//!   their size stays within twice the open flows (plus a constant).
//! - Eviction work per new flow is bounded ([`CLOCK_SCAN`] assured flows at
//!   most; unassured ones are each looked at once in their life).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use steer_core::flow::{FlowAddrs, FlowKey};

use super::budget::{FlowLimits, SourceLimiter, Tokens};
use super::flow::FlowShared;
use super::gate::FlowGate;
use super::retries::Refused;

/// The flow map is allocated for at most this many flows at start (more
/// grow it as they come).
pub(crate) const MAX_PRESIZED_FLOWS: usize = 1 << 18;

/// Assured flows the eviction clock looks at, at most, for one new flow.
pub(crate) const CLOCK_SCAN: usize = 64;

/// Why a new flow was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its source is over its new-flow rate.
    RateLimited,
    /// The budget is full of recently active assured flows, or evictions
    /// are over their pace.
    Full,
}

/// Why a flow was evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Eviction {
    /// It had no two-way traffic.
    Unassured,
    /// The least recently active of the assured flows.
    Idle,
}

/// The flows one worker received first.
#[derive(Debug, Default)]
struct Home {
    open: usize,
    unassured: VecDeque<Arc<FlowShared>>,
    assured: VecDeque<Arc<FlowShared>>,
}

impl Home {
    fn queued(&self) -> usize {
        self.unassured.len() + self.assured.len()
    }

    /// Drops closed flows from the queues when they outnumber the open.
    fn compact(&mut self) {
        if self.queued() > 2 * self.open + 64 {
            self.unassured.retain(|f| !f.is_closed());
            self.assured.retain(|f| !f.is_closed());
        }
    }

    /// The flow to evict, taken off the queues; `None`: every flow here is
    /// assured and was active since the clock last passed it.
    fn victim(&mut self) -> Option<(Arc<FlowShared>, Eviction)> {
        while let Some(f) = self.unassured.pop_front() {
            if f.is_closed() {
                continue;
            }
            if f.assured.load(Relaxed) {
                self.assured.push_back(f);
                continue;
            }
            return Some((f, Eviction::Unassured));
        }
        for _ in 0..self.assured.len().min(CLOCK_SCAN) {
            let f = self.assured.pop_front()?;
            if f.is_closed() {
                continue;
            }
            if f.referenced.swap(false, Relaxed) {
                self.assured.push_back(f);
                continue;
            }
            return Some((f, Eviction::Idle));
        }
        None
    }
}

/// Counters of the table's decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TableCounts {
    pub(crate) refused: u64,
    pub(crate) rate_limited: u64,
    pub(crate) evicted_unassured: u64,
    pub(crate) evicted_idle: u64,
    /// Flows admitted at the budget as the retry of a refused one.
    pub(crate) retries_admitted: u64,
}

/// The open flows of an engine and their budget.
#[derive(Debug)]
pub(crate) struct FlowTable {
    map: HashMap<FlowKey, Arc<FlowShared>>,
    homes: Vec<Home>,
    open: usize,
    limits: FlowLimits,
    sources: SourceLimiter,
    /// The eviction pace's bucket (rate `limits.evictions_per_second`, a
    /// second's worth deep).
    evictions: Tokens,
    /// First tries' share of it (rate
    /// `limits.first_try_evictions_per_second`, a second's worth deep).
    first_tries: Tokens,
    /// Flows refused a moment ago, to tell a retry.
    refused: Refused,
    /// The XDP program's new-flow gate, closed while the budget is full.
    pub(crate) gate: FlowGate,
    pub(crate) counts: TableCounts,
}

/// The source address of a flow as received.
pub(crate) fn source_of(key: &FlowKey) -> IpAddr {
    match key.addrs {
        FlowAddrs::V4 { src, .. } => IpAddr::V4(src),
        FlowAddrs::V6 { src, .. } => IpAddr::V6(src),
    }
}

impl FlowTable {
    pub(crate) fn new(limits: FlowLimits, workers: usize) -> Self {
        Self {
            // Sized for the whole budget at start: growing a large map
            // rehashes every flow under the admissions lock, in the very
            // moment a spray fills the table (only control bytes are
            // touched until used).
            map: HashMap::with_capacity(limits.max_flows.min(MAX_PRESIZED_FLOWS)),
            homes: (0..workers.max(1)).map(|_| Home::default()).collect(),
            open: 0,
            sources: SourceLimiter::new(&limits),
            evictions: Tokens::full(limits.evictions_per_second.max(1.0), 0),
            first_tries: Tokens::full(limits.first_try_evictions_per_second.max(1.0), 0),
            refused: Refused::default(),
            gate: FlowGate::default(),
            limits,
            counts: TableCounts::default(),
        }
    }

    /// Lowers the budget to at most `max_flows` open flows (in all and per
    /// worker); flows open past it leave as new ones need room.
    pub(crate) fn limit(&mut self, max_flows: usize) {
        let max = max_flows.max(1);
        self.limits.max_flows = self.limits.max_flows.min(max);
        self.limits.max_flows_per_worker = self.limits.max_flows_per_worker.min(max);
        self.gate.follow(self.open, self.limits.max_flows);
    }

    /// The table with `gate` following its budget.
    pub(crate) fn with_gate(mut self, gate: FlowGate) -> Self {
        self.gate = gate;
        self
    }

    /// Whether the new-flow gate is closed (the budget is full): a new
    /// flow that reaches the table now passed the gate as a retry.
    pub(crate) fn gate_closed(&self) -> bool {
        self.gate.is_closed()
    }

    pub(crate) fn limits(&self) -> &FlowLimits {
        &self.limits
    }

    pub(crate) fn open(&self) -> usize {
        self.open
    }

    pub(crate) fn get(&self, key: &FlowKey) -> Option<&Arc<FlowShared>> {
        self.map.get(key)
    }

    /// Makes room for a new flow of `key` received by worker `home` at
    /// `now_ns`: takes the source's token, evicts what the budget requires
    /// (closing each evicted flow and waking its reader). `Err`: refused
    /// (counted), nothing evicted.
    pub(crate) fn admit(&mut self, key: &FlowKey, home: usize, now_ns: u64) -> Result<(), Refusal> {
        let home = home.min(self.homes.len() - 1);
        if !self.sources.allow(source_of(key), now_ns) {
            self.counts.rate_limited += 1;
            return Err(Refusal::RateLimited);
        }
        let at_budget = |t: &Self| {
            t.homes[home].open >= t.limits.max_flows_per_worker || t.open >= t.limits.max_flows
        };
        let mut first_try = false;
        if at_budget(self) {
            let rate = self.limits.evictions_per_second;
            let first = self.limits.first_try_evictions_per_second;
            // Behind a closed gate, the first tries were dropped in XDP.
            let retry = self.refused.take(key) || self.gate.is_closed();
            first_try = !retry;
            let paced = self.evictions.ready(rate, rate.max(1.0), now_ns)
                && (retry || self.first_tries.ready(first, first.max(1.0), now_ns));
            if !paced {
                self.refused.remember(key);
                self.counts.refused += 1;
                return Err(Refusal::Full);
            }
            if retry {
                self.counts.retries_admitted += 1;
            }
        }
        while at_budget(self) {
            // Room is made among the flows of the receiving worker; when it
            // has none (the total is what binds), among the largest's.
            let from = if self.homes[home].open > 0 {
                home
            } else {
                (0..self.homes.len())
                    .max_by_key(|&h| self.homes[h].open)
                    .unwrap_or(home)
            };
            let Some((victim, why)) = self.homes[from].victim() else {
                self.refused.remember(key);
                self.counts.refused += 1;
                return Err(Refusal::Full);
            };
            self.evictions.take();
            if first_try {
                self.first_tries.take();
            }
            self.remove(&victim);
            victim.evict();
            match why {
                Eviction::Unassured => self.counts.evicted_unassured += 1,
                Eviction::Idle => self.counts.evicted_idle += 1,
            }
        }
        Ok(())
    }

    /// Whether a flow of `key` was refused a moment ago: its next datagram
    /// is a retry.
    pub(crate) fn refused_before(&self, key: &FlowKey) -> bool {
        self.refused.contains(key)
    }

    /// Remembers a flow of `key` refused before the table saw it (by the
    /// start bound or the admission delay), so its retry is known.
    pub(crate) fn remember_refused(&mut self, key: &FlowKey) {
        self.refused.remember(key);
    }

    /// Adds an admitted flow.
    pub(crate) fn insert(&mut self, flow: Arc<FlowShared>) {
        let home = flow.home.min(self.homes.len() - 1);
        if let Some(old) = self.map.insert(flow.key, Arc::clone(&flow)) {
            // Not expected (a key is looked up before admission): keep the
            // counts true anyway.
            let last = self.homes.len() - 1;
            self.homes[old.home.min(last)].open -= 1;
            self.open -= 1;
            self.gate.removed(&old.key);
        }
        self.gate.added(&flow.key);
        let h = &mut self.homes[home];
        h.open += 1;
        h.unassured.push_back(flow);
        h.compact();
        self.open += 1;
        self.gate.follow(self.open, self.limits.max_flows);
    }

    /// Removes `flow` if it is the open flow of its key (its reader went
    /// away); `false` if it was not (evicted before, or never admitted).
    pub(crate) fn remove(&mut self, flow: &Arc<FlowShared>) -> bool {
        if !self
            .map
            .get(&flow.key)
            .is_some_and(|f| Arc::ptr_eq(f, flow))
        {
            return false;
        }
        self.map.remove(&flow.key);
        let last = self.homes.len() - 1;
        let h = &mut self.homes[flow.home.min(last)];
        h.open -= 1;
        // The flow stays queued until skipped or compacted away.
        if flow.is_closed() {
            h.compact();
        }
        self.open -= 1;
        self.gate.removed(&flow.key);
        self.gate.follow(self.open, self.limits.max_flows);
        true
    }

    /// Every open flow (at stop).
    pub(crate) fn flows(&self) -> impl Iterator<Item = &Arc<FlowShared>> {
        self.map.values()
    }

    #[cfg(test)]
    fn queued(&self) -> usize {
        self.homes.iter().map(Home::queued).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flows::budget::{FlowBudget, HostResources};
    use crate::flows::reply::ReplyTemplate;
    use steer_core::flow::flow_key;
    use steer_core::packet::build::FrameBuilder;

    const HOST: HostResources = HostResources {
        nofile: 1 << 20,
        fds_open: 0,
        mem_available: 1 << 34,
    };

    fn table(max: usize, per_source: u32, workers: usize) -> FlowTable {
        let limits = FlowBudget {
            max_flows: max,
            max_flows_per_worker: max,
            new_flows_per_source: per_source,
            fds_per_flow: 1,
            evictions_per_second: u32::MAX,
        }
        .resolve(workers, &HOST);
        FlowTable::new(limits, workers)
    }

    fn frame(src: &str, sport: u16) -> Vec<u8> {
        let src: IpAddr = src.parse().unwrap();
        FrameBuilder::udp(src, "192.0.2.1".parse().unwrap(), sport, 7000)
            .payload(b"x")
            .build()
    }

    /// Admits and inserts the flow of `src:sport` on worker `home`.
    fn open(t: &mut FlowTable, src: &str, sport: u16, home: usize) -> Option<Arc<FlowShared>> {
        open_at(t, src, sport, home, 0)
    }

    fn open_at(
        t: &mut FlowTable,
        src: &str,
        sport: u16,
        home: usize,
        now_ns: u64,
    ) -> Option<Arc<FlowShared>> {
        let f = frame(src, sport);
        let key = flow_key(&f).unwrap().unwrap();
        t.admit(&key, home, now_ns).ok()?;
        let shared = Arc::new(FlowShared::new(
            key,
            1,
            4,
            ReplyTemplate::from_request(&f).unwrap(),
            home,
            0,
        ));
        t.insert(Arc::clone(&shared));
        Some(shared)
    }

    /// A request, a reply, another request: two-way traffic.
    fn assure(f: &FlowShared) {
        assert!(f.deliver(b"q1".to_vec()));
        f.replied();
        assert!(f.deliver(b"q2".to_vec()));
        assert!(f.assured.load(Relaxed));
    }

    #[test]
    fn evictions_are_paced_and_past_the_pace_new_flows_are_refused() {
        let limits = FlowBudget {
            max_flows: 8,
            new_flows_per_source: u32::MAX,
            evictions_per_second: 10,
            ..FlowBudget::default()
        }
        .resolve(1, &HOST);
        let mut t = FlowTable::new(limits, 1);
        let mut admitted = 0;
        for i in 0..100u16 {
            admitted += usize::from(open_at(&mut t, "198.18.0.1", i, 0, 0).is_some());
        }
        // 8 fill the table, a second's worth (10) replace some, 82 refused.
        assert_eq!(admitted, 18);
        assert_eq!(t.counts.evicted_unassured, 10);
        assert_eq!(t.counts.refused, 82);
        // Half a second later, five more replacements.
        for i in 100..200u16 {
            let _ = open_at(&mut t, "198.18.0.1", i, 0, 500_000_000);
        }
        assert_eq!(t.counts.evicted_unassured, 15);
        assert_eq!(t.open(), 8);
    }

    #[test]
    fn the_gate_closes_when_the_table_fills_and_then_every_arrival_is_a_retry() {
        let limits = FlowBudget {
            max_flows: 32,
            new_flows_per_source: u32::MAX,
            evictions_per_second: 100,
            ..FlowBudget::default()
        }
        .resolve(1, &HOST);
        let mut t = FlowTable::new(limits, 1).with_gate(FlowGate::simulated());
        let flows: Vec<_> = (0..32u16)
            .map(|i| open_at(&mut t, "198.18.0.1", i, 0, 0).unwrap())
            .collect();
        assert!(t.gate_closed());
        assert_eq!(t.gate.closings, 1);
        // Behind the closed gate the XDP program dropped the first tries:
        // what arrives draws on the whole pace (100), not the first tries'
        // share (20).
        let admitted = (100..300u16)
            .filter(|&i| open_at(&mut t, "198.18.0.2", i, 0, 0).is_some())
            .count();
        assert_eq!(admitted, 100);
        assert_eq!(t.counts.retries_admitted, 100);
        // Flows leave (their readers went away): one under the budget is
        // not a sixteenth (2), the gate stays closed; two is.
        let open: Vec<_> = t.flows().cloned().collect();
        assert!(t.remove(&open[0]));
        assert!(t.gate_closed());
        assert!(t.remove(&open[1]));
        assert!(!t.gate_closed());
        drop(flows);
    }

    #[test]
    fn a_lowered_budget_binds_and_closes_the_gate() {
        let mut t = table(16, u32::MAX, 1).with_gate(FlowGate::simulated());
        for i in 0..10u16 {
            assert!(open(&mut t, "198.18.0.1", i, 0).is_some());
        }
        assert!(!t.gate_closed());
        t.limit(10);
        assert_eq!(
            (t.limits().max_flows, t.limits().max_flows_per_worker),
            (10, 10)
        );
        assert!(t.gate_closed());
        // A new flow now replaces one.
        assert!(open(&mut t, "198.18.0.2", 1, 0).is_some());
        assert_eq!(t.open(), 10);
        assert_eq!(t.counts.evicted_unassured, 1);
    }

    #[test]
    fn a_retry_gets_the_room_a_spray_of_first_tries_cannot_take() {
        let limits = FlowBudget {
            max_flows: 8,
            new_flows_per_source: u32::MAX,
            evictions_per_second: 100,
            ..FlowBudget::default()
        }
        .resolve(1, &HOST);
        assert_eq!(limits.first_try_evictions_per_second, 20.0);
        let mut t = FlowTable::new(limits, 1);
        // The table full, then the client's first datagram: refused, the
        // spray has taken the first tries' share.
        let mut admitted = 0;
        for i in 0..100u16 {
            admitted += usize::from(open_at(&mut t, "198.18.0.1", i, 0, 0).is_some());
        }
        assert_eq!(
            admitted,
            8 + 20,
            "the fill and a second's worth of first tries"
        );
        assert!(open_at(&mut t, "198.51.100.7", 5000, 0, 0).is_none());
        assert!(
            open_at(&mut t, "198.18.0.2", 7, 0, 0).is_none(),
            "a new first try"
        );
        // Its retry is admitted from the rest of the pace.
        let client = open_at(&mut t, "198.51.100.7", 5000, 0, 0);
        assert!(client.is_some_and(|c| !c.is_closed()));
        assert_eq!(t.counts.retries_admitted, 1);
        let mut retried = 0;
        for i in 0..100u16 {
            retried += usize::from(open_at(&mut t, "198.18.0.1", i, 0, 0).is_some());
        }
        // The 72 refused spray flows come back in (79 of the pace's 100
        // left); the 28 admitted before are first tries now, refused.
        assert_eq!(retried, 72);
        assert_eq!(t.counts.retries_admitted, 73);
        // A flow refused before the table (the start bound, the admission
        // delay) is remembered the same way: its retry draws on the pace.
        let late = flow_key(&frame("198.51.100.8", 6000)).unwrap().unwrap();
        assert!(!t.refused_before(&late));
        t.remember_refused(&late);
        assert!(t.refused_before(&late));
        assert!(open_at(&mut t, "198.51.100.8", 6000, 0, 0).is_some());
        assert_eq!(t.counts.retries_admitted, 74);
        assert_eq!(t.open(), 8);
    }

    #[test]
    fn a_spray_evicts_unassured_flows_oldest_first_and_never_the_assured() {
        let mut t = table(8, u32::MAX, 1);
        let client = open(&mut t, "198.51.100.7", 5000, 0).unwrap();
        assure(&client);
        let mut spray = Vec::new();
        for i in 0..1000u16 {
            let f = open(&mut t, "198.18.0.1", 10_000 + i, 0).expect("room is made");
            spray.push(f);
            // The client keeps talking.
            client.deliver(b"q".to_vec());
            assert!(t.open() <= 8);
        }
        assert!(!client.is_closed(), "the assured client was evicted");
        assert!(t.get(&client.key).is_some());
        assert_eq!(t.counts.evicted_unassured, 1000 - 7);
        assert_eq!(t.counts.evicted_idle, 0);
        // The oldest spray flows went first; the last seven are open.
        assert!(spray[..993].iter().all(|f| f.is_closed()));
        assert!(spray[993..].iter().all(|f| !f.is_closed()));
        assert!(t.queued() <= 2 * t.open() + 64 + 1);
    }

    #[test]
    fn without_unassured_flows_the_idle_assured_go_and_then_new_flows_are_refused() {
        let mut t = table(4, u32::MAX, 1);
        let flows: Vec<_> = (0..4)
            .map(|i| open(&mut t, "198.51.100.1", 100 + i, 0).unwrap())
            .collect();
        for f in &flows {
            assure(f);
        }
        // Flows 1..4 keep talking; flow 0 goes quiet after one clock pass.
        let newcomer = open(&mut t, "198.51.100.2", 1, 0);
        // The first pass clears every referenced bit and finds none idle.
        assert!(newcomer.is_none());
        assert_eq!(t.counts.refused, 1);
        for f in &flows[1..] {
            f.deliver(b"again".to_vec());
        }
        let newcomer = open(&mut t, "198.51.100.2", 1, 0).expect("the idle one makes room");
        assert!(flows[0].is_closed());
        assert!(flows[1..].iter().all(|f| !f.is_closed()));
        assert_eq!(t.counts.evicted_idle, 1);
        assert!(!newcomer.is_closed());
    }

    #[test]
    fn one_source_is_held_to_its_rate_and_others_still_get_in() {
        let mut t = table(10_000, 50, 1);
        let admitted = (0..1000u16)
            .filter(|&i| open(&mut t, "198.18.0.9", i, 0).is_some())
            .count();
        assert_eq!(admitted, 100, "the burst: twice the rate");
        assert_eq!(t.counts.rate_limited, 900);
        assert!(open(&mut t, "198.51.100.3", 1, 0).is_some());
    }

    #[test]
    fn the_per_worker_budget_binds_before_the_total() {
        let limits = FlowBudget {
            max_flows: 10,
            max_flows_per_worker: 3,
            new_flows_per_source: u32::MAX,
            fds_per_flow: 1,
            evictions_per_second: 0,
        }
        .resolve(2, &HOST);
        let mut t = FlowTable::new(limits, 2);
        for i in 0..10 {
            open(&mut t, "198.18.0.1", i, 0).unwrap();
        }
        assert_eq!(t.open(), 3);
        for i in 0..10 {
            open(&mut t, "198.18.0.1", 100 + i, 1).unwrap();
        }
        assert_eq!(t.open(), 6);
    }

    #[test]
    fn closed_flows_leave_the_count_and_the_queues_stay_bounded() {
        let mut t = table(100_000, u32::MAX, 1);
        for i in 0..5000u16 {
            let f = open(&mut t, "198.18.0.1", i, 0).unwrap();
            // The reader goes away at once.
            f.closed.store(true, Relaxed);
            assert!(t.remove(&f));
            assert!(!t.remove(&f));
        }
        assert_eq!(t.open(), 0);
        assert!(t.queued() <= 64 + 1, "queues hold {}", t.queued());
    }

    #[test]
    fn an_evicted_flow_is_closed_and_its_datagrams_freed() {
        let mut t = table(1, u32::MAX, 1);
        let first = open(&mut t, "198.18.0.1", 1, 0).unwrap();
        assert!(first.deliver(b"queued".to_vec()));
        let _second = open(&mut t, "198.18.0.1", 2, 0).unwrap();
        assert!(first.is_closed() && first.is_evicted());
        assert!(first.pop().is_none());
        assert!(!first.deliver(b"late".to_vec()));
    }
}
