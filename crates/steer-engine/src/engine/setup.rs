//! [`EngineSetup`]: what steer-core's runtime builds on each worker's own
//! thread: pinning and scheduling slice, the classifier and hook of each rx
//! queue (the hooks built at start, while the privileges lasted, handed
//! over; built there and then for a restarted worker), the frame pool, the
//! handler adapter with its transmit path, and
//! the sleeper that watches the worker's doorbell and sockets (a mio poll,
//! or, when the application runs tasks on the workers, the worker's own
//! tokio runtime).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use steer_core::cpu::CpuId;
use steer_core::flow::{AnyHasher, FlowClassifier};
use steer_core::hook::{NoopHook, SteerHook};
use steer_core::runtime::Setup;
use steer_core::wake::Sleeper;
use steer_topology::Topology;
use steer_xdp::frames::{RawFrame, SharedSocket, TxPath, UmemPool};
use tracing::{debug, info, warn};

use super::app::{Application, PacketContext, WorkerHandler};
use super::counters::{EngineCounters, WorkerCounts};
use super::slow_path::SlowPath;
use super::steering::FlowSteering;
use crate::sleep::MioSleeper;
use crate::tasks::WorkerTasks;

/// Builds the steering hook of rx queue `rxq`.
pub(super) type HookFactory =
    std::sync::Arc<dyn Fn(u32) -> Box<dyn steer_core::hook::SteerHook + Send> + Send + Sync>;

/// The hooks built at start, by rx queue, each taken by its dispatcher.
pub(super) type BuiltHooks = Mutex<Vec<Option<Box<dyn SteerHook + Send>>>>;

/// The per-CPU parts the runtime builds on each worker's thread.
pub(super) struct EngineSetup {
    pub(super) topology: Topology,
    pub(super) pin: bool,
    pub(super) slice: Option<Duration>,
    pub(super) hasher: AnyHasher,
    pub(super) use_rx_hash: bool,
    pub(super) pool: UmemPool,
    pub(super) tx_sockets: Vec<SharedSocket>,
    /// The sockets are bound zero-copy: handlers report transmit progress.
    pub(super) zero_copy: bool,
    pub(super) cpus: Vec<CpuId>,
    pub(super) ring_size: usize,
    pub(super) app: Arc<dyn Application>,
    pub(super) counters: Arc<EngineCounters>,
    pub(super) sleepers: Vec<(CpuId, Arc<MioSleeper>)>,
    /// Each worker's executor, when the application runs tasks on the
    /// workers; taken by the worker's thread.
    pub(super) tasks: Mutex<Vec<(CpuId, WorkerTasks)>>,
    /// Set when the engine stops (the workers' tasks get a grace period).
    pub(super) stopping: Arc<AtomicBool>,
    /// What handlers record and pin flows through.
    pub(super) steering: Arc<FlowSteering>,
    pub(super) hooks: Option<HookFactory>,
    /// The hooks built at start (before the privileges dropped); a queue
    /// whose hook was taken already gets a new one from `hooks`.
    pub(super) built_hooks: BuiltHooks,
    /// The slow path's sockets and the workers' inboxes.
    pub(super) slow: Arc<SlowPath>,
}

/// How long a stopping worker lets the tasks it runs see the stop and end.
const TASK_GRACE: Duration = Duration::from_secs(1);

/// A worker's timer slack, nanoseconds.
const WORKER_TIMER_SLACK_NS: u64 = 1_000;

impl Setup<RawFrame> for EngineSetup {
    type Classifier = FlowClassifier<AnyHasher>;
    type Hook = Box<dyn SteerHook + Send>;
    type Pool = UmemPool;
    type Handler = WorkerHandler;

    fn prepare_thread(&self, cpu: CpuId) {
        // Naps (interrupt deferral) and sleep timeouts end when asked, not
        // up to 50 us later (the default timer slack).
        if let Err(e) = nix::sys::prctl::set_timerslack(WORKER_TIMER_SLACK_NS) {
            debug!(cpu, error = %e, "could not set the worker's timer slack");
        }
        if self.pin {
            if let Err(e) = self.topology.pin_current_thread(cpu) {
                warn!(cpu, error = %e, "could not pin a worker; it runs unpinned");
            }
        }
        if let Some(slice) = self.slice {
            match steer_xdp::sched::set_thread_slice(0, slice) {
                Ok(true) => {}
                Ok(false) => info!(
                    cpu,
                    "worker runs under a real-time policy; slice left alone"
                ),
                Err(e) => warn!(cpu, error = %e, "could not set the worker's scheduling slice"),
            }
        }
    }

    fn classifier(&self, _rxq: u32) -> Self::Classifier {
        FlowClassifier::new(self.hasher.clone()).use_rx_hash(self.use_rx_hash)
    }

    fn hook(&self, rxq: u32) -> Self::Hook {
        let built = self
            .built_hooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_mut(rxq as usize)
            .and_then(Option::take);
        match (built, &self.hooks) {
            (Some(hook), _) => hook,
            (None, Some(factory)) => factory(rxq),
            (None, None) => Box::new(NoopHook),
        }
    }

    fn pool(&self, _cpu: CpuId) -> Self::Pool {
        self.pool.clone()
    }

    fn handler(&self, cpu: CpuId) -> Self::Handler {
        let j = self.cpus.iter().position(|&c| c == cpu).unwrap_or(0);
        let socket = Arc::clone(&self.tx_sockets[j % self.tx_sockets.len()]);
        WorkerHandler {
            app: self.app.handler(cpu),
            ctx: PacketContext::new(cpu, Arc::clone(&self.steering)),
            umem: self.pool.umem().clone(),
            tx: TxPath::new(socket, Arc::clone(self.pool.spare()), self.ring_size)
                .with_zero_copy(self.zero_copy),
            counters: Arc::clone(&self.counters),
            local: WorkerCounts::default(),
            slow: self.slow.worker(cpu),
            slow_batch: Vec::new(),
        }
    }

    fn sleeper(&self, cpu: CpuId) -> Box<dyn Sleeper> {
        // Runs on the worker's thread: its executor becomes thread-local.
        let tasks = {
            let mut all = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
            all.iter()
                .position(|(c, _)| *c == cpu)
                .map(|i| all.swap_remove(i).1)
        };
        let sleeper: Box<dyn Sleeper> = match tasks {
            Some(tasks) => Box::new(tasks.install()),
            None => match self.sleepers.iter().find(|(c, _)| *c == cpu) {
                Some((_, s)) => Box::new(SharedSleeper(Arc::clone(s))),
                None => Box::new(steer_core::wake::ThreadSleeper::current()),
            },
        };
        // Called once per worker thread, before its first handler: the
        // application's per-worker tasks start here, not with a handler (a
        // restarted worker builds a new handler on the same thread).
        self.app.worker_started(cpu);
        sleeper
    }

    fn finish_thread(&self, _cpu: CpuId) {
        // The worker thread is ending: so do the tasks it ran
        // (`Application::tasks_on_workers`), after a grace period when the
        // engine is stopping (not when the worker died).
        let grace = self.stopping.load(Ordering::SeqCst).then_some(TASK_GRACE);
        crate::tasks::finish(grace);
    }
}

pub(super) struct SharedSleeper(Arc<MioSleeper>);

impl Sleeper for SharedSleeper {
    fn sleep(&self, timeout: Duration) {
        self.0.sleep(timeout)
    }
    fn wake(&self) {
        self.0.wake()
    }
}
