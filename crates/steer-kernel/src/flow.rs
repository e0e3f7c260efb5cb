//! One connection's handle ([`SteeredFlow`]): its 4-tuple and flow hash,
//! read once, so a record per read costs no system call; dropping it
//! forgets the flow (both map entries), as a closed connection should.
//!
//! Invariant: the handle holds the steering weakly; once steering stopped,
//! dropping it does nothing.

use std::sync::Weak;

use crate::shared::Shared;
use crate::socket::SocketTuple;

/// A connection steer steers (made by [`crate::KernelSteering::flow`]).
pub struct SteeredFlow {
    tuple: SocketTuple,
    hash: u32,
    shared: Weak<Shared>,
}

impl std::fmt::Debug for SteeredFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SteeredFlow")
            .field("tuple", &self.tuple)
            .field("hash", &self.hash)
            .finish()
    }
}

impl SteeredFlow {
    pub(crate) fn new(tuple: SocketTuple, hash: u32, shared: Weak<Shared>) -> Self {
        Self {
            tuple,
            hash,
            shared,
        }
    }

    /// The connection's tuple.
    pub fn tuple(&self) -> &SocketTuple {
        &self.tuple
    }

    /// Its flow hash in the desired-CPU table.
    pub fn hash(&self) -> u32 {
        self.hash
    }
}

impl Drop for SteeredFlow {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.forget(&self.tuple);
        }
    }
}
