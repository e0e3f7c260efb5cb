//! Worker health: a small thread of the engine that follows the workers'
//! states, says in the log when one dies (its handler panicked: its rx
//! queues and flows already moved to the survivors), and acts when none is
//! left, as [`WorkerLoss`] says: fail open (the XDP program passes owned
//! traffic to the kernel, whose sockets on the port get it, instead of
//! redirecting it into sockets nobody reads) or fail closed (the engine
//! reports it, [`Engine::workers_lost`](super::Engine::workers_lost), and
//! the command exits non-zero).
//!
//! Invariants: nothing here is on the packet path (one lock of the states
//! list per period); each death is logged once; the action on losing every
//! worker is taken once; the thread ends when the engine stops.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use steer_core::cpu::CpuId;
use steer_core::runtime::{WorkerState, WorkerStates};
use tracing::error;
use xdp_io::{OwnedAction, OwnedActionSwitch};

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
    /// Starts watching `states`; `switch` fails the program open.
    pub(super) fn start(
        interface: String,
        states: WorkerStates,
        switch: Option<OwnedActionSwitch>,
        on_loss: WorkerLoss,
        health: Arc<Health>,
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
                    for event in seen.update(&states.snapshot()) {
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
    /// The worker on this CPU died, with this panic message.
    Died(CpuId, String),
    /// No worker is left.
    AllLost,
}

/// What the watcher has reported already.
#[derive(Debug, Default)]
struct Seen {
    dead: BTreeSet<CpuId>,
    all_lost: bool,
}

impl Seen {
    /// The events `states` shows that were not reported yet.
    fn update(&mut self, states: &[(CpuId, WorkerState)]) -> Vec<Event> {
        let mut events = Vec::new();
        for (cpu, state) in states {
            if let WorkerState::Panicked(msg) = state {
                if self.dead.insert(*cpu) {
                    events.push(Event::Died(*cpu, msg.clone()));
                }
            }
        }
        let all_dead = !states.is_empty()
            && states
                .iter()
                .all(|(_, s)| matches!(s, WorkerState::Panicked(_)));
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
        Event::Died(cpu, msg) => error!(
            interface,
            cpu,
            panic = %msg,
            "a worker died (its handler panicked); its queues and flows moved to the other workers"
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

    #[test]
    fn each_death_and_the_loss_of_all_are_reported_once() {
        let mut seen = Seen::default();
        let running = vec![(0, WorkerState::Running), (1, WorkerState::Running)];
        assert!(seen.update(&running).is_empty());
        let one = vec![
            (0, WorkerState::Running),
            (1, WorkerState::Panicked("boom".into())),
        ];
        assert_eq!(seen.update(&one), vec![Event::Died(1, "boom".into())]);
        assert!(seen.update(&one).is_empty());
        let both = vec![
            (0, WorkerState::Panicked("bang".into())),
            (1, WorkerState::Panicked("boom".into())),
        ];
        assert_eq!(
            seen.update(&both),
            vec![Event::Died(0, "bang".into()), Event::AllLost]
        );
        assert!(seen.update(&both).is_empty());
    }

    #[test]
    fn workers_stopped_on_request_are_no_loss() {
        let mut seen = Seen::default();
        let stopped = vec![(0, WorkerState::Stopped), (1, WorkerState::Stopped)];
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
