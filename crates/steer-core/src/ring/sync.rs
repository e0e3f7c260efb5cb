//! The synchronisation primitives the ring is built on, swapped for loom's
//! under `cfg(loom)` so the loom tests explore every interleaving of the
//! ring's atomics and check every slot access for data races.
//!
//! Only this module and [`super::slots`] name `std` or `loom` directly. Under
//! loom each slot is a loom `UnsafeCell`; without it the slots are a raw
//! allocation, so the std side has no `UnsafeCell` to swap.

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::{
        atomic::{fence, AtomicU64, Ordering},
        Arc,
    },
};

// Without loom the slots need no `UnsafeCell`: they are a raw allocation
// (see `super::slots`), written and read through raw pointers only.
#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicU64, Ordering},
    Arc,
};
