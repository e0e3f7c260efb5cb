//! The ring's storage: `capacity` slots of possibly-uninitialised `T`, shared
//! by the two halves, addressed by a position counter masked to an index.
//!
//! This module knows nothing about who owns which slot; every method is
//! `unsafe` and its caller (the ring's halves) proves that the slots touched
//! are owned by the calling side and, for reads, initialised. Positions are
//! the ring's monotonic `u64` counters; `pos & mask` is the index, so a
//! range of positions may wrap once around the end of the buffer.
//!
//! Under `cfg(loom)` every slot is a loom `UnsafeCell` and every access goes
//! through it one slot at a time, so loom flags any access that is not
//! ordered by the ring's acquire/release pairs. Without loom, the buffer is
//! one allocation aligned to 128 bytes and ranges are copied with
//! `copy_nonoverlapping` (at most two copies per batch).

use std::mem::MaybeUninit;

/// The alignment of the slot buffer: a cache-line pair (as `CachePadded` on
/// x86_64), so that batches of power-of-two size and item size start and end
/// on line boundaries and consecutive batches never share a line.
#[cfg(not(loom))]
const BUFFER_ALIGN: usize = 128;

/// `capacity` (a power of two) slots of `MaybeUninit<T>`, in one
/// allocation aligned to [`BUFFER_ALIGN`].
///
/// Invariant: `base` points to an allocation of `layout` (or is dangling
/// when `layout.size() == 0`), holding `capacity` slots, freed on drop.
#[cfg(not(loom))]
pub(crate) struct Slots<T> {
    base: std::ptr::NonNull<MaybeUninit<T>>,
    capacity: usize,
    mask: u64,
    layout: std::alloc::Layout,
}

// SAFETY: `Slots` owns its buffer like a `Box<[MaybeUninit<T>]>` would;
// sending it sends the `T`s in it, which needs `T: Send`.
#[cfg(not(loom))]
unsafe impl<T: Send> Send for Slots<T> {}

#[cfg(not(loom))]
impl<T> Slots<T> {
    /// Allocates `capacity` uninitialised slots, or `None` if the buffer's
    /// size overflows. `capacity` must be a power of two (checked by the
    /// caller, [`super::channel`]).
    pub(crate) fn new(capacity: usize) -> Option<Self> {
        debug_assert!(capacity.is_power_of_two());
        let layout = std::alloc::Layout::array::<MaybeUninit<T>>(capacity)
            .and_then(|layout| layout.align_to(BUFFER_ALIGN))
            .ok()?;
        let base = if layout.size() == 0 {
            // Zero-sized items: no memory is touched.
            std::ptr::NonNull::dangling()
        } else {
            // SAFETY: the layout has a non-zero size.
            let raw = unsafe { std::alloc::alloc(layout) };
            match std::ptr::NonNull::new(raw.cast::<MaybeUninit<T>>()) {
                Some(base) => base,
                None => std::alloc::handle_alloc_error(layout),
            }
        };
        Some(Self {
            base,
            capacity,
            mask: capacity as u64 - 1,
            layout,
        })
    }

    /// The number of slots.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(not(loom))]
impl<T> Drop for Slots<T> {
    fn drop(&mut self) {
        if self.layout.size() != 0 {
            // SAFETY: `base` came from `alloc` with this very layout (the
            // struct invariant) and is freed only here. The values in the
            // slots are not dropped: that is `Shared`'s job, which knows
            // which slots are initialised.
            unsafe { std::alloc::dealloc(self.base.as_ptr().cast::<u8>(), self.layout) }
        }
    }
}

/// Loom version: one loom `UnsafeCell` per slot, so loom checks each access.
#[cfg(loom)]
pub(crate) struct Slots<T> {
    cells: Box<[super::sync::UnsafeCell<MaybeUninit<T>>]>,
    mask: u64,
}

#[cfg(loom)]
impl<T> Slots<T> {
    /// Loom version of the std `new`.
    pub(crate) fn new(capacity: usize) -> Option<Self> {
        let cells = (0..capacity)
            .map(|_| super::sync::UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        Some(Self {
            cells,
            mask: capacity as u64 - 1,
        })
    }

    /// The number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.cells.len()
    }
}

impl<T> Slots<T> {
    /// The slot index of position `pos`.
    #[inline]
    fn index(&self, pos: u64) -> usize {
        // The mask is < capacity <= usize::MAX, so the cast is lossless.
        (pos & self.mask) as usize
    }

    /// Splits the positions `[pos, pos + len)` into the run up to the end of
    /// the buffer and the wrapped run from index 0: `(start, first, second)`.
    #[inline]
    fn split(&self, pos: u64, len: usize) -> (usize, usize, usize) {
        let start = self.index(pos);
        let first = len.min(self.capacity() - start);
        (start, first, len - first)
    }
}

#[cfg(not(loom))]
impl<T> Slots<T> {
    /// A raw pointer to slot `index`, valid for reads and writes of one `T`.
    ///
    /// The pointer is derived from the base of the allocation, so it may be
    /// offset to reach any later slot of the same buffer.
    #[inline]
    fn ptr(&self, index: usize) -> *mut MaybeUninit<T> {
        debug_assert!(index < self.capacity());
        // SAFETY: `index < capacity` (it comes from `index()`, masked by
        // `capacity - 1`, or is 0), so the offset stays inside the buffer.
        unsafe { self.base.as_ptr().add(index) }
    }

    /// Moves `value` into the slot of position `pos`.
    ///
    /// # Safety
    /// The slot must be owned by the caller (the producer: `pos` is outside
    /// the consumer's `[head, tail)`), so no other thread touches it now.
    /// Any value already there is overwritten without being dropped.
    #[inline]
    pub(crate) unsafe fn write(&self, pos: u64, value: T) {
        // SAFETY: the caller owns the slot (no concurrent access) and the
        // pointer is in bounds and aligned.
        unsafe { self.ptr(self.index(pos)).write(MaybeUninit::new(value)) }
    }

    /// Moves the value out of the slot of position `pos`.
    ///
    /// # Safety
    /// The slot must be owned by the caller (the consumer: `pos` is inside
    /// `[head, tail)`) and initialised; afterwards the caller must treat it
    /// as uninitialised (advance the head past it) so it is not read twice.
    #[inline]
    pub(crate) unsafe fn read(&self, pos: u64) -> T {
        // SAFETY: the caller owns the initialised slot; the pointer is in
        // bounds and aligned.
        unsafe { self.ptr(self.index(pos)).read().assume_init() }
    }

    /// Moves the values of positions `[pos, pos + n)` out, in order, into
    /// `take`, one at a time (the slot pointers are computed once, not per
    /// item).
    ///
    /// # Safety
    /// `n <= capacity` and every one of those slots is owned by the caller
    /// and initialised, as for [`Slots::read`]; each value is moved out once,
    /// so the caller must treat the slots as uninitialised afterwards, even
    /// if `take` unwinds part-way (the values not yet taken then stay in
    /// their slots, and the caller must know how many were taken).
    #[inline]
    pub(crate) unsafe fn read_each(&self, pos: u64, n: usize, mut take: impl FnMut(T)) {
        debug_assert!(n <= self.capacity());
        let (start, first, second) = self.split(pos, n);
        let base = self.ptr(0);
        // Two plain loops (a `Chain` iterator optimises worse).
        for index in start..start + first {
            // SAFETY: `index < capacity` (see `write_slice`), so the offset
            // stays in the buffer `base` was derived from; the slot is
            // initialised, owned by the caller and read exactly once.
            take(unsafe { base.add(index).read().assume_init() });
        }
        for index in 0..second {
            // SAFETY: as above.
            take(unsafe { base.add(index).read().assume_init() });
        }
    }

    /// Drops the value in the slot of position `pos` in place.
    ///
    /// # Safety
    /// As for [`Slots::read`].
    pub(crate) unsafe fn drop_in_place(&self, pos: u64) {
        // SAFETY: the caller owns the initialised slot and will not use it
        // again as initialised.
        unsafe { (*self.ptr(self.index(pos))).assume_init_drop() }
    }
}

#[cfg(not(loom))]
impl<T: Copy> Slots<T> {
    /// Copies `src` into the slots of positions `[pos, pos + src.len())`.
    ///
    /// # Safety
    /// `src.len() <= capacity` and every one of those slots is owned by the
    /// caller (the producer), as for [`Slots::write`].
    #[inline]
    pub(crate) unsafe fn write_slice(&self, pos: u64, src: &[T]) {
        debug_assert!(src.len() <= self.capacity());
        if let [item] = src {
            // One item (common for partial batches): skip the memcpy call.
            // SAFETY: the caller's contract, for this one slot.
            unsafe { self.write(pos, *item) };
            return;
        }
        let (start, first, second) = self.split(pos, src.len());
        // SAFETY: `[start, start + first)` and `[0, second)` are in bounds
        // (`first <= capacity - start`, `second <= start` because
        // `src.len() <= capacity`), owned by the caller, and cannot overlap
        // `src`, which is a shared borrow of other memory. `MaybeUninit<T>`
        // has the layout of `T`.
        unsafe {
            let dst = self.ptr(start).cast::<T>();
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, first);
            if second > 0 {
                let dst = self.ptr(0).cast::<T>();
                std::ptr::copy_nonoverlapping(src.as_ptr().add(first), dst, second);
            }
        }
    }

    /// Copies the values of positions `[pos, pos + dst.len())` into `dst`.
    ///
    /// # Safety
    /// `dst.len() <= capacity` and every one of those slots is owned by the
    /// caller (the consumer) and initialised, as for [`Slots::read`].
    #[inline]
    pub(crate) unsafe fn read_slice(&self, pos: u64, dst: &mut [T]) {
        debug_assert!(dst.len() <= self.capacity());
        if let [out] = dst {
            // SAFETY: the caller's contract, for this one slot.
            *out = unsafe { self.read(pos) };
            return;
        }
        let (start, first, second) = self.split(pos, dst.len());
        // SAFETY: as in `write_slice`, with the roles swapped: the source
        // slots are in bounds, initialised and owned by the caller; `dst` is
        // an exclusive borrow of other memory. `T: Copy`, so copying the
        // bits leaves nothing to drop twice.
        unsafe {
            let src = self.ptr(start).cast::<T>();
            std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), first);
            if second > 0 {
                let src = self.ptr(0).cast::<T>();
                std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr().add(first), second);
            }
        }
    }
}

#[cfg(loom)]
impl<T> Slots<T> {
    /// Loom version of the std `write`: same contract.
    pub(crate) unsafe fn write(&self, pos: u64, value: T) {
        self.cells[self.index(pos)].with_mut(|p| {
            // SAFETY: the caller owns the slot; loom checks that claim.
            unsafe { p.write(MaybeUninit::new(value)) }
        })
    }

    /// Loom version of the std `read`: same contract.
    pub(crate) unsafe fn read(&self, pos: u64) -> T {
        self.cells[self.index(pos)].with(|p| {
            // SAFETY: the caller owns the initialised slot; loom checks the
            // ownership claim.
            unsafe { p.read().assume_init() }
        })
    }

    /// Loom version of the std `read_each`: same contract.
    pub(crate) unsafe fn read_each(&self, pos: u64, n: usize, mut take: impl FnMut(T)) {
        for i in 0..n as u64 {
            // SAFETY: the caller's contract covers every position in range.
            take(unsafe { self.read(pos + i) });
        }
    }

    /// Loom version of the std `drop_in_place`: same contract.
    pub(crate) unsafe fn drop_in_place(&self, pos: u64) {
        self.cells[self.index(pos)].with_mut(|p| {
            // SAFETY: the caller owns the initialised slot.
            unsafe { (*p).assume_init_drop() }
        })
    }
}

#[cfg(loom)]
impl<T: Copy> Slots<T> {
    /// Loom version of the std `write_slice`: same contract, one slot at a
    /// time (the index arithmetic is shared with the std version).
    pub(crate) unsafe fn write_slice(&self, pos: u64, src: &[T]) {
        let (start, first, _) = self.split(pos, src.len());
        for (i, value) in src.iter().enumerate() {
            let index = if i < first { start + i } else { i - first };
            self.cells[index].with_mut(|p| {
                // SAFETY: the caller owns the slot; loom checks that claim.
                unsafe { p.write(MaybeUninit::new(*value)) }
            });
        }
    }

    /// Loom version of the std `read_slice`: same contract.
    pub(crate) unsafe fn read_slice(&self, pos: u64, dst: &mut [T]) {
        let (start, first, _) = self.split(pos, dst.len());
        for (i, out) in dst.iter_mut().enumerate() {
            let index = if i < first { start + i } else { i - first };
            *out = self.cells[index].with(|p| {
                // SAFETY: the caller owns the initialised slot.
                unsafe { p.read().assume_init() }
            });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buffer_is_cache_line_aligned_for_any_item_size() {
        fn check<T>() {
            for capacity in [1, 2, 64, 1024] {
                let slots = Slots::<T>::new(capacity).expect("small layout");
                assert_eq!(slots.ptr(0) as usize % BUFFER_ALIGN, 0);
                assert_eq!(slots.capacity(), capacity);
            }
        }
        check::<u8>();
        check::<u64>();
        check::<[u64; 2]>();
        check::<[u8; 24]>();
    }

    #[test]
    fn oversized_buffers_are_refused_not_allocated() {
        assert!(Slots::<[u8; 1 << 40]>::new(1 << 31).is_none());
    }
}
