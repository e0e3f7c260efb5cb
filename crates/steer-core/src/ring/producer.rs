//! The producer half: the only writer of `tail` and of the free slots.
//!
//! Invariant kept here: `cached_head <= head <= tail <= cached_head +
//! capacity`, where `head` is the consumer's shared counter; so
//! `tail - cached_head` over-estimates the fill level and the producer never
//! writes a slot the consumer still owns.

use super::sync::{fence, Arc, Ordering};
use super::{PushError, Shared};

/// The sending half of a ring (one dispatcher's end of the queue to one
/// worker). `Send`, not `Clone`: there is exactly one producer.
///
/// ```
/// use steer_core::ring::{channel, PushError};
///
/// let (mut tx, mut rx) = channel::<u32>(2).expect("power of two");
/// tx.push(7)?;
/// assert_eq!(tx.push_batch(&[8, 9]), 1);
/// // Full: the item comes back, to be returned to its pool.
/// assert_eq!(tx.push(10), Err(PushError::Full(10)));
/// assert_eq!(rx.pop(), Some(7));
/// assert_eq!((tx.enqueued(), tx.dequeued()), (2, 1));
/// # Ok::<(), PushError<u32>>(())
/// ```
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// Our own counter: the authoritative value of the shared `tail`.
    tail: u64,
    /// The consumer's `head` as last read; never ahead of the real one.
    cached_head: u64,
}

impl<T> Producer<T> {
    pub(super) fn new(shared: Arc<Shared<T>>) -> Self {
        Self {
            shared,
            tail: 0,
            cached_head: 0,
        }
    }

    /// The ring's capacity (a power of two).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.shared.slots.capacity()
    }

    /// Free slots by the cached head, re-reading the shared head when fewer
    /// than `wanted` look free. Returns the free count (may be `< wanted`).
    #[inline]
    fn free(&mut self, wanted: u64) -> u64 {
        let cap = self.shared.capacity();
        let free = cap - (self.tail - self.cached_head);
        if free >= wanted {
            return free;
        }
        // Acquire: the consumer's reads of the slots it freed happen-before
        // our overwriting them.
        self.cached_head = self.shared.head.load(Ordering::Acquire);
        cap - (self.tail - self.cached_head)
    }

    /// Publishes `n` slots just written: one `Release` store of `tail`.
    #[inline]
    fn publish(&mut self, n: u64) {
        self.tail += n;
        // Release: the slot writes happen-before the consumer's Acquire load
        // that observes this tail, hence before its reads of the slots.
        self.shared.tail.store(self.tail, Ordering::Release);
    }

    /// Enqueues one item, or hands it back in [`PushError::Full`] when the
    /// ring is full.
    #[inline]
    pub fn push(&mut self, item: T) -> Result<(), PushError<T>> {
        if self.free(1) == 0 {
            return Err(PushError::Full(item));
        }
        // SAFETY: `free >= 1` means `tail - head < capacity` for the head we
        // just saw (or an older, smaller one), so position `tail` is outside
        // `[head, tail)`: the slot is ours and the consumer will not read it
        // before the Release store in `publish`.
        unsafe { self.shared.slots.write(self.tail, item) };
        self.publish(1);
        Ok(())
    }

    /// A fresh (`Acquire`) count of free slots.
    pub fn free_len(&self) -> usize {
        let head = self.shared.head.load(Ordering::Acquire);
        // At most the capacity, which fits a usize.
        (self.shared.capacity() - (self.tail - head)) as usize
    }

    /// Whether the ring is full, by a fresh read of the consumer's head.
    pub fn is_full(&self) -> bool {
        self.free_len() == 0
    }

    /// Items ever enqueued (the ring's `tail`); exact on this side.
    ///
    /// Record it after pushing a flow's packet to get that packet's
    /// `last_qtail`, then test it with [`Producer::has_dequeued`].
    #[inline]
    #[doc(alias = "input_queue_tail")]
    pub fn enqueued(&self) -> u64 {
        self.tail
    }

    /// Items ever dequeued (the ring's `head`), by a fresh `Acquire` load.
    ///
    /// Never ahead of the consumer; see the module docs for what a value
    /// `>= X` guarantees about the items below position `X`.
    #[inline]
    #[doc(alias = "input_queue_head")]
    pub fn dequeued(&self) -> u64 {
        self.shared.head.load(Ordering::Acquire)
    }

    /// Whether the consumer's head has reached `mark`, i.e. every item
    /// enqueued before [`Producer::enqueued`] returned `mark` has left the
    /// ring (and, if the consumer uses [`Consumer::consume`](super::Consumer::consume),
    /// been handled). Once `true`, always `true`.
    #[inline]
    pub fn has_dequeued(&self, mark: u64) -> bool {
        self.dequeued() >= mark
    }

    /// Whether the consumer half has been dropped (e.g. its worker exited).
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) < 2
    }

    /// Once the consumer half is gone, takes back (in order) the items it
    /// never dequeued and returns how many; the ring is then empty. While a
    /// consumer exists it does nothing and returns 0. This is how a
    /// dispatcher gets back the frames it pushed to a worker that died
    /// between its liveness check and the push.
    ///
    /// ```
    /// let (mut tx, rx) = steer_core::ring::channel::<u32>(4).unwrap();
    /// tx.push(1).unwrap();
    /// assert_eq!(tx.reclaim_abandoned(|_| {}), 0); // the consumer is alive
    /// tx.push(2).unwrap();
    /// drop(rx);
    /// let mut back = Vec::new();
    /// assert_eq!(tx.reclaim_abandoned(|x| back.push(x)), 2);
    /// assert_eq!(back, [1, 2]);
    /// ```
    pub fn reclaim_abandoned(&mut self, mut take: impl FnMut(T)) -> usize {
        if Arc::strong_count(&self.shared) >= 2 {
            return 0;
        }
        // Acquire: pairs with the Release decrement of the consumer's `Arc`
        // drop, so all it did (its last `head` store, its reads of slots)
        // happens-before what follows.
        fence(Ordering::Acquire);
        let head = self.shared.head.load(Ordering::Relaxed);
        for pos in head..self.tail {
            // SAFETY: positions in `[head, tail)` hold values we published
            // and the consumer never read; it is gone and we hold the only
            // `Arc`, so nobody else touches the slots. Each position is read
            // once, and `head` moves past all of them below, so neither a
            // later pop nor `Shared`'s drop sees them again.
            take(unsafe { self.shared.slots.read(pos) });
        }
        self.shared.head.store(self.tail, Ordering::Release);
        self.cached_head = self.tail;
        // At most the capacity, which fits a usize.
        (self.tail - head) as usize
    }
}

impl<T: Copy> Producer<T> {
    /// Enqueues as many of `items` as fit, in order, with one publish, and
    /// returns how many were taken: `items[n..]` stay with the caller.
    #[inline]
    pub fn push_batch(&mut self, items: &[T]) -> usize {
        let free = self.free(items.len() as u64);
        // `free <= capacity`, so the min fits a usize.
        let n = (items.len() as u64).min(free) as usize;
        if n == 0 {
            return 0;
        }
        // SAFETY: `n <= free` slots from position `tail` are outside
        // `[head, tail)` (see `push`), hence ours; `n <= capacity`.
        unsafe { self.shared.slots.write_slice(self.tail, &items[..n]) };
        self.publish(n as u64);
        n
    }
}

impl<T> std::fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("enqueued", &self.tail)
            .field("cached_head", &self.cached_head)
            .finish()
    }
}
