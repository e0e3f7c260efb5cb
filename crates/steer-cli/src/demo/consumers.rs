//! The demo's consumers: one thread per flow, reading it and echoing each
//! datagram, as a proxy's task would. A consumer runs on one CPU at a time
//! and the demo moves it ([`Consumers::move_all`]): the thread pins itself
//! to its next CPU, which migrates it there, then widens its allowed set
//! back to every worker CPU, so the `llc` rule sees a thread that moved
//! within what it may use (as the scheduler moves threads), not one that
//! was forbidden its old CPU. Its next read records the new CPU for the
//! flow: `always` moves the flow there, `llc` keeps it when both CPUs
//! share an LLC.
//!
//! Invariant: only the consumer thread touches its flow; the demo talks to
//! it through one atomic (the CPU it should run on) and a stop flag.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use steer_core::cpu::{CpuId, CpuSet};
use steer_engine::flows::{Flow, FlowListener};

/// One consumer's control.
#[derive(Debug)]
struct Control {
    target: AtomicUsize,
}

/// Every consumer, and the thread that accepts flows and starts them.
#[derive(Debug)]
pub struct Consumers {
    cpus: Vec<CpuId>,
    controls: Arc<Mutex<Vec<Arc<Control>>>>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Consumers {
    /// Accepts the flows of `listener`; the n-th flow's consumer starts on
    /// the n-th of `cpus` (round robin).
    pub fn start(listener: FlowListener, cpus: CpuSet) -> anyhow::Result<Self> {
        let cpu_list: Vec<CpuId> = cpus.iter().collect();
        anyhow::ensure!(!cpu_list.is_empty(), "no worker CPU for the consumers");
        let controls: Arc<Mutex<Vec<Arc<Control>>>> = Arc::default();
        let threads: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, t, s, list) = (
            Arc::clone(&controls),
            Arc::clone(&threads),
            Arc::clone(&stop),
            cpu_list.clone(),
        );
        let acceptor = std::thread::Builder::new()
            .name("demo-accept".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return eprintln!("steer demo: acceptor runtime: {e}"),
                };
                rt.block_on(async {
                    while !s.load(Relaxed) {
                        let Ok(Some(flow)) =
                            tokio::time::timeout(Duration::from_millis(100), listener.accept())
                                .await
                        else {
                            continue;
                        };
                        let mut controls = c.lock().unwrap_or_else(|e| e.into_inner());
                        let first = list[controls.len() % list.len()];
                        let control = Arc::new(Control {
                            target: AtomicUsize::new(first),
                        });
                        controls.push(Arc::clone(&control));
                        let (stop, cpus) = (Arc::clone(&s), cpus);
                        let spawned = std::thread::Builder::new()
                            .name(format!("demo-consumer{}", controls.len()))
                            .spawn(move || consume(flow, &control, &cpus, &stop));
                        match spawned {
                            Ok(h) => t.lock().unwrap_or_else(|e| e.into_inner()).push(h),
                            Err(e) => eprintln!("steer demo: starting a consumer: {e}"),
                        }
                    }
                });
            })?;
        Ok(Self {
            cpus: cpu_list,
            controls,
            threads,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// Flows being consumed.
    pub fn flows(&self) -> usize {
        self.controls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Moves every consumer to the next worker CPU; returns how many moved.
    pub fn move_all(&self) -> u64 {
        let controls = self.controls.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.cpus.len();
        if n < 2 {
            return 0;
        }
        for c in controls.iter() {
            let now = c.target.load(Relaxed);
            let i = self.cpus.iter().position(|&x| x == now).unwrap_or(0);
            c.target.store(self.cpus[(i + 1) % n], Relaxed);
        }
        controls.len() as u64
    }

    /// Stops the consumers (their flows close) and the acceptor.
    pub fn stop(mut self) {
        self.stop.store(true, Relaxed);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// Runs on CPU `target` (moving when told), reads `flow` and echoes it.
fn consume(mut flow: Flow, control: &Control, cpus: &CpuSet, stop: &AtomicBool) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    else {
        return;
    };
    let mut on = usize::MAX;
    rt.block_on(async {
        while !stop.load(Relaxed) {
            let target = control.target.load(Relaxed);
            if target != on {
                // Pinning migrates the thread; widening lets it stay there
                // as any thread the scheduler placed would.
                let _ = steer_topology::thread::pin_current(target);
                let _ = steer_topology::thread::set_allowed(cpus);
                on = target;
            }
            match tokio::time::timeout(Duration::from_millis(50), flow.recv()).await {
                Ok(Some(datagram)) => {
                    let _ = flow.send(&datagram);
                }
                Ok(None) => return,
                Err(_) => {}
            }
        }
    });
}
