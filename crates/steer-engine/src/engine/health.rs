//! Worker health: a small thread of the engine that follows the workers'
//! states, says in the log when one was restarted after its handler
//! panicked (once per new count) and when one dies (past its restart limit:
//! its rx queues and flows already moved to the survivors), and acts when none is
//! left (the engine's own kernel sockets on the owned ports close: nobody
//! is left to answer there), as [`WorkerLoss`] says: fail open (the XDP
//! program passes owned traffic to the kernel, whose sockets on the port
//! get it, instead of
//! redirecting it into sockets nobody reads) or fail closed (the engine
//! reports it, [`Engine::workers_lost`](super::Engine::workers_lost), and
//! the command exits non-zero).
//!
//! Invariants: nothing here is on the packet path (one lock of the states
//! list per period); each restart and each death is logged once; the action on losing every
//! worker is taken once; the thread ends when the engine stops.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use steer_core::cpu::CpuId;
use steer_core::runtime::{WorkerReport, WorkerState, WorkerStates};
use steer_xdp::{OwnedAction, OwnedActionSwitch};
use tracing::error;

/// What the engine does when no worker is left to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkerLoss {
    /// The XDP program passes owned traffic to the kernel (the default):
    /// a kernel socket on the port keeps the service up.
    #[default]
    FailOpen,
    /// Owned traffic is left to the engine's (dead) sockets, and
    /// [`Engine::workers_lost`](super::Engine::workers_lost) says so; the
    /// command exits non-zero.
    FailClosed,
}

/// How often the watcher looks.
const PERIOD: Duration = Duration::from_millis(100);

/// What the watcher found, shared with the engine.
#[derive(Debug, Default)]
pub(super) struct Health {
    /// Every worker is gone.
    pub(super) all_lost: AtomicBool,
}

/// The running watcher.
#[derive(Debug)]
pub(super) struct HealthWatcher {
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl HealthWatcher {
    /// Starts watching `states`; `switch` fails the program open. When no
    /// worker is left, `release` frees the owned ports (the slow path's
    /// sockets) first, in either mode.
    pub(super) fn start(
        interface: String,
        states: WorkerStates,
        switch: Option<OwnedActionSwitch>,
        on_loss: WorkerLoss,
        health: Arc<Health>,
        release: Box<dyn Fn() + Send>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("steer-health".into())
            .spawn(move || {
                let mut seen = Seen::default();
                while !flag.load(Ordering::Relaxed) {
                    std::thread::park_timeout(PERIOD);
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    for event in seen.update(&states.reports()) {
                        if event == Event::AllLost {
                            // Nobody is left to answer on the slow path.
                            release();
                        }
                        act(&interface, event, switch.as_ref(), on_loss, &health);
                    }
                }
            })?;
        Ok(Self {
            thread: Some(thread),
            stop,
        })
    }

    /// Stops the thread and waits for it.
    pub(super) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for HealthWatcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Something the watcher reports.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    /// The worker on this CPU was restarted (this many times in all) after
    /// a panic with this message.
    Restarted(CpuId, u32, String),
    /// The worker on this CPU died, with this panic message.
    Died(CpuId, String),
    /// No worker is left.
    AllLost,
}

/// What the watcher has reported already.
#[derive(Debug, Default)]
struct Seen {
    restarts: BTreeMap<CpuId, u32>,
    dead: BTreeSet<CpuId>,
    all_lost: bool,
}

impl Seen {
    /// The events `states` shows that were not reported yet.
    fn update(&mut self, states: &[WorkerReport]) -> Vec<Event> {
        let mut events = Vec::new();
        for r in states {
            let seen = self.restarts.entry(r.cpu).or_default();
            if r.restarts > *seen {
                *seen = r.restarts;
                let msg = r.last_panic.clone().unwrap_or_default();
                events.push(Event::Restarted(r.cpu, r.restarts, msg));
            }
            if let WorkerState::Panicked(msg) = &r.state {
                if self.dead.insert(r.cpu) {
                    events.push(Event::Died(r.cpu, msg.clone()));
                }
            }
        }
        let all_dead = !states.is_empty()
            && states
                .iter()
                .all(|r| matches!(r.state, WorkerState::Panicked(_)));
        if all_dead && !self.all_lost {
            self.all_lost = true;
            events.push(Event::AllLost);
        }
        events
    }
}

fn act(
    interface: &str,
    event: Event,
    switch: Option<&OwnedActionSwitch>,
    on_loss: WorkerLoss,
    health: &Health,
) {
    match event {
        Event::Restarted(cpu, restarts, msg) => error!(
            interface,
            cpu,
            restarts,
            panic = %msg,
            "a worker's handler panicked; the worker was restarted in place (the packet it panicked on is lost)"
        ),
        Event::Died(cpu, msg) => error!(
            interface,
            cpu,
            panic = %msg,
            "a worker died (its handler panicked past its restart limit); its queues and flows moved to the other workers"
        ),
        Event::AllLost => {
            health.all_lost.store(true, Ordering::Relaxed);
            match (on_loss, switch) {
                (WorkerLoss::FailOpen, Some(switch)) => match switch.set(OwnedAction::Pass) {
                    Ok(()) => error!(
                        interface,
                        "no worker left: owned traffic now goes to the kernel (fail open)"
                    ),
                    Err(e) => {
                        error!(interface, error = %e, "no worker left, and failing open failed")
                    }
                },
                (WorkerLoss::FailOpen, None) => {
                    error!(interface, "no worker left, and no program to fail open")
                }
                (WorkerLoss::FailClosed, _) => {
                    error!(
                        interface,
                        "no worker left: the engine stops serving (fail closed)"
                    )
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reports(states: &[(CpuId, WorkerState, u32)]) -> Vec<WorkerReport> {
        states
            .iter()
            .map(|(cpu, state, restarts)| WorkerReport {
                cpu: *cpu,
                state: state.clone(),
                restarts: *restarts,
                last_panic: (*restarts > 0).then(|| format!("panic {restarts}")),
            })
            .collect()
    }

    #[test]
    fn each_restart_death_and_the_loss_of_all_are_reported_once() {
        let mut seen = Seen::default();
        let running = reports(&[(0, WorkerState::Running, 0), (1, WorkerState::Running, 0)]);
        assert!(seen.update(&running).is_empty());
        let restarted = reports(&[(0, WorkerState::Running, 0), (1, WorkerState::Running, 2)]);
        assert_eq!(
            seen.update(&restarted),
            vec![Event::Restarted(1, 2, "panic 2".into())]
        );
        assert!(seen.update(&restarted).is_empty());
        let one = reports(&[
            (0, WorkerState::Running, 0),
            (1, WorkerState::Panicked("boom".into()), 2),
        ]);
        assert_eq!(seen.update(&one), vec![Event::Died(1, "boom".into())]);
        assert!(seen.update(&one).is_empty());
        let both = reports(&[
            (0, WorkerState::Panicked("bang".into()), 0),
            (1, WorkerState::Panicked("boom".into()), 2),
        ]);
        assert_eq!(
            seen.update(&both),
            vec![Event::Died(0, "bang".into()), Event::AllLost]
        );
        assert!(seen.update(&both).is_empty());
    }

    #[test]
    fn workers_stopped_on_request_are_no_loss() {
        let mut seen = Seen::default();
        let stopped = reports(&[(0, WorkerState::Stopped, 0), (1, WorkerState::Stopped, 0)]);
        assert!(seen.update(&stopped).is_empty());
    }

    #[test]
    fn failing_closed_is_recorded_for_the_engine() {
        let health = Health::default();
        act(
            "veth0",
            Event::AllLost,
            None,
            WorkerLoss::FailClosed,
            &health,
        );
        assert!(health.all_lost.load(Ordering::Relaxed));
    }
}
