//! The worker: one pinned thread per CPU of the runtime, like NAPI plus
//! `process_backlog` (see the [`runtime`](super) module docs for the loop).
//!
//! - Start ([`Startup::run`]): prepare the thread (pinning), announce the
//!   worker's doorbell, wait until `Runtime::start` has published the shared
//!   state, build the dispatchers of the rx queues it starts with.
//! - Run: poll its rx queues and dispatch, drain its inbound rings, flush the
//!   handler (its staged replies go out), and only then publish the rings'
//!   heads past the packets drained (so a ring's head never passes a packet
//!   whose reply is still staged: see [`Worker::flush`]); count the rounds
//!   that did work as busy time (one clock read per round); tick the flow
//!   tables' clock and expire idle flows once per tick (a small budget
//!   under load, a larger one when idle), sleep on its doorbell (rounds
//!   without work that do not sleep give the sleeper its
//!   [`Sleeper::idle`] turn).
//! - Adoption: rx queues left by a worker that died are taken over by
//!   whichever survivor sees them first.
//! - Finish (stop requested): drain until every running worker has stopped
//!   polling, so no frame is left in a ring, then flush.
//! - Restart ([`Worker::run`] catches the unwind; within
//!   [`RuntimeConfig::worker_restarts`](super::RuntimeConfig::worker_restarts)):
//!   the old handler's staged replies go out and only then are the rings'
//!   heads published past what it took (the packet it panicked on was
//!   handed over, counted as processed, and is lost); a fresh handler replaces it, the rest
//!   of an interrupted rx batch is dispatched with it, and the loop goes
//!   on with the same CPU, rings and rx queues.
//! - Panic recovery past the restart limit: the CPU is marked
//!   offline, the batch being dispatched goes back to its source, frames
//!   queued to the worker return to the pool (counted in `worker_gone_drops`), its rings
//!   are abandoned so dispatchers route around it, and its rx queues are
//!   handed to the survivors.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Barrier, PoisonError};
use std::time::{Duration, Instant};

use super::coalesce::CoalesceWindow;
use super::hold::HeldHeads;
use super::idle::SpinWindow;
use super::restart::RestartHistory;
use super::{Common, CommonSlot, RpsMode, RxSource, Setup, WorkerState};
use crate::cpu::{CpuId, CpuSet};
use crate::dispatch::{wait_completed, Dispatcher, FlowLimit, FramePool, Handler, COMPLETION_WAIT};
use crate::hook::SteerHook;
use crate::ring::{Consumer, Producer};
use crate::stats::LocalStats;
use crate::table::{RxFlowTable, Tick};
use crate::wake::{Doorbell, Sleeper};

/// An rx queue and its dispatcher, as a worker runs them.
pub(super) struct RxPart<D, C, H: SteerHook, S> {
    dispatcher: Dispatcher<D, C, H>,
    source: S,
}

/// The [`RxPart`] of a [`Setup`].
pub(super) type Part<D, St> =
    RxPart<D, <St as Setup<D>>::Classifier, <St as Setup<D>>::Hook, Box<dyn RxSource<D>>>;

/// A ring from one rx queue's dispatcher to this worker.
pub(super) struct Inbound<D> {
    /// The rx queue whose dispatcher feeds this ring.
    pub(super) rxq: usize,
    pub(super) consumer: Consumer<D>,
}

impl<D> AsMut<Consumer<D>> for Inbound<D> {
    fn as_mut(&mut self) -> &mut Consumer<D> {
        &mut self.consumer
    }
}

/// An rx queue a worker starts with: its index, the producers of its
/// dispatcher's rings to every worker, and its source.
pub(super) type PartSeed<D> = (usize, Vec<Option<Producer<D>>>, Box<dyn RxSource<D>>);

/// Everything a worker thread starts from, moved into it by
/// `Runtime::start`.
pub(super) struct Startup<D, St: Setup<D>> {
    pub(super) cpu: CpuId,
    pub(super) setup: Arc<St>,
    /// The rings from every rx queue's dispatcher to this worker.
    pub(super) inbound: Vec<Inbound<D>>,
    /// The rx queues this worker dispatches.
    pub(super) parts: Receiver<PartSeed<D>>,
    /// Where the worker announces its doorbell.
    pub(super) bell_tx: Sender<(CpuId, Arc<Doorbell>)>,
    /// Passed twice: all doorbells known, then `Common` published.
    pub(super) ready: Arc<Barrier>,
    pub(super) common: CommonSlot<D, St>,
}

impl<D, St> Startup<D, St>
where
    D: Copy + Send + Default + 'static,
    St: Setup<D>,
{
    /// The worker thread's body.
    pub(super) fn run(self) {
        let Self {
            cpu,
            setup,
            inbound,
            parts,
            bell_tx,
            ready,
            common: slot,
        } = self;
        setup.prepare_thread(cpu);
        let bell = Doorbell::new(BoxedSleeper(setup.sleeper(cpu)));
        let _ = bell_tx.send((cpu, bell.clone()));
        drop(bell_tx);
        ready.wait(); // all bells known
        ready.wait(); // common published
        let common = slot.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let Some(common) = common else { return };
        let rx = parts
            .into_iter()
            .map(|(rxq, producers, source)| {
                let rxq = rxq as u32;
                let table =
                    RxFlowTable::with_hook(rxq, common.cfg.rx_table_entries, setup.hook(rxq))
                        .unwrap_or_else(|_| unreachable_table());
                let mut d = Dispatcher::new(
                    cpu,
                    rxq,
                    setup.classifier(rxq),
                    table,
                    producers,
                    match common.cfg.rps {
                        RpsMode::Spread => common.cfg.cpus,
                        RpsMode::Local => CpuSet::default(),
                    },
                    common.shared.clone(),
                );
                for (c, b) in common.bells.iter().enumerate() {
                    if let Some(b) = b {
                        d.set_doorbell(c, b.clone());
                    }
                }
                // Validated in `Runtime::start`.
                if let Some(limit) = FlowLimit::new(common.cfg.flow_limit_buckets) {
                    d.set_flow_limit(&limit);
                }
                RxPart {
                    dispatcher: d,
                    source,
                }
            })
            .collect();
        Worker::new(cpu, common, inbound, rx, bell).run();
        setup.finish_thread(cpu);
    }
}

fn unreachable_table() -> ! {
    // The size was validated in `Runtime::start`.
    panic!("rx table size validated at start")
}

/// Worker rounds between two moves of the flow tables' tick.
const TICK_EVERY: u32 = 64;

/// Rx-table buckets swept per tick (at most once a millisecond) while the
/// worker is busy: 8 000 a second, a whole 4096-bucket table in half a
/// second, a few hundred nanoseconds a millisecond.
const SWEEP_BUDGET_BUSY: usize = 8;

/// Rx-table buckets swept per tick while the worker is idle.
const SWEEP_BUDGET_IDLE: usize = 64;

/// How long an idle worker whose ring heads are held for tx completions
/// (zero-copy mode) naps instead of sleeping: the device completes within
/// microseconds, and nobody rings the doorbell when it does.
const HOLD_NAP: Duration = Duration::from_micros(20);

/// How long a stopping worker waits for the others to stop polling.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(2);

struct BoxedSleeper(Box<dyn Sleeper>);

impl Sleeper for BoxedSleeper {
    fn sleep(&self, timeout: Duration) {
        self.0.sleep(timeout)
    }
    fn wake(&self) {
        self.0.wake()
    }
    fn idle(&self) {
        self.0.idle()
    }
}

struct Worker<D, St: Setup<D>> {
    cpu: CpuId,
    common: Arc<Common<D, St>>,
    inbound: Vec<Inbound<D>>,
    rx: Vec<Part<D, St>>,
    pool: St::Pool,
    handler: St::Handler,
    /// Ring heads held until the handler's replies completed (zero-copy).
    held: HeldHeads,
    bell: Arc<Doorbell>,
    buf: Vec<D>,
    /// Descriptors in `buf` from the last poll, where in `buf` the batch
    /// being dispatched starts, and its rx part (for recovery when the
    /// handler panics mid-batch).
    polled: usize,
    batch_from: usize,
    dispatching: Option<usize>,
    /// A batch interrupted by a panic, to finish after a restart: the rx
    /// part and where in `buf` the undispatched rest starts.
    interrupted: Option<(usize, usize)>,
    local: LocalStats,
    start: Instant,
    /// `DispatchSwitches::layout_epoch` as last seen.
    layout_epoch: u64,
}

impl<D, St> Worker<D, St>
where
    D: Copy + Send + Default + 'static,
    St: Setup<D>,
{
    fn new(
        cpu: CpuId,
        common: Arc<Common<D, St>>,
        inbound: Vec<Inbound<D>>,
        rx: Vec<Part<D, St>>,
        bell: Arc<Doorbell>,
    ) -> Self {
        let pool = common.setup.pool(cpu);
        let handler = common.setup.handler(cpu);
        let batch = common.cfg.batch.max(1);
        Self {
            cpu,
            common,
            held: HeldHeads::new(inbound.len()),
            inbound,
            rx,
            pool,
            handler,
            bell,
            buf: vec![D::default(); batch],
            polled: 0,
            batch_from: 0,
            dispatching: None,
            interrupted: None,
            local: LocalStats::default(),
            start: Instant::now(),
            // Not the current epoch: a change between this thread's
            // preparation and now must not go unseen (preparing again is
            // harmless).
            layout_epoch: 0,
        }
    }

    fn run(mut self) {
        let mut restarts = RestartHistory::default();
        loop {
            match catch_unwind(AssertUnwindSafe(|| self.run_loop())) {
                Ok(()) => {
                    self.finish();
                    self.set_state(WorkerState::Stopped);
                    return;
                }
                Err(panic) => {
                    let msg = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    let limit = self.common.cfg.worker_restarts;
                    if restarts.allow(&limit, Instant::now()) && self.restart(&msg) {
                        continue;
                    }
                    self.die(msg);
                    return;
                }
            }
        }
    }

    /// The handler panicked and a restart is allowed: the worker goes on
    /// with a fresh handler on the same CPU, rings and rx queues. Returns
    /// false when no fresh handler could be built (then the worker dies).
    fn restart(&mut self, msg: &str) -> bool {
        // The replies staged for packets handled before the panic go out
        // before any ring head passes those packets (the drain that
        // panicked published nothing); then the heads move past everything
        // taken, the packet that panicked included.
        let _ = catch_unwind(AssertUnwindSafe(|| self.handler.flush(&mut self.pool)));
        self.settle();
        let setup = Arc::clone(&self.common.setup);
        let cpu = self.cpu;
        let Ok(fresh) = catch_unwind(AssertUnwindSafe(|| setup.handler(cpu))) else {
            return false;
        };
        // The packet it panicked on was counted as processed (handed over):
        // what became of it is the handler's to count.
        let old = std::mem::replace(&mut self.handler, fresh);
        let _ = catch_unwind(AssertUnwindSafe(move || drop(old)));
        // What the interrupted batch had not reached is dispatched first
        // thing in the next round, with the fresh handler: those are the
        // next packets of their flows.
        if let Some(i) = self.dispatching.take() {
            let from = self.batch_from + self.rx[i].dispatcher.taken_in_batch();
            if from < self.polled {
                self.interrupted = Some((i, from));
            }
        }
        if let Some(block) = self.common.shared.stats.cpu(self.cpu) {
            block.flush(&mut self.local);
        }
        self.common.states.restarted(self.cpu, msg);
        true
    }

    fn set_state(&self, state: WorkerState) {
        self.common.states.set(self.cpu, state);
    }

    fn run_loop(&mut self) {
        let mut idle_rounds = 0u32;
        // Naps in a row that found no work (deferral, see `Defer`); MAX:
        // no work since the last sleep, so no nap either.
        let mut empty_naps = u32::MAX;
        let mut rounds = 0u32;
        let mut last_tick: Tick = 0;
        // The clock as last read: a round that did work was busy from here.
        let mut mark = Instant::now();
        // When the last round with work ended, and the adaptive window.
        let mut last_work = mark;
        // The last idle spell that ended in a sleep, from the last work to
        // the wake-up, and how long the nap just taken lasted (coalescing).
        let mut last_spell = None;
        let mut napped: Option<Duration> = None;
        let mut coalesce = self
            .common
            .cfg
            .coalesce
            .filter(|_| !self.common.cfg.busy_poll)
            .map(CoalesceWindow::new);
        let mut spin = self
            .common
            .cfg
            .adaptive
            .filter(|_| !self.common.cfg.busy_poll)
            .map(|cfg| SpinWindow::new(cfg, mark));
        while !self.common.stop.load(Ordering::Relaxed) {
            if self.common.orphan_count.load(Ordering::Relaxed) > 0 {
                self.adopt();
            }
            let work = self.resume_interrupted()
                + self.poll_sources()
                + self.drain_rings()
                + self.handler.poll_side(&mut self.pool);
            if work > 0 {
                self.flush();
                empty_naps = 0;
            } else if self.held.is_holding() {
                // Heads held for tx completions: polled every round, so
                // they never stay held once the device is done.
                let progress = self.handler.tx_progress(&mut self.pool);
                self.held.completed(progress, &mut self.inbound);
            }
            if let (Some(window), Some(slept)) = (&mut coalesce, napped.take()) {
                window.after_nap(slept, work);
            }
            idle_rounds = if work > 0 {
                0
            } else {
                idle_rounds.saturating_add(1)
            };
            // The clock is read once per round (never per packet): a round
            // with work adds its length to the busy time the load balancer
            // reads.
            let now = Instant::now();
            let round = now.saturating_duration_since(mark);
            if work > 0 {
                self.local.busy_ns += u64::try_from(round.as_nanos()).unwrap_or(u64::MAX);
                last_work = now;
            } else if let Some(spin) = &mut spin {
                spin.polled_idle(round, now);
            }
            mark = now;
            // The flow tables' tick moves every TICK_EVERY rounds, busy or
            // not (flows' last-used ticks must advance under load too), and
            // on the first idle round; it is written once per millisecond at
            // most.
            rounds = rounds.wrapping_add(1);
            let tick_round = rounds.is_multiple_of(TICK_EVERY) || idle_rounds == 1;
            if tick_round {
                let now = now.saturating_duration_since(self.start).as_millis() as Tick;
                if now != last_tick {
                    last_tick = now;
                    // Maintenance off the hot path, once per tick: a small
                    // slice of each table under load (so idle flows and
                    // their hook state expire under sustained traffic
                    // too), a larger one when idle.
                    let budget = if work == 0 {
                        SWEEP_BUDGET_IDLE
                    } else {
                        SWEEP_BUDGET_BUSY
                    };
                    for part in &mut self.rx {
                        part.dispatcher.set_tick(now);
                        part.dispatcher.sweep(self.common.cfg.flow_idle_ms, budget);
                    }
                    self.follow_hotplug();
                }
            }
            // Counters change only with work or on a tick (sweeps): idle
            // rounds leave the shared block alone.
            if work > 0 || tick_round {
                if let Some(block) = self.common.shared.stats.cpu(self.cpu) {
                    block.flush(&mut self.local);
                }
            }
            if work > 0 {
                continue;
            }
            // A nap now (coalescing while packets come close together, or
            // deferral): how long, if any.
            let may_nap = idle_rounds > self.common.cfg.idle_spins;
            let nap = match (&coalesce, self.common.cfg.defer) {
                _ if self.common.cfg.busy_poll || !may_nap => None,
                (Some(window), _) => {
                    (empty_naps < 1 && window.naps(last_spell)).then(|| window.nap())
                }
                (None, Some(defer)) => (empty_naps < defer.empty_naps).then_some(defer.nap),
                (None, None) => None,
            };
            if let Some(nap) = nap {
                // Poll again after a timer, asking nobody to wake us (work
                // since the last sleep, and fewer empty naps in a row than
                // allowed).
                empty_naps += 1;
                let before = Instant::now();
                self.bell.nap(nap);
                self.local.naps += 1;
                // Asleep is not busy; the round after the nap starts the
                // spin count again only if it finds work.
                mark = Instant::now();
                napped = Some(mark.saturating_duration_since(before));
                idle_rounds = self.common.cfg.idle_spins;
            } else if !self.common.cfg.busy_poll
                && idle_rounds > self.common.cfg.idle_spins
                && self.held.is_holding()
            {
                // Would sleep, but heads are held for tx completions that
                // ring no doorbell: nap briefly and poll them again.
                self.bell.nap(HOLD_NAP);
                mark = Instant::now();
            } else if !self.common.cfg.busy_poll
                && idle_rounds > self.common.cfg.idle_spins
                && !spin
                    .as_ref()
                    .is_some_and(|w| w.keep_polling(now.saturating_duration_since(last_work)))
            {
                let inbound = &self.inbound;
                let rx = &self.rx;
                let common = &self.common;
                let handler = &self.handler;
                // Counted, and the counters published, before the sleep:
                // they stay true while it lasts.
                self.local.sleeps += 1;
                if let Some(block) = self.common.shared.stats.cpu(self.cpu) {
                    block.flush(&mut self.local);
                }
                self.bell.sleep_unless(
                    || {
                        common.stop.load(Ordering::SeqCst)
                            || common.orphan_count.load(Ordering::SeqCst) > 0
                            || inbound.iter().any(|i| !i.consumer.is_empty())
                            || rx.iter().any(|p| p.source.has_pending())
                            || handler.side_pending()
                    },
                    self.common.cfg.sleep_timeout,
                );
                // Asleep is not busy. Woken, it naps again only after it
                // finds work (a timeout wakes it to nothing).
                let woken = Instant::now();
                let spell = woken.saturating_duration_since(last_work);
                last_spell = Some(spell);
                if let Some(window) = &mut coalesce {
                    window.after_sleep(spell);
                }
                if let Some(spin) = &mut spin {
                    // The whole idle spell, polling and sleep (haltpoll's
                    // block time): a window that long would have caught it.
                    spin.slept(woken.saturating_duration_since(last_work), woken);
                }
                mark = woken;
                empty_naps = u32::MAX;
            } else {
                // Spinning before a sleep, or busy-polling: a sleeper that
                // runs deferred work gets its turn (a no-op by default).
                self.bell.idle();
                std::hint::spin_loop();
            }
        }
    }

    /// CPUs went offline or came back (`layout_epoch` moved): the kernel
    /// moved this thread off its CPU while that was offline, so once it is
    /// online again the thread is prepared (pinned) again.
    fn follow_hotplug(&mut self) {
        let epoch = self
            .common
            .shared
            .switches
            .layout_epoch
            .load(Ordering::Relaxed);
        if epoch != self.layout_epoch {
            self.layout_epoch = epoch;
            if self.common.shared.layout.is_online(self.cpu) {
                self.common.setup.prepare_thread(self.cpu);
            }
        }
    }

    fn poll_sources(&mut self) -> usize {
        let mut work = 0;
        for i in 0..self.rx.len() {
            let n = self.rx[i].source.poll(&mut self.buf);
            if n == 0 {
                continue;
            }
            self.polled = n;
            self.batch_from = 0;
            self.dispatching = Some(i);
            let part = &mut self.rx[i];
            part.dispatcher
                .dispatch(&self.buf[..n], &mut self.pool, &mut self.handler);
            self.dispatching = None;
            work += n;
        }
        work
    }

    /// After a restart: dispatches what the interrupted batch had not
    /// reached, before anything newer from any source.
    fn resume_interrupted(&mut self) -> usize {
        let Some((i, from)) = self.interrupted.take() else {
            return 0;
        };
        self.batch_from = from;
        self.dispatching = Some(i);
        let part = &mut self.rx[i];
        part.dispatcher.resume(
            &self.buf[from..self.polled],
            &mut self.pool,
            &mut self.handler,
        );
        self.dispatching = None;
        self.polled - from
    }

    fn drain_rings(&mut self) -> usize {
        let batch = self.common.cfg.batch.max(1);
        let mut work = 0;
        for inbound in &mut self.inbound {
            let pool = &mut self.pool;
            let handler = &mut self.handler;
            let local = &mut self.local;
            // Published by `flush`, once the replies are out. Counted per
            // packet as it is handed over, so the count holds when the
            // handler panics (the handler owns the packet then).
            let got = inbound.consumer.consume_unpublished(batch, |d| {
                local.processed += 1;
                handler.handle(d, pool);
            });
            if got == 0 {
                continue;
            }
            work += got;
            let local_rxq = self
                .rx
                .iter()
                .any(|p| p.dispatcher.rx_table().rxq() as usize == inbound.rxq);
            if !local_rxq {
                self.local.steered_in += got as u64;
            }
            if got == batch && !inbound.consumer.is_empty() {
                self.local.time_squeeze += 1;
            }
        }
        work
    }

    /// The end of a round with work: the handler sends what it staged
    /// (its replies go on the tx ring), then each inbound ring's head is
    /// published past the packets drained this round, one store per ring.
    /// So a dispatcher that sees a ring's head pass a flow's `last_qtail`
    /// knows the flow's replies from this worker are already on the tx
    /// ring: "handled" in the `last_qtail` rule means handled and answered.
    ///
    /// When the handler reports [`Handler::tx_progress`] (zero-copy: on
    /// the tx ring is not yet on the wire), the heads are published only
    /// up to the packets whose replies the device has completed; the rest
    /// are held as a checkpoint ([`HeldHeads`]) and published by a later
    /// round. With `None` the heads are published at once.
    fn flush(&mut self) {
        self.handler.flush(&mut self.pool);
        let progress = self.handler.tx_progress(&mut self.pool);
        self.held.flushed(progress, &mut self.inbound);
    }

    /// Waits (at most [`COMPLETION_WAIT`]) until the handler's flushed
    /// replies completed, then publishes every head past everything taken:
    /// before a handler is replaced or the worker stops or dies, when no
    /// later round will poll the checkpoints. Past the bound the heads are
    /// published anyway (a stalled device must not hold a ring forever).
    fn settle(&mut self) {
        if self.held.is_holding() {
            let handler = &mut self.handler;
            let pool = &mut self.pool;
            let _ = catch_unwind(AssertUnwindSafe(|| {
                wait_completed(handler, pool, COMPLETION_WAIT)
            }));
        }
        self.held.release_all(&mut self.inbound);
    }

    fn adopt(&mut self) {
        let mut orphans = self
            .common
            .orphans
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for mut part in orphans.drain(..) {
            part.dispatcher.set_own_cpu(self.cpu);
            self.rx.push(part);
        }
        self.common.orphan_count.store(0, Ordering::Relaxed);
    }

    /// Stop requested: handle what is queued. Two phases, so no frame is
    /// left in a ring: this worker has stopped polling its rx queues; it keeps
    /// draining until every running worker has stopped polling too (nothing
    /// new can enter a ring after that), then drains once more and flushes.
    fn finish(&mut self) {
        self.common.quiesced.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + QUIESCE_TIMEOUT;
        loop {
            if self.drain_rings() > 0 {
                self.flush();
            }
            let running = self.common.states.running();
            if self.common.quiesced.load(Ordering::SeqCst) >= running || Instant::now() > deadline {
                break;
            }
            std::thread::yield_now();
        }
        while self.drain_rings() > 0 {
            self.flush();
        }
        self.flush();
        self.settle();
        if let Some(block) = self.common.shared.stats.cpu(self.cpu) {
            block.flush(&mut self.local);
        }
    }

    /// The handler panicked past the restart limit: route everything
    /// around this worker.
    fn die(&mut self, msg: String) {
        // Announce first, so whoever sees the frames come back sees why.
        self.set_state(WorkerState::Panicked(msg));
        self.common.shared.layout.set_online(self.cpu, false);
        // The batch being dispatched when the handler panicked: what it had
        // not reached yet goes back to its source.
        if let Some(part) = self.dispatching.and_then(|i| self.rx.get_mut(i)) {
            let from = (self.batch_from + part.dispatcher.taken_in_batch()).min(self.polled);
            part.source.give_back(&self.buf[from..self.polled]);
            // Received (counted in rx), never handled: dropped with the
            // worker. (A source that queues them again receives them anew.)
            self.local.worker_gone_drops += (self.polled - from) as u64;
        } else if let Some((i, from)) = self.interrupted.take() {
            // A batch a restart left to finish, not reached before this
            // panic.
            if let Some(part) = self.rx.get_mut(i) {
                part.source.give_back(&self.buf[from..self.polled]);
                self.local.worker_gone_drops += (self.polled - from) as u64;
            }
        }
        // What the handler staged before it panicked still goes out, if the
        // handler can still do that much: before any head is published past
        // those packets (the drain that panicked published nothing) and
        // before our rx queues go to a survivor, so no later packet of their
        // flows can be answered first.
        let _ = catch_unwind(AssertUnwindSafe(|| self.handler.flush(&mut self.pool)));
        self.settle();
        // Frames still queued to this worker are dropped, not leaked (each
        // pop publishes the head past everything taken before it).
        for inbound in &mut self.inbound {
            while let Some(d) = inbound.consumer.pop() {
                self.local.worker_gone_drops += 1;
                self.pool.release(d);
            }
        }
        if let Some(block) = self.common.shared.stats.cpu(self.cpu) {
            block.flush(&mut self.local);
        }
        // Abandon our rings (dispatchers route around us), then tell the
        // dispatchers, which take back anything pushed after the drain above.
        drop(std::mem::take(&mut self.inbound));
        self.common
            .shared
            .switches
            .worker_exits
            .fetch_add(1, Ordering::Release);
        // Our rx queues go to a surviving worker.
        let rx = std::mem::take(&mut self.rx);
        let n = rx.len();
        if n > 0 {
            self.common
                .orphans
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(rx);
            self.common.orphan_count.fetch_add(n, Ordering::SeqCst);
            for bell in self.common.bells.iter().flatten() {
                bell.ring();
            }
        }
    }
}
