//! The ring's error types. An error that fails to enqueue hands the item
//! back, so the caller can return its frame to the pool: nothing leaks.

use std::fmt;

/// [`Producer::push`](super::Producer::push) failed; the item is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PushError<T> {
    /// The ring was full (the consumer had not yet freed a slot).
    Full(T),
}

impl<T> PushError<T> {
    /// The item that was not enqueued.
    pub fn into_inner(self) -> T {
        match self {
            Self::Full(item) => item,
        }
    }
}

// Hand-written so that `T` need not be `Debug`.
impl<T> fmt::Debug for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(_) => f.write_str("Full(..)"),
        }
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(_) => f.write_str("ring is full"),
        }
    }
}

impl<T> std::error::Error for PushError<T> {}

/// [`channel`](super::channel) was asked for a capacity it cannot make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityError {
    /// The capacity that was asked for.
    pub requested: usize,
}

impl fmt::Display for CapacityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ring capacity must be a power of two in 1..={}, got {}",
            super::MAX_CAPACITY,
            self.requested
        )
    }
}

impl std::error::Error for CapacityError {}
