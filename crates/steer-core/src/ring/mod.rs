//! Bounded single-producer single-consumer rings of frame descriptors: one
//! per (dispatcher, worker) pair, moving small descriptors (never packet
//! copies) from the dispatcher to the worker.
//!
//! A ring is made by [`channel`] and split into a [`Producer`] and a
//! [`Consumer`] half, each `Send`, each owned by one thread.
//!
//! # Counters and invariants
//!
//! The ring has two monotonic `u64` counters, never wrapped (at 10⁹ items a
//! second a `u64` lasts 584 years); a slot's index is `counter & (capacity - 1)`:
//!
//! - `tail` = items ever enqueued ([`Producer::enqueued`]); stored only by the
//!   producer, with `Release`, after the slots it publishes are written.
//! - `head` = items ever dequeued ([`Consumer::dequeued`]); stored only by the
//!   consumer, with `Release`, after the slots it frees are read (and, for
//!   items taken with [`Consumer::consume_unpublished`], only at the next
//!   [`Consumer::publish`]; a consumer publishes what it took when dropped).
//!
//! At all times `head <= tail <= head + capacity`. The slots of positions in
//! `[head, tail)` are initialised and belong to the consumer; all other
//! slots are uninitialised and belong to the producer. Each side reads the
//! other's counter with `Acquire`, which pairs with that `Release` store, so
//! a slot's write happens-before its read and its read happens-before its
//! next overwrite. Each half keeps its own counter and a cached copy of the
//! other's in its own struct (on the owning thread's cache lines) and
//! re-reads the shared counter only when the cached copy says full (producer)
//! or empty (consumer). The shared `head` and `tail` each sit on their own
//! cache line ([`CachePadded`]).
//!
//! # `last_qtail`: has the consumer passed position X?
//!
//! RFS moves a flow off a CPU only once that CPU's queue has dequeued the
//! flow's last enqueued packet. The dispatcher records `X =`
//! [`Producer::enqueued`] right after pushing a flow's packet (the packet sat
//! at position `X - 1`) and later asks [`Producer::has_dequeued`]`(X)`, a
//! fresh `Acquire` load of `head` compared with `X`. The argument:
//!
//! - `head` is monotonic and the consumer stores it with `Release` only after
//!   it is done with every item below it. With [`Consumer::consume`] "done"
//!   means the handler has *returned* for each item (the head is published
//!   once per batch, after the closure ran), like the kernel's
//!   `input_queue_head`, which advances after `__netif_receive_skb`. With
//!   [`Consumer::consume_unpublished`] the head is stored only by a later
//!   [`Consumer::publish`], so "done" can mean more than "the handler
//!   returned": steer's workers publish after the batch's replies are on
//!   the tx ring. With [`Consumer::pop`]/[`Consumer::pop_batch`] it only
//!   means the items were taken out, so workers that need the RFS guarantee
//!   use `consume` or `consume_unpublished`.
//! - The `Acquire` load synchronises with that store: if it returns
//!   `>= X`, everything the handler did for packets below `X` happens-before
//!   whatever the dispatcher does next (e.g. enqueue the flow elsewhere).
//! - The value read may be older than the consumer's latest store, never
//!   newer. So a `true` stays true forever, and a stale `false` only delays a
//!   move by a batch: the safe direction for ordering.
//!
//! # Example
//!
//! ```
//! use steer_core::ring::{channel, PushError};
//!
//! let (mut tx, mut rx) = channel::<u64>(4).expect("power of two");
//! assert_eq!(tx.push_batch(&[1, 2, 3, 4, 5]), 4); // the caller keeps 5
//! assert_eq!(tx.push(5), Err(PushError::Full(5))); // handed back
//! let mark = tx.enqueued();
//!
//! let mut seen = Vec::new();
//! assert_eq!(rx.consume(8, |item| seen.push(item)), 4);
//! assert_eq!(seen, [1, 2, 3, 4]);
//! assert!(tx.has_dequeued(mark));
//! assert_eq!(tx.free_len(), 4);
//! ```

// `unsafe` is denied crate-wide; these modules are allowed it because the
// slots are a raw allocation that the two halves hand over to each other
// (`slots` owns the raw pointers; `producer` and `consumer` call its unsafe
// accessors under the head/tail protocol; the loom tests read loom cells).
#[allow(unsafe_code)]
mod consumer;
mod error;
#[allow(unsafe_code)]
mod producer;
#[allow(unsafe_code)]
mod slots;
mod sync;

#[cfg(all(test, loom))]
#[allow(unsafe_code)]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

use crossbeam_utils::CachePadded;

pub use consumer::Consumer;
pub use error::{CapacityError, PushError};
pub use producer::Producer;

use slots::Slots;
use sync::{Arc, AtomicU64, Ordering};

/// The largest capacity [`channel`] accepts (2³¹ slots).
pub const MAX_CAPACITY: usize = 1 << 31;

/// Makes a ring of `capacity` slots and returns its two halves.
///
/// `capacity` must be a power of two in `1..=`[`MAX_CAPACITY`]; anything else
/// is a [`CapacityError`].
///
/// ```
/// let (tx, rx) = steer_core::ring::channel::<u32>(1024)?;
/// assert_eq!((tx.capacity(), rx.capacity()), (1024, 1024));
/// assert!(steer_core::ring::channel::<u32>(1000).is_err());
/// # Ok::<(), steer_core::ring::CapacityError>(())
/// ```
#[doc(alias("input_pkt_queue", "backlog"))]
pub fn channel<T: Send>(capacity: usize) -> Result<(Producer<T>, Consumer<T>), CapacityError> {
    let error = CapacityError {
        requested: capacity,
    };
    if !capacity.is_power_of_two() || capacity > MAX_CAPACITY {
        return Err(error);
    }
    // `None`: the buffer's size in bytes overflows (huge `T`).
    let slots = Slots::new(capacity).ok_or(error)?;
    let shared = Arc::new(Shared {
        head: CachePadded::new(AtomicU64::new(0)),
        tail: CachePadded::new(AtomicU64::new(0)),
        slots,
    });
    Ok((Producer::new(Arc::clone(&shared)), Consumer::new(shared)))
}

/// The state both halves share. `repr(C)` keeps the declared order: the
/// consumer's line, the producer's line, then the read-only slot metadata on
/// a line of its own (`CachePadded` pads the first two to 128 bytes).
#[repr(C)]
struct Shared<T> {
    /// Items ever dequeued; stored only by the consumer.
    head: CachePadded<AtomicU64>,
    /// Items ever enqueued; stored only by the producer.
    tail: CachePadded<AtomicU64>,
    /// The slots; who may touch which is decided by `head` and `tail`.
    slots: Slots<T>,
}

impl<T> Shared<T> {
    /// The capacity as a `u64`, for arithmetic with the counters.
    #[inline]
    fn capacity(&self) -> u64 {
        self.slots.capacity() as u64
    }
}

// SAFETY: `Shared` is reached from two threads through the `Arc` in the two
// halves. Its atomics are `Sync`; the slots are only touched by the side that
// owns them under the head/tail protocol described in the module docs, with
// acquire/release handing each slot over, and the values in them move from
// the producer's thread to the consumer's, which needs `T: Send` (and
// nothing more, since no `&T` is ever shared between the threads).
// (`Send` is automatic: `Slots<T>` is `Send` for `T: Send`.)
#[allow(unsafe_code)]
unsafe impl<T: Send> Sync for Shared<T> {}

// Drops the values still in the ring: an unsafe read of initialised slots.
#[allow(unsafe_code)]
impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() {
            return;
        }
        // Both halves are gone (this is the last `Arc`), and the `Arc`'s
        // drop synchronises with theirs, so relaxed loads see their final
        // counters.
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        for pos in head..tail {
            // SAFETY: positions in `[head, tail)` hold initialised values
            // that nobody will read again: no half is left.
            unsafe { self.slots.drop_in_place(pos) };
        }
    }
}
