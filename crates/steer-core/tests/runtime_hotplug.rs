//! Workers follow CPU hotplug: when whoever watches the machine bumps
//! `layout_epoch` (after updating the layout), each worker whose CPU is
//! online prepares its thread again (the kernel moved it away while its CPU
//! was offline: it pins itself back); one whose CPU is offline does not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::ByFlowId;
use steer_core::cpu::{CpuId, CpuLayout, CpuSet};
use steer_core::dispatch::FramePool;
use steer_core::hook::NoopHook;
use steer_core::runtime::{Runtime, RuntimeConfig, RxSource, Setup};

struct NoFrames;
impl FramePool<usize> for NoFrames {
    fn frame(&self, _d: &usize) -> &[u8] {
        &[]
    }
    fn release(&mut self, _d: usize) {}
}

struct Silent;
impl RxSource<usize> for Silent {
    fn poll(&mut self, _out: &mut [usize]) -> usize {
        0
    }
    fn give_back(&mut self, _descs: &[usize]) {}
}

/// Counts `prepare_thread` calls per CPU.
struct App([AtomicUsize; 2]);

impl Setup<usize> for App {
    type Classifier = ByFlowId;
    type Hook = NoopHook;
    type Pool = NoFrames;
    type Handler = Box<dyn FnMut(usize, &mut NoFrames)>;
    fn prepare_thread(&self, cpu: CpuId) {
        self.0[cpu].fetch_add(1, Ordering::SeqCst);
    }
    fn classifier(&self, _: u32) -> ByFlowId {
        ByFlowId
    }
    fn hook(&self, _: u32) -> NoopHook {
        NoopHook
    }
    fn pool(&self, _: CpuId) -> NoFrames {
        NoFrames
    }
    fn handler(&self, _: CpuId) -> Self::Handler {
        Box::new(|_d, _p: &mut NoFrames| {})
    }
}

#[test]
fn workers_prepare_their_thread_again_after_hotplug_when_their_cpu_is_online() {
    let app = Arc::new(App([AtomicUsize::new(0), AtomicUsize::new(0)]));
    let cfg = RuntimeConfig {
        cpus: CpuSet::first(2),
        busy_poll: true,
        ..Default::default()
    };
    let rt = Runtime::start_with_layout(
        cfg,
        Arc::new(CpuLayout::uniform(2, 2).unwrap()),
        Arc::clone(&app),
        vec![Box::new(Silent), Box::new(Silent)],
    )
    .unwrap();
    let calls = |cpu: usize| app.0[cpu].load(Ordering::SeqCst);
    assert_eq!((calls(0), calls(1)), (1, 1), "prepared once at start");
    // CPU 1 goes offline; then it comes back.
    let shared = rt.shared().clone();
    shared.layout.set_online(1, false);
    shared.switches.layout_epoch.fetch_add(1, Ordering::Release);
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(3);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    wait("CPU 0's worker prepared again", &|| calls(0) == 2);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(calls(1), 1, "not while its CPU is offline");
    shared.layout.set_online(1, true);
    shared.switches.layout_epoch.fetch_add(1, Ordering::Release);
    wait("CPU 1's worker pinned back", &|| calls(1) == 2);
    rt.stop();
}
