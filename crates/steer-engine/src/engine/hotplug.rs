//! The CPU hotplug watcher: a small thread of the engine that re-reads
//! which CPUs are online (`/sys/devices/system/cpu/online` under the
//! topology's sysfs root: one short file read per period, off the workers'
//! path) and writes changes into the layout every dispatcher and recorder
//! shares. A CPU gone offline is then passed over: the flows desired or
//! placed there move to CPUs with a worker (in order: only once nothing of
//! theirs is queued), recorders rewrite its entries (the LLC rule's "old
//! CPU offline" case), and its rx queues' flows spread over the others.
//! When a CPU comes back, the workers are told (`layout_epoch`) so the one
//! on it pins itself there again.
//!
//! Only a live topology (hwloc or sysfs) is watched; a model (synthetic,
//! XML) changes only by hand ([`Topology::set_online`]), which dispatchers
//! see as well, since they share its layout.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use steer_core::dispatch::DispatchSwitches;
use steer_topology::Topology;
use tracing::{info, warn};

/// The running watcher; stop it with [`HotplugWatcher::stop`] (or drop).
#[derive(Debug)]
pub(super) struct HotplugWatcher {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HotplugWatcher {
    /// Watches `topology` every `every`; `None` for a model topology.
    pub(super) fn start(
        topology: &Topology,
        every: Duration,
        switches: Arc<DispatchSwitches>,
    ) -> std::io::Result<Option<Self>> {
        if !topology.source().is_live() {
            return Ok(None);
        }
        let topology = topology.clone();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("steer-hotplug".into())
            .spawn(move || {
                let mut warned = false;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    match topology.refresh_online() {
                        Ok(changed) if !changed.is_empty() => {
                            switches.layout_epoch.fetch_add(1, Ordering::Release);
                            info!(
                                changed = %changed,
                                online = %topology.online_cpus(),
                                "CPUs went offline or online; flows on offline CPUs are re-steered"
                            );
                        }
                        Ok(_) => {}
                        Err(e) if !warned => {
                            warned = true;
                            warn!(error = %e, "cannot read which CPUs are online; hotplug is not followed");
                        }
                        Err(_) => {}
                    }
                }
            })?;
        Ok(Some(Self {
            stop: Some(stop),
            thread: Some(thread),
        }))
    }

    /// Stops the thread and waits for it.
    pub(super) fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HotplugWatcher {
    fn drop(&mut self) {
        self.stop();
    }
}
