//! What the kernel-steering tests share: steer-testbed's [`Pair`] (two
//! namespaces of the test's own joined by a 2-queue veth pair, removed on
//! drop; the client end's frames carry partial checksums, which the RFS
//! program completes before a redirect) and pinning a thread to a CPU.

#![allow(dead_code)]

pub use steer_testbed::Pair;

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) {
    steer_topology::thread::pin_current(cpu).unwrap();
}
