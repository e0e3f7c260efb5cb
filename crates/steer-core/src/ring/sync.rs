//! The synchronisation primitives the ring is built on, swapped for loom's
//! under `cfg(loom)` so the loom tests explore every interleaving of the
//! ring's atomics and check every slot access for data races.
//!
//! Only this module and [`super::slots`] name `std` or `loom` directly.

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

#[cfg(not(loom))]
pub(crate) use std::{
    cell::UnsafeCell,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};
