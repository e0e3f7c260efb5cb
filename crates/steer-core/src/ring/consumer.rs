//! The consumer half: the only writer of `head` and the only reader of the
//! filled slots.
//!
//! Invariants kept here: `published <= head <= cached_tail <= tail`, where
//! `tail` is the producer's shared counter and `published` the last value
//! stored in the shared head; so `cached_tail - head` under-estimates the
//! fill level and the consumer never reads a slot the producer has not
//! published, and the producer never reuses a slot (or sees an item as
//! handled) before the consumer publishes past it.

use super::sync::{Arc, Ordering};
use super::Shared;

/// The receiving half of a ring (one worker's end of the queue from one
/// dispatcher). `Send`, not `Clone`: there is exactly one consumer.
///
/// ```
/// use steer_core::ring::channel;
///
/// let (mut tx, mut rx) = channel::<u32>(8).expect("power of two");
/// assert_eq!(tx.push_batch(&[1, 2, 3, 4, 5]), 5);
/// let mut buf = [0; 2];
/// assert_eq!(rx.pop_batch(&mut buf), 2);
/// assert_eq!(buf, [1, 2]);
/// let mut sum = 0;
/// assert_eq!(rx.consume(usize::MAX, |x| sum += x), 3); // head published once
/// assert_eq!((sum, rx.dequeued(), rx.is_empty()), (12, 5, true));
/// ```
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// Our own counter: the authoritative value of the shared `head`.
    head: u64,
    /// The producer's `tail` as last read; never ahead of the real one.
    cached_tail: u64,
    /// The head as last stored in the shared counter (`<= head`): items in
    /// `[published, head)` were taken but are not yet released to the
    /// producer ([`Consumer::consume_unpublished`]).
    published: u64,
}

impl<T> Consumer<T> {
    pub(super) fn new(shared: Arc<Shared<T>>) -> Self {
        Self {
            shared,
            head: 0,
            cached_tail: 0,
            published: 0,
        }
    }

    /// The ring's capacity (a power of two).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.shared.slots.capacity()
    }

    /// Filled slots by the cached tail, re-reading the shared tail when
    /// fewer than `wanted` look filled. Returns the count (may be `< wanted`).
    #[inline]
    fn available(&mut self, wanted: u64) -> u64 {
        let avail = self.cached_tail - self.head;
        if avail >= wanted {
            return avail;
        }
        // Acquire: the producer's writes of the slots it published
        // happen-before our reads of them.
        self.cached_tail = self.shared.tail.load(Ordering::Acquire);
        self.cached_tail - self.head
    }

    /// Frees `n` slots just read (and any taken unpublished before): one
    /// `Release` store of `head`.
    #[inline]
    fn release(&mut self, n: u64) {
        self.head += n;
        self.publish();
    }

    /// Publishes the head past every item taken so far: one `Release`
    /// store, or nothing when it is already published. After
    /// [`Consumer::consume_unpublished`], call it once the handler's work on
    /// those items is complete (e.g. their replies are on the wire), so the
    /// producer's [`Producer::has_dequeued`](super::Producer::has_dequeued)
    /// covers that work too.
    #[inline]
    pub fn publish(&mut self) {
        if self.published != self.head {
            self.published = self.head;
            // Release: our reads of the slots (and, after `consume`, the
            // handler's work) happen-before the producer's Acquire load that
            // observes this head, hence before it overwrites them.
            self.shared.head.store(self.head, Ordering::Release);
        }
    }

    /// Publishes the head only up to `position`, a [`Consumer::dequeued`]
    /// count recorded earlier: the items taken after it stay unavailable to
    /// the producer, and its [`Producer::has_dequeued`](super::Producer::has_dequeued)
    /// covers only the work finished for items before `position`. For a
    /// consumer whose work on an item ends later than the next batch (a
    /// reply queued to a device, done once the device completes it): record
    /// the position at each flush, publish up to the newest one whose work
    /// has ended. A position at or behind what is already published does
    /// nothing; one past what was taken is clamped to it. One `Release`
    /// store at most.
    #[inline]
    pub fn publish_to(&mut self, position: u64) {
        let position = position.min(self.head);
        if position > self.published {
            self.published = position;
            // Release: as in `publish`, for the items before `position`
            // (slots at and after it are not handed back).
            self.shared.head.store(position, Ordering::Release);
        }
    }

    /// The head as the producer sees it: items before it are released.
    #[inline]
    pub fn published(&self) -> u64 {
        self.published
    }

    /// Dequeues one item, or `None` when the ring is empty.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.available(1) == 0 {
            return None;
        }
        // SAFETY: position `head` is in `[head, tail)` for a tail we loaded
        // with Acquire: the slot is initialised and ours until `release`.
        let item = unsafe { self.shared.slots.read(self.head) };
        self.release(1);
        Some(item)
    }

    /// Dequeues up to `max` items, calling `handle` on each in order, and
    /// publishes the head once, after the last call returned. Returns how
    /// many were handled.
    ///
    /// Because the head moves only after `handle` returned, the producer's
    /// [`Producer::has_dequeued`](super::Producer::has_dequeued) means
    /// "handled", which is what RFS's `last_qtail` needs. If `handle`
    /// panics, the items already passed to it count as dequeued (they were
    /// moved out) and the rest stay in the ring.
    #[doc(alias = "process_backlog")]
    pub fn consume<F: FnMut(T)>(&mut self, max: usize, handle: F) -> usize {
        // Publishes also when `handle` panics.
        let this = PublishOnDrop(self);
        this.0.consume_unpublished(max, handle)
    }

    /// [`Consumer::consume`] without the publish: the items leave the ring
    /// on this side, but the producer keeps seeing them as queued (their
    /// slots stay unavailable, [`Producer::has_dequeued`](super::Producer::has_dequeued)
    /// stays false) until [`Consumer::publish`], also if `handle` panics.
    /// For a consumer whose work on an item ends after `handle` returns (a
    /// reply staged and sent at the end of the batch): publish once it has
    /// ended, still once per batch.
    ///
    /// ```
    /// use steer_core::ring::channel;
    ///
    /// let (mut tx, mut rx) = channel::<u32>(4).expect("power of two");
    /// tx.push_batch(&[1, 2]);
    /// let mark = tx.enqueued();
    /// let mut staged = Vec::new();
    /// assert_eq!(rx.consume_unpublished(8, |x| staged.push(x)), 2);
    /// assert!(!tx.has_dequeued(mark)); // staged, not sent: still "queued"
    /// staged.clear(); // ... sent
    /// rx.publish();
    /// assert!(tx.has_dequeued(mark));
    /// ```
    pub fn consume_unpublished<F: FnMut(T)>(&mut self, max: usize, mut handle: F) -> usize {
        let avail = self.available(max as u64);
        // `avail <= capacity`, so the min fits a usize.
        let n = (max as u64).min(avail) as usize;
        if n == 0 {
            return 0;
        }
        let start = self.head;
        let shared: &Shared<T> = &self.shared;
        let mut taken = Taken {
            head: &mut self.head,
            count: 0,
        };
        // SAFETY: positions `[start, start + n)` are inside `[head, tail)`
        // for a tail loaded with Acquire: initialised and ours. `count` is
        // bumped before `handle` runs, so if it panics the guard still moves
        // our head past every item already moved out, and none is read
        // twice; the items not yet taken stay in the ring. The shared head
        // is not stored here, so the producer cannot reuse those slots
        // before `publish`, which needs `&mut self`, after this returns.
        unsafe {
            shared.slots.read_each(start, n, |item| {
                taken.count += 1;
                handle(item);
            });
        }
        n
    }

    /// A fresh (`Acquire`) count of items waiting.
    pub fn len(&self) -> usize {
        let tail = self.shared.tail.load(Ordering::Acquire);
        // At most the capacity, which fits a usize.
        (tail - self.head) as usize
    }

    /// Whether no item is waiting, by a fresh read of the producer's tail.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items ever enqueued (the ring's `tail`), by a fresh `Acquire` load.
    #[inline]
    #[doc(alias = "input_queue_tail")]
    pub fn enqueued(&self) -> u64 {
        self.shared.tail.load(Ordering::Acquire)
    }

    /// Items ever dequeued (the ring's `head`); exact on this side.
    #[inline]
    #[doc(alias = "input_queue_head")]
    pub fn dequeued(&self) -> u64 {
        self.head
    }

    /// Whether the producer half has been dropped (its dispatcher is gone);
    /// items already in the ring can still be taken.
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) < 2
    }
}

impl<T: Copy> Consumer<T> {
    /// Dequeues up to `buf.len()` items into the front of `buf`, in order,
    /// with one publish, and returns how many were written.
    #[inline]
    pub fn pop_batch(&mut self, buf: &mut [T]) -> usize {
        let avail = self.available(buf.len() as u64);
        // `avail <= capacity`, so the min fits a usize.
        let n = (buf.len() as u64).min(avail) as usize;
        if n == 0 {
            return 0;
        }
        // SAFETY: positions `[head, head + n)` are inside `[head, tail)` for
        // a tail loaded with Acquire: initialised and ours; `n <= capacity`.
        unsafe { self.shared.slots.read_slice(self.head, &mut buf[..n]) };
        self.release(n as u64);
        n
    }
}

/// Moves the consumer's own head past the items `consume_unpublished` has
/// taken, also on unwind (the shared head is `publish`'s).
struct Taken<'a> {
    /// The consumer's own head counter.
    head: &'a mut u64,
    /// Items moved out so far.
    count: u64,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        *self.head += self.count;
    }
}

/// Publishes the consumer's head when dropped (`consume`, also on unwind).
struct PublishOnDrop<'a, T>(&'a mut Consumer<T>);

impl<T> Drop for PublishOnDrop<'_, T> {
    fn drop(&mut self) {
        self.0.publish();
    }
}

impl<T> Drop for Consumer<T> {
    /// A consumer that goes away publishes what it took, so neither the
    /// producer's [`Producer::reclaim_abandoned`](super::Producer::reclaim_abandoned)
    /// nor the ring's own drop sees those items again.
    fn drop(&mut self) {
        self.publish();
    }
}

impl<T> std::fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity())
            .field("dequeued", &self.head)
            .field("cached_tail", &self.cached_tail)
            .field("published", &self.published)
            .finish()
    }
}
