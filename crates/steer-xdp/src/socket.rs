//! One AF_XDP socket bound to one rx queue, with its four rings (rx, tx, fill,
//! completion) over the port's shared UMEM, and its kernel statistics.
//!
//! Invariants:
//! - This module makes a [`Frame`] only from a descriptor it took off the rx
//!   ring, the completion ring (through the free pool) or out of its free
//!   pool, and puts a descriptor on the fill or tx ring only from its free
//!   pool or from a `Frame` it consumes: each frame is in one place (see
//!   [`crate::umem`] for what a `Frame` guarantees).
//! - Ring operations are batched: one libxdp call per batch, never per frame.
//! - Every move between places updates the socket's [`Ledger`](crate::accounting::Ledger) once per batch.

use std::{
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd},
    sync::Arc,
    thread,
    time::Duration,
};

use xsk_rs::config::{BindFlags, Interface, LibxdpFlags, QueueSize, SocketConfig};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::{
    accounting::{Ledger, RingCensus},
    config::BindMode,
    sys,
    umem::{Frame, RxMeta, UmemView},
};

/// One AF_XDP socket on one rx queue. `Send`, not `Sync`: one thread drives it.
///
/// ```no_run
/// # fn main() -> Result<(), steer_xdp::XdpError> {
/// use steer_xdp::{PortConfig, Proto, XdpPort};
/// let mut port = XdpPort::open(PortConfig::new("veth0").own(Proto::Udp, 9000))?;
/// let mut sockets = port.take_sockets();
/// let mut frames = Vec::new();
/// let s = &mut sockets[0];
/// s.recv(&mut frames, 64).map_err(|e| steer_xdp::XdpError::Io { context: "recv", source: e })?;
/// for f in &frames {
///     println!("{} bytes on queue {}", s.data(f).len(), s.queue());
/// }
/// s.recycle(frames.drain(..));
/// # Ok(()) }
/// ```
#[doc(alias = "xsk_socket")]
#[doc(alias = "AF_XDP")]
pub struct QueueSocket {
    queue: u32,
    tx: TxQueue,
    rx: RxQueue,
    fill: FillQueue,
    comp: CompQueue,
    mem: UmemView,
    free: Vec<FrameDesc>,
    scratch: Vec<FrameDesc>,
    ring_size: u32,
    ledger: Arc<Ledger>,
    /// Bound with `XDP_USE_NEED_WAKEUP`: the tx ring's flag says when the
    /// kernel needs a kick, and no other kick is made.
    need_wakeup: bool,
    /// Frames ever put on the tx ring, and ever reaped from the completion
    /// ring: positions in this socket's transmit sequence (the device
    /// completes a tx queue in ring order), see [`QueueSocket::tx_sequence`].
    tx_queued: u64,
    tx_completed: u64,
}

impl std::fmt::Debug for QueueSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSocket")
            .field("queue", &self.queue)
            .field("fd", &self.as_raw_fd())
            .field("free", &self.free.len())
            .finish()
    }
}

impl QueueSocket {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        queue: u32,
        tx: TxQueue,
        rx: RxQueue,
        fill: FillQueue,
        comp: CompQueue,
        mem: UmemView,
        free: Vec<FrameDesc>,
        ring_size: u32,
    ) -> Self {
        let ledger = Arc::new(Ledger::default());
        Ledger::add(&ledger.free, free.len());
        QueueSocket {
            queue,
            tx,
            rx,
            fill,
            comp,
            mem,
            free,
            scratch: vec![FrameDesc::default(); ring_size as usize],
            ring_size,
            ledger,
            need_wakeup: false,
            tx_queued: 0,
            tx_completed: 0,
        }
    }

    /// Says whether the socket was bound with `XDP_USE_NEED_WAKEUP`. With
    /// it, a send kicks the kernel only when the tx ring asks (a zero-copy
    /// driver whose NAPI is running takes new frames without a system
    /// call; copy mode always asks); without it, every send that queued
    /// frames kicks.
    pub(crate) fn with_need_wakeup(mut self, on: bool) -> Self {
        self.need_wakeup = on;
        self
    }

    pub(crate) fn ledger(&self) -> Arc<Ledger> {
        Arc::clone(&self.ledger)
    }

    /// The rx queue this socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Frames in this socket's free pool.
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }

    /// True when a poll of this socket has nothing to do: the rx ring is
    /// empty, no frame is on the tx side (nothing to kick or reap), at least
    /// `stocked` frames are ready for rx (in the fill ring, in the kernel or
    /// in the free pool) and the free pool holds at most `free_high`.
    ///
    /// Cheap enough for every round of a polling loop: one read of the rx
    /// ring's producer index (only when its cached view is empty) and this
    /// socket's own counters; the fill, tx and completion rings are not
    /// touched. Frames the kernel took from the fill ring for rx are in the
    /// rx ring or about to be, so a stocked socket with an empty rx ring
    /// needs no top-up until something is received.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), steer_xdp::XdpError> {
    /// use steer_xdp::{PortConfig, Proto, XdpPort};
    /// let mut port = XdpPort::open(PortConfig::new("veth0").own(Proto::Udp, 9000))?;
    /// let mut s = port.take_sockets().remove(0);
    /// let mut frames = Vec::new();
    /// loop {
    ///     if s.idle(1024, 4096) {
    ///         std::hint::spin_loop(); // or sleep on the fd
    ///         continue;
    ///     }
    ///     let _ = s.recv(&mut frames, 64);
    ///     s.complete();
    ///     s.recycle(frames.drain(..));
    /// }
    /// # }
    /// ```
    #[inline]
    pub fn idle(&mut self, stocked: usize, free_high: usize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        // Only this socket's owner writes these counters: plain loads.
        let in_rx = self.ledger.in_rx.load(Relaxed).max(0) as usize;
        self.ledger.in_tx.load(Relaxed) == 0
            && self.free.len() <= free_high
            && in_rx + self.free.len() >= stocked
            && !self.rx_ready()
    }

    /// Whether the rx ring holds received frames. One read of the ring's
    /// producer index, and only when the cached view of it is empty.
    #[inline]
    pub fn rx_ready(&mut self) -> bool {
        self.rx.nb_avail(1) > 0
    }

    /// Moves free frames into the fill ring (as many as fit, one batch) and
    /// wakes the kernel if the ring asks for it. Returns how many moved.
    pub fn refill(&mut self) -> io::Result<usize> {
        let want = u32::try_from(self.free.len()).unwrap_or(u32::MAX);
        let room = self.fill.nb_free(want.min(self.ring_size)) as usize;
        let n = room.min(self.free.len());
        if n > 0 {
            let start = self.free.len() - n;
            // SAFETY: the descriptors come from this socket's free pool, so
            // they belong to this UMEM and no Frame or ring holds them; they
            // are removed from the pool right after, so each is in one place.
            let done = unsafe { self.fill.produce(&self.free[start..]) };
            if done == n {
                self.free.truncate(start);
                Ledger::sub(&self.ledger.free, n);
                Ledger::add(&self.ledger.in_rx, n);
            }
        }
        if self.fill.needs_wakeup() {
            self.ledger
                .wakeups
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            sys::kick_rx(self.as_raw_fd())?;
        }
        Ok(n)
    }

    /// Takes up to `max` received frames off the rx ring (one batch) into
    /// `out`, then refills the fill ring. Returns how many were received.
    pub fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> io::Result<usize> {
        let max = max.min(self.scratch.len());
        // SAFETY: the scratch descriptors are overwritten by the ring; the
        // frames they then name were filled by the kernel and are now ours.
        let n = unsafe { self.rx.consume(&mut self.scratch[..max]) };
        if n > 0 {
            let id = self.mem.id();
            out.extend(
                self.scratch[..n]
                    .iter()
                    .map(|&desc| Frame::from_ring(desc, id)),
            );
            Ledger::sub(&self.ledger.in_rx, n);
            Ledger::add(&self.ledger.held, n);
            self.ledger
                .rx_frames
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        }
        self.refill()?;
        Ok(n)
    }

    /// Puts frames from the front of `frames` on the tx ring (as many as fit,
    /// one batch) and kicks the kernel, again while it keeps taking them, so
    /// in copy mode every frame queued has been handed to the device, in
    /// order, when this returns (a zero-copy driver sends them later); frames
    /// that did not fit stay in `frames`. Also reaps completions. Returns how
    /// many were queued.
    /// Frames of another port are left in `frames` untouched.
    pub fn send(&mut self, frames: &mut Vec<Frame>) -> io::Result<usize> {
        self.reap();
        let ours = frames
            .iter()
            .take_while(|f| f.umem_id() == self.mem.id())
            .count();
        let want = u32::try_from(ours.min(self.scratch.len())).unwrap_or(u32::MAX);
        let mut n = self.tx.nb_free(want).min(want) as usize;
        // A multi-buffer packet goes on the ring whole or waits: never a
        // chain's head without its end.
        while n > 0 && frames[n - 1].continues() {
            n -= 1;
        }
        if n > 0 {
            let chains = frames[..n]
                .windows(2)
                .filter(|w| w[0].continues() && !w[1].continues())
                .count();
            if chains > 0 {
                self.count_multi(0, chains as u64, 0);
            }
            for (slot, f) in self.scratch.iter_mut().zip(frames.iter()).take(n) {
                *slot = f.desc();
            }
            // SAFETY: the descriptors come from `Frame`s of this UMEM, which
            // are exclusively ours; they are dropped from `frames` right after
            // so no Frame names a frame the kernel now owns.
            let done = unsafe { self.tx.produce(&self.scratch[..n]) };
            if done == n {
                frames.drain(..n);
                Ledger::sub(&self.ledger.held, n);
                Ledger::add(&self.ledger.in_tx, n);
                self.tx_queued += n as u64;
            }
        }
        // Copy mode reports need-wakeup even without XDP_USE_NEED_WAKEUP.
        if self.tx.needs_wakeup() || (n > 0 && !self.need_wakeup) {
            self.kick_tx_until_taken()?;
        }
        Ok(n)
    }

    /// Counts multi-buffer packets received, transmitted and refused.
    pub(crate) fn count_multi(&self, rx: u64, tx: u64, refused: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if rx > 0 {
            self.ledger.multi_rx.fetch_add(rx, Relaxed);
        }
        if tx > 0 {
            self.ledger.multi_tx.fetch_add(tx, Relaxed);
        }
        if refused > 0 {
            self.ledger.multi_refused.fetch_add(refused, Relaxed);
        }
    }

    /// Counts a multi-buffer packet its sender refused (no frames to build
    /// it from, or too long for one chain), in this socket's counters.
    pub fn count_multi_refused(&self) {
        self.count_multi(0, 0, 1);
    }

    /// Frames on the tx ring the kernel has not taken yet (an exact read of
    /// the ring's consumer position).
    fn tx_pending(&mut self) -> u32 {
        self.ring_size - self.tx.nb_free_exact()
    }

    /// Kicks the kernel, and again as long as a kick took frames and some
    /// are left: in copy mode a kick sends at most 32 frames and the rest
    /// would wait on the ring for the next kick; a driver that sends later
    /// (zero-copy) takes none during the kick, so it gets one, as before.
    fn kick_tx_until_taken(&mut self) -> io::Result<()> {
        let mut pending = self.tx_pending();
        loop {
            self.ledger
                .wakeups
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            sys::kick_tx(self.as_raw_fd())?;
            let now = self.tx_pending();
            if now == 0 || now >= pending {
                return Ok(());
            }
            pending = now;
        }
    }

    /// Moves completed transmissions from the completion ring to the free
    /// pool, and kicks the kernel again when the tx ring still holds frames
    /// (in copy mode the kernel sends at most 32 frames per kick).
    pub fn complete(&mut self) -> usize {
        if self.tx.nb_free_exact() < self.ring_size {
            self.ledger
                .wakeups
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // A failed kick is retried on the next call; nothing is lost.
            let _ = sys::kick_tx(self.as_raw_fd());
        }
        self.reap()
    }

    /// Frames ever put on the tx ring and frames ever completed, as
    /// `(queued, completed)`, after reaping the completion ring (and kicking
    /// the kernel if the tx ring holds frames and asks for a wakeup: a
    /// zero-copy driver may wait for one). A tx queue completes in ring
    /// order, so `completed >= q` for a `queued` count `q` read after some
    /// send means every frame of that send has left. No system call unless
    /// the ring asks for a kick.
    pub fn tx_sequence(&mut self) -> (u64, u64) {
        if self.tx_completed < self.tx_queued
            && self.tx.needs_wakeup()
            && self.tx.nb_free_exact() < self.ring_size
        {
            self.ledger
                .wakeups
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // A failed kick is retried on the next call; nothing is lost.
            let _ = sys::kick_tx(self.as_raw_fd());
        }
        self.reap();
        (self.tx_queued, self.tx_completed)
    }

    /// Completion ring to free pool, without a kick.
    fn reap(&mut self) -> usize {
        let mut total = 0;
        loop {
            let len = self.scratch.len();
            // SAFETY: the completion ring hands back frames of this UMEM that
            // the kernel has finished with; they go straight to the free pool.
            let n = unsafe { self.comp.consume(&mut self.scratch[..len]) };
            if n == 0 {
                break;
            }
            self.free.extend_from_slice(&self.scratch[..n]);
            total += n;
            if n < len {
                break;
            }
        }
        if total > 0 {
            self.tx_completed += total as u64;
            Ledger::sub(&self.ledger.in_tx, total);
            Ledger::add(&self.ledger.free, total);
            self.ledger
                .tx_frames
                .fetch_add(total as u64, std::sync::atomic::Ordering::Relaxed);
        }
        total
    }

    /// Returns held frames to this socket's free pool. Frames of another port
    /// are not taken: they are handed back (the vector is empty, and does not
    /// allocate, when all frames belong here).
    pub fn recycle(&mut self, frames: impl IntoIterator<Item = Frame>) -> Vec<Frame> {
        let before = self.free.len();
        let id = self.mem.id();
        let mut foreign = Vec::new();
        for f in frames {
            if f.umem_id() == id {
                self.free.push(f.desc());
            } else {
                foreign.push(f);
            }
        }
        let n = self.free.len() - before;
        Ledger::sub(&self.ledger.held, n);
        Ledger::add(&self.ledger.free, n);
        foreign
    }

    /// Takes up to `n` frames from the free pool for the application to fill
    /// and send. Their bytes are whatever they last held; their length is
    /// whatever it was when they entered the pool (0 after a completion): use
    /// [`Self::write`] or [`Self::set_len`].
    pub fn alloc(&mut self, n: usize, out: &mut Vec<Frame>) -> usize {
        let n = n.min(self.free.len());
        let id = self.mem.id();
        out.extend(self.free.drain(self.free.len() - n..).map(|mut desc| {
            // A fresh frame starts empty.
            desc.set_options(0);
            Frame::from_ring(desc, id)
        }));
        Ledger::sub(&self.ledger.free, n);
        Ledger::add(&self.ledger.held, n);
        n
    }

    /// The packet bytes of `frame` (empty for a frame of another port).
    pub fn data<'a>(&'a self, frame: &'a Frame) -> &'a [u8] {
        self.mem.data(frame)
    }

    /// See [`UmemView::with_data_mut`].
    pub fn with_data_mut<R>(&self, frame: &mut Frame, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        self.mem.with_data_mut(frame, f)
    }

    /// See [`UmemView::write`].
    pub fn write(&self, frame: &mut Frame, bytes: &[u8]) -> Option<usize> {
        self.mem.write(frame, bytes)
    }

    /// See [`UmemView::set_len`].
    pub fn set_len(&self, frame: &mut Frame, len: usize) -> Option<usize> {
        self.mem.set_len(frame, len)
    }

    /// See [`UmemView::meta`].
    pub fn meta(&self, frame: &Frame) -> Option<RxMeta> {
        self.mem.meta(frame)
    }

    /// A handle on the UMEM for threads that hold frames but no socket.
    pub fn umem(&self) -> UmemView {
        self.mem.clone()
    }

    /// A non-blocking `recvfrom` on the socket: with busy-poll socket options
    /// this is what drives the device's NAPI; otherwise it wakes the kernel
    /// to refill from the fill ring.
    pub fn wake_rx(&mut self) -> io::Result<()> {
        self.ledger
            .wakeups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        sys::kick_rx(self.as_raw_fd())
    }

    /// Waits up to `timeout_ms` for received frames (poll(2) on the socket).
    pub fn poll_rx(&mut self, timeout_ms: i32) -> io::Result<bool> {
        self.rx.poll(timeout_ms)
    }

    /// Ring occupancies read from the rings (exact, not cached).
    pub fn ring_census(&mut self) -> RingCensus {
        // Downstream first: a frame the kernel moves from the fill ring to the
        // rx ring (or from tx to completion) between the two reads is then
        // seen in neither ring and counts as "in the kernel" (true), instead
        // of in both (a negative kernel place). Struct fields are evaluated
        // in the order written.
        let rx_ring = self.rx.nb_avail_exact();
        let fill_ring = self.ring_size - self.fill.nb_free_exact();
        let completion = self.comp.nb_avail_exact();
        let tx_ring = self.ring_size - self.tx.nb_free_exact();
        RingCensus {
            fill_ring,
            rx_ring,
            tx_ring,
            completion,
        }
    }

    /// The kernel's statistics for this socket (drops, ring-full events).
    pub fn kernel_stats(&self) -> io::Result<SocketStats> {
        let s = self.rx.fd().xdp_statistics()?;
        Ok(SocketStats {
            rx_dropped: s.rx_dropped(),
            rx_invalid_descs: s.rx_invalid_descs(),
            rx_ring_full: s.rx_ring_full(),
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs(),
            tx_invalid_descs: s.tx_invalid_descs(),
            tx_ring_empty: s.tx_ring_empty_descs(),
        })
    }

    /// This socket's place counters.
    pub fn counters(&self) -> crate::accounting::LedgerSnapshot {
        self.ledger.snapshot()
    }

    /// Registers the socket with the current tokio runtime for `interest`
    /// (see [`crate::readiness::async_fd`]); on failure the socket is handed
    /// back inside the error.
    #[cfg(feature = "tokio")]
    pub(crate) fn into_async_fd(
        self,
        interest: tokio::io::Interest,
    ) -> Result<
        tokio::io::unix::AsyncFd<QueueSocket>,
        Box<tokio::io::unix::AsyncFdRegisterError<QueueSocket>>,
    > {
        // SAFETY: the fd `as_raw_fd` returns is the rx ring's socket, opened
        // when the socket was created and closed only when the QueueSocket is
        // dropped; it never changes. The AsyncFd owns the QueueSocket, so the
        // fd stays open and the same for the AsyncFd's whole life.
        unsafe { tokio::io::unix::AsyncFd::register_with_interest(self, interest) }
            .map_err(Box::new)
    }
}

/// `XDP_STATISTICS` of one socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[doc(alias = "xdp_statistics")]
#[doc(alias = "XDP_STATISTICS")]
pub struct SocketStats {
    /// Dropped for reasons other than invalid descriptors.
    pub rx_dropped: u64,
    /// Dropped because of invalid descriptors.
    pub rx_invalid_descs: u64,
    /// Dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame arrived.
    pub rx_fill_ring_empty: u64,
    /// Invalid tx descriptors.
    pub tx_invalid_descs: u64,
    /// Times the tx ring was empty when the kernel looked.
    pub tx_ring_empty: u64,
}

impl AsRawFd for QueueSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.rx.fd().as_raw_fd()
    }
}

/// The socket's fd, e.g. to duplicate it (`as_fd().try_clone_to_owned()`)
/// for an event loop that watches the socket's readiness while the socket
/// itself is used elsewhere ([`crate::readiness::async_readable`]).
impl AsFd for QueueSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the rx ring's socket fd is opened when the QueueSocket is
        // created and closed only when it is dropped; the borrow cannot
        // outlive `self`.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

/// Registers `fd` with the current tokio runtime for `interest`.
#[cfg(feature = "tokio")]
pub(crate) fn register_owned(
    fd: std::os::fd::OwnedFd,
    interest: tokio::io::Interest,
) -> io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    // SAFETY: the AsyncFd owns `fd`: it stays open, and the same, until the
    // AsyncFd is dropped (or gives it back with `into_inner`).
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, interest) }
        .map_err(io::Error::from)
}

/// The rings `Socket::new` returns: tx, rx, and the fill and completion
/// rings when the socket is the first on its (interface, queue) for this UMEM.
pub(crate) type Queues = (TxQueue, RxQueue, Option<(FillQueue, CompQueue)>);

/// Creates the AF_XDP socket of `queue` on `iface` over `umem` with rings of
/// `ring` entries: one `Socket::new` with INHIBIT_PROG_LOAD (the steer
/// program, not libxdp's default one, redirects to it), retried for a moment
/// on EBUSY (a queue just released).
pub(crate) fn create_socket(
    umem: &Umem,
    iface: &Interface,
    queue: u32,
    ring: QueueSize,
    bind: BindMode,
    need_wakeup: bool,
    multi_buffer: bool,
) -> io::Result<Queues> {
    let mut flags = match bind {
        BindMode::Copy => BindFlags::XDP_COPY,
        BindMode::Auto | BindMode::ZeroCopy => BindFlags::XDP_ZEROCOPY,
    };
    if need_wakeup {
        flags |= BindFlags::XDP_USE_NEED_WAKEUP;
    }
    if multi_buffer {
        flags |= BindFlags::XDP_USE_SG;
    }
    let config = SocketConfig::builder()
        .rx_queue_size(ring)
        .tx_queue_size(ring)
        .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
        .bind_flags(flags)
        .build();
    crate::sys::libxdp::route_logs();
    let mut attempt = 0;
    loop {
        // SAFETY: every socket is created with INHIBIT_PROG_LOAD (the steer
        // program is ours), and each (interface, queue) is bound once per UMEM.
        match unsafe { Socket::new(config, umem, iface, queue) } {
            Ok(q) => return Ok(q),
            Err(e) => {
                let io = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<io::Error>())
                    .and_then(|s| s.raw_os_error())
                    .map(io::Error::from_raw_os_error)
                    .unwrap_or_else(|| io::Error::other(e.to_string()));
                if io.raw_os_error() == Some(libc::EBUSY) && attempt < 50 {
                    attempt += 1;
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
                return Err(io);
            }
        }
    }
}
