//! The runtime tests' packet source and frame pool: frames held in memory
//! (8 bytes each, see the parent module), a pool handle that counts the
//! frames released to it, an rx queue the test feeds, and the `Setup`
//! items every runtime test app shares ([`frames_setup`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use steer_core::dispatch::FramePool;
use steer_core::runtime::RxSource;

/// Frame `i` holds flow id (u32 LE) and sequence number (u32 LE).
pub struct Frames {
    pub bytes: Vec<[u8; 8]>,
    /// Frames released to the pool so far.
    pub released: AtomicUsize,
}

impl Frames {
    /// `bytes` as shared frames, none released yet.
    pub fn shared(bytes: Vec<[u8; 8]>) -> Arc<Self> {
        Arc::new(Frames {
            bytes,
            released: AtomicUsize::new(0),
        })
    }
}

/// A worker's handle on the shared frames.
pub struct PoolHandle(pub Arc<Frames>);
impl FramePool<usize> for PoolHandle {
    fn frame(&self, d: &usize) -> &[u8] {
        &self.0.bytes[*d]
    }
    fn release(&mut self, _d: usize) {
        self.0.released.fetch_add(1, Ordering::Relaxed);
    }
}

/// An rx queue fed by the test.
#[derive(Clone, Default)]
pub struct Feed(pub Arc<Mutex<VecDeque<usize>>>);
impl RxSource<usize> for Feed {
    fn poll(&mut self, out: &mut [usize]) -> usize {
        let mut q = self.0.lock().unwrap();
        let n = q.len().min(out.len());
        for slot in out.iter_mut().take(n) {
            *slot = q.pop_front().unwrap();
        }
        n
    }
    fn give_back(&mut self, descs: &[usize]) {
        let mut q = self.0.lock().unwrap();
        for &d in descs.iter().rev() {
            q.push_front(d);
        }
    }
    fn has_pending(&self) -> bool {
        !self.0.lock().unwrap().is_empty()
    }
}

/// The rx sources a runtime starts with: one per feed, sharing its queue.
pub fn sources(feeds: &[Feed]) -> Vec<Box<dyn RxSource<usize>>> {
    feeds
        .iter()
        .map(|f| Box::new(f.clone()) as Box<dyn RxSource<usize>>)
        .collect()
}

/// The `Setup<usize>` items the runtime tests share, for an app with a
/// `frames: Arc<Frames>` field: test frames classified by flow id, no
/// steering hook, and a [`PoolHandle`] on the frames for every worker.
#[allow(unused_macros)] // each test binary uses its own part
macro_rules! frames_setup {
    () => {
        type Classifier = $crate::common::ByFlowId;
        type Hook = ::steer_core::hook::NoopHook;
        type Pool = $crate::common::rig::PoolHandle;
        fn classifier(&self, _: u32) -> $crate::common::ByFlowId {
            $crate::common::ByFlowId
        }
        fn hook(&self, _: u32) -> ::steer_core::hook::NoopHook {
            ::steer_core::hook::NoopHook
        }
        fn pool(&self, _: ::steer_core::cpu::CpuId) -> $crate::common::rig::PoolHandle {
            $crate::common::rig::PoolHandle(::std::sync::Arc::clone(&self.frames))
        }
    };
}
#[allow(unused_imports)]
pub(crate) use frames_setup;
