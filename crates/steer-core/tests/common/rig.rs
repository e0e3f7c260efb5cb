//! The runtime tests' packet source and frame pool: frames held in memory
//! (8 bytes each, see the parent module), a pool handle that counts the
//! frames released to it, and an rx queue the test feeds.

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
