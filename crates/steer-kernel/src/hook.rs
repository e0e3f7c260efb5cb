//! The steering hook for kernel sockets ([`MapHook`], the
//! `ndo_rx_flow_steer` analog): a desired-table write that moves a flow
//! becomes one write of the flow's CPU into the RFS program's map, through
//! an [`RfsBackend`] (the program itself, or a fake in tests).
//!
//! The hook keeps a shadow of what it placed (flow key -> CPU and filter
//! id), so a write that names the CPU the map already holds costs nothing,
//! and so the sweep can expire idle flows. Each map write of a CPU is the
//! costly update: counted, and its latency recorded in an HDR histogram.
//!
//! Invariants: a flow is in the shadow iff the hook tracked it and placed it
//! in the backend, and has not removed it since; at most `max_flows` flows
//! are placed ([`HookError::Full`](steer_core::hook::HookError::Full) beyond); a failed update leaves the
//! shadow as it was.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;
use steer_core::cpu::CpuId;
use steer_core::hook::{FilterId, FlowMove, HookError, SteerHook};
use steer_xdp::rfs::RfsProgram;
use steer_xdp::{FlowMapKey, XdpError};

/// What the hook needs from the RFS program: the seam its unit tests fill
/// with a fake.
pub trait RfsBackend: Send + Sync {
    /// Starts counting the flow's frames (its state entry).
    fn track(&self, flow: &FlowMapKey) -> Result<(), XdpError>;
    /// Writes the flow's CPU (the costly update).
    fn steer(&self, flow: &FlowMapKey, cpu: u32) -> Result<(), XdpError>;
    /// Removes the flow's entries.
    fn forget(&self, flow: &FlowMapKey) -> Result<(), XdpError>;
    /// Frames of the flow seen so far (`None`: not tracked), for expiry.
    fn seen(&self, flow: &FlowMapKey) -> Result<Option<u64>, XdpError>;
    /// Attaches the UDP delivery counter to a socket.
    fn attach_socket(&self, socket: BorrowedFd<'_>) -> Result<(), XdpError>;
}

impl RfsBackend for RfsProgram {
    fn track(&self, flow: &FlowMapKey) -> Result<(), XdpError> {
        RfsProgram::track(self, flow)
    }
    fn steer(&self, flow: &FlowMapKey, cpu: u32) -> Result<(), XdpError> {
        RfsProgram::steer(self, flow, cpu)
    }
    fn forget(&self, flow: &FlowMapKey) -> Result<(), XdpError> {
        RfsProgram::forget(self, flow)
    }
    fn seen(&self, flow: &FlowMapKey) -> Result<Option<u64>, XdpError> {
        Ok(self.flow(flow)?.map(|f| f.seen))
    }
    fn attach_socket(&self, socket: BorrowedFd<'_>) -> Result<(), XdpError> {
        RfsProgram::attach_socket(self, socket)
    }
}

/// Latencies of the costly updates, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateTimes {
    /// Updates timed.
    pub count: u64,
    /// Mean.
    pub mean_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

/// A placed flow, as the hook remembers it.
#[derive(Debug, Clone, Copy)]
struct Placed {
    cpu: CpuId,
    filter: FilterId,
    /// Frames seen at the last sweep, and sweeps since it last changed.
    seen: u64,
    idle_sweeps: u32,
}

/// The hook writing the RFS program's map.
///
/// ```
/// use std::sync::Arc;
/// use steer_core::hook::{FlowMove, SteerHook};
/// use steer_kernel::{MapHook, Proto, SocketTuple};
/// # use steer_kernel::hook::tests_support::FakeBackend;
/// let backend = Arc::new(FakeBackend::default());
/// let mut hook = MapHook::new(backend.clone(), 1024);
/// let t = SocketTuple::new(Proto::Tcp, "10.0.0.1:80".parse().unwrap(), "10.0.0.2:4000".parse().unwrap());
/// let mv = FlowMove { rxq: 0, bucket: 0, hash: 1, key: Some(t.flow_key()), from: None, to: 1, filter: None };
/// hook.steer(&mv).unwrap();
/// hook.steer(&mv).unwrap(); // the map already says CPU 1: no write
/// assert_eq!((hook.updates(), backend.writes()), (1, 1));
/// ```
pub struct MapHook {
    backend: Arc<dyn RfsBackend>,
    flows: HashMap<FlowMapKey, Placed>,
    by_filter: HashMap<FilterId, FlowMapKey>,
    next_filter: u32,
    max_flows: usize,
    updates: u64,
    errors: u64,
    removes: u64,
    times: Histogram<u64>,
    total_ns: u64,
}

impl std::fmt::Debug for MapHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapHook")
            .field("flows", &self.flows.len())
            .field("updates", &self.updates)
            .field("errors", &self.errors)
            .field("removes", &self.removes)
            .finish_non_exhaustive()
    }
}

impl MapHook {
    /// A hook writing through `backend`, placing at most `max_flows` flows.
    pub fn new(backend: Arc<dyn RfsBackend>, max_flows: usize) -> Self {
        Self {
            backend,
            flows: HashMap::new(),
            by_filter: HashMap::new(),
            next_filter: 0,
            max_flows,
            updates: 0,
            errors: 0,
            removes: 0,
            times: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("1 ns to 60 s at 3 significant digits are valid bounds"),
            total_ns: 0,
        }
    }

    /// Whether `flow` is placed.
    pub fn knows(&self, flow: &FlowMapKey) -> bool {
        self.flows.contains_key(flow)
    }

    /// The CPU `flow` is placed on.
    pub fn cpu_of(&self, flow: &FlowMapKey) -> Option<CpuId> {
        self.flows.get(flow).map(|p| p.cpu)
    }

    /// Flows placed now.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether no flow is placed.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Map writes of a CPU made (the costly updates).
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// Updates that failed.
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// Flows removed (forgotten or expired).
    pub fn removes(&self) -> u64 {
        self.removes
    }

    /// The updates' latencies.
    pub fn times(&self) -> UpdateTimes {
        let h = &self.times;
        let count = h.len();
        UpdateTimes {
            count,
            mean_ns: self.total_ns.checked_div(count).unwrap_or(0),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        }
    }

    /// Replaces the backend (on stop: the program goes, the shadow is
    /// cleared since nothing it describes exists any more).
    pub fn set_backend(&mut self, backend: Arc<dyn RfsBackend>) {
        self.backend = backend;
        self.flows.clear();
        self.by_filter.clear();
    }

    /// The backend (to attach socket filters through).
    pub fn backend(&self) -> &Arc<dyn RfsBackend> {
        &self.backend
    }

    /// Forgets `flow` now (its connection closed): both map entries go.
    pub fn forget(&mut self, flow: &FlowMapKey) {
        if let Some(p) = self.flows.remove(flow) {
            self.by_filter.remove(&p.filter);
            self.removes += 1;
            if let Err(e) = self.backend.forget(flow) {
                tracing::warn!(error = %e, "forgetting a steered flow failed");
            }
        }
    }

    /// The expiry step (the rx table sweep's analog for kernel sockets):
    /// a flow whose frame count has not changed for `idle_sweeps`
    /// consecutive calls, or whose state is gone, is removed. Returns how
    /// many were.
    pub fn sweep(&mut self, idle_sweeps: u32) -> usize {
        let mut expired = Vec::new();
        for (key, p) in &mut self.flows {
            match self.backend.seen(key) {
                Ok(Some(seen)) if seen != p.seen => {
                    p.seen = seen;
                    p.idle_sweeps = 0;
                }
                Ok(Some(_)) => {
                    p.idle_sweeps += 1;
                    if p.idle_sweeps >= idle_sweeps {
                        expired.push(*key);
                    }
                }
                Ok(None) => expired.push(*key),
                Err(e) => tracing::debug!(error = %e, "reading a flow's state failed"),
            }
        }
        for key in &expired {
            self.forget(key);
        }
        expired.len()
    }
}

impl SteerHook for MapHook {
    /// Places `mv.key`'s flow on `mv.to`: tracks it first if it is new, then
    /// writes its CPU (timed), unless the map already holds that CPU.
    fn steer(&mut self, mv: &FlowMove) -> Result<Option<FilterId>, HookError> {
        let key = mv
            .key
            .and_then(|k| FlowMapKey::from_flow(&k))
            .ok_or(HookError::Unsupported)?;
        let cpu = u32::try_from(mv.to).map_err(|_| HookError::Unsupported)?;
        let placed = self.flows.get(&key).copied();
        if let Some(p) = placed.filter(|p| p.cpu == mv.to) {
            return Ok(Some(p.filter));
        }
        if placed.is_none() {
            if self.flows.len() >= self.max_flows {
                self.errors += 1;
                return Err(HookError::Full);
            }
            self.backend.track(&key).map_err(|e| {
                self.errors += 1;
                hook_error(&e)
            })?;
        }
        let start = Instant::now();
        let written = self.backend.steer(&key, cpu);
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if let Err(e) = written {
            self.errors += 1;
            if placed.is_none() {
                let _ = self.backend.forget(&key);
            }
            return Err(hook_error(&e));
        }
        self.updates += 1;
        self.total_ns = self.total_ns.saturating_add(ns);
        let _ = self.times.record(ns.max(1));
        let filter = match placed {
            Some(p) => p.filter,
            None => {
                let id = FilterId(self.next_filter);
                self.next_filter = self.next_filter.wrapping_add(1);
                self.by_filter.insert(id, key);
                id
            }
        };
        let seen = placed.map_or(0, |p| p.seen);
        self.flows.insert(
            key,
            Placed {
                cpu: mv.to,
                filter,
                seen,
                idle_sweeps: 0,
            },
        );
        Ok(Some(filter))
    }

    /// Removes the flow that holds `filter`.
    fn remove(&mut self, _rxq: u32, _bucket: usize, filter: FilterId) {
        if let Some(key) = self.by_filter.get(&filter).copied() {
            self.forget(&key);
        }
    }
}

/// A backend error as the hook reports it.
fn hook_error(e: &XdpError) -> HookError {
    match e {
        XdpError::Map { source, .. } if source.raw_os_error() == Some(libc::E2BIG) => {
            HookError::Full
        }
        XdpError::Map { source, .. } | XdpError::Io { source, .. } => {
            HookError::Os(source.raw_os_error().unwrap_or(0))
        }
        _ => HookError::Unsupported,
    }
}

/// A fake backend for doc tests and tests of code built on the hook.
#[doc(hidden)]
pub mod tests_support {
    use super::*;
    use std::sync::Mutex;

    /// Records what it is asked, succeeds unless told to fail.
    #[derive(Debug, Default)]
    pub struct FakeBackend {
        /// Current CPU per flow, and seen counts.
        pub map: Mutex<HashMap<FlowMapKey, (Option<u32>, u64)>>,
        /// Map writes of a CPU so far.
        pub steers: Mutex<u64>,
        /// Sockets a filter was attached to.
        pub attached: Mutex<u64>,
        /// When set, `steer` fails.
        pub fail: Mutex<bool>,
    }

    impl FakeBackend {
        /// CPU writes made.
        pub fn writes(&self) -> u64 {
            *self.steers.lock().unwrap_or_else(|e| e.into_inner())
        }
        /// The CPU the map holds for `flow`.
        pub fn cpu(&self, flow: &FlowMapKey) -> Option<u32> {
            self.map
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(flow)
                .and_then(|e| e.0)
        }
        /// Adds frames to `flow`'s count (as traffic would).
        pub fn see(&self, flow: &FlowMapKey, frames: u64) {
            if let Some(e) = self
                .map
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(flow)
            {
                e.1 += frames;
            }
        }
    }

    fn full() -> XdpError {
        XdpError::Map {
            map: "fake",
            source: std::io::Error::from_raw_os_error(libc::E2BIG),
            hint: "fake",
        }
    }

    impl RfsBackend for FakeBackend {
        fn track(&self, flow: &FlowMapKey) -> Result<(), XdpError> {
            self.map
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(*flow)
                .or_insert((None, 0));
            Ok(())
        }
        fn steer(&self, flow: &FlowMapKey, cpu: u32) -> Result<(), XdpError> {
            if *self.fail.lock().unwrap_or_else(|e| e.into_inner()) {
                return Err(full());
            }
            *self.steers.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            if let Some(e) = self
                .map
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(flow)
            {
                e.0 = Some(cpu);
            }
            Ok(())
        }
        fn forget(&self, flow: &FlowMapKey) -> Result<(), XdpError> {
            self.map
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(flow);
            Ok(())
        }
        fn seen(&self, flow: &FlowMapKey) -> Result<Option<u64>, XdpError> {
            Ok(self
                .map
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(flow)
                .map(|e| e.1))
        }
        fn attach_socket(&self, _socket: BorrowedFd<'_>) -> Result<(), XdpError> {
            *self.attached.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::FakeBackend;
    use super::*;
    use crate::SocketTuple;
    use steer_xdp::Proto;

    fn mv(t: &SocketTuple, to: CpuId) -> FlowMove {
        FlowMove {
            rxq: 0,
            bucket: 0,
            hash: 7,
            key: Some(t.flow_key()),
            from: None,
            to,
            filter: None,
        }
    }

    fn tuple(port: u16) -> SocketTuple {
        SocketTuple::new(
            Proto::Udp,
            "10.0.0.1:53".parse().unwrap(),
            format!("10.0.0.2:{port}").parse().unwrap(),
        )
    }

    #[test]
    fn places_moves_dedups_and_removes() {
        let backend = Arc::new(FakeBackend::default());
        let mut hook = MapHook::new(backend.clone(), 16);
        let t = tuple(1000);
        let f = hook.steer(&mv(&t, 1)).unwrap().unwrap();
        assert_eq!(backend.cpu(&t.map_key()), Some(1));
        assert_eq!(hook.steer(&mv(&t, 1)).unwrap(), Some(f));
        assert_eq!(hook.steer(&mv(&t, 0)).unwrap(), Some(f), "moved in place");
        assert_eq!((hook.updates(), backend.writes()), (2, 2));
        assert_eq!(backend.cpu(&t.map_key()), Some(0));
        assert_eq!(hook.times().count, 2);
        hook.remove(0, 0, f);
        assert!(hook.is_empty());
        assert_eq!(backend.cpu(&t.map_key()), None);
        assert_eq!(hook.removes(), 1);
    }

    #[test]
    fn budget_and_failures_leave_the_shadow_alone() {
        let backend = Arc::new(FakeBackend::default());
        let mut hook = MapHook::new(backend.clone(), 1);
        hook.steer(&mv(&tuple(1), 0)).unwrap();
        assert_eq!(hook.steer(&mv(&tuple(2), 0)), Err(HookError::Full));
        *backend.fail.lock().unwrap() = true;
        assert_eq!(hook.steer(&mv(&tuple(1), 1)), Err(HookError::Full));
        assert_eq!(hook.cpu_of(&tuple(1).map_key()), Some(0));
        assert_eq!(hook.errors(), 2);
        let keyless = FlowMove {
            key: None,
            ..mv(&tuple(1), 1)
        };
        assert_eq!(hook.steer(&keyless), Err(HookError::Unsupported));
    }

    #[test]
    fn sweep_expires_flows_without_frames() {
        let backend = Arc::new(FakeBackend::default());
        let mut hook = MapHook::new(backend.clone(), 16);
        let (busy, idle) = (tuple(1), tuple(2));
        hook.steer(&mv(&busy, 0)).unwrap();
        hook.steer(&mv(&idle, 0)).unwrap();
        for _ in 0..2 {
            backend.see(&busy.map_key(), 5);
            assert_eq!(hook.sweep(3), 0);
        }
        backend.see(&busy.map_key(), 5);
        assert_eq!(hook.sweep(3), 1, "idle for 3 sweeps");
        assert!(hook.knows(&busy.map_key()) && !hook.knows(&idle.map_key()));
        backend.forget(&busy.map_key()).unwrap();
        assert_eq!(hook.sweep(3), 1, "state gone: forgotten");
    }
}
