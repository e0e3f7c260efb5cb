//! Readiness of [`QueueSocket`]s for event loops: a mio `Source` (feature
//! `mio`), a tokio `AsyncFd` wrapper (feature `tokio`), and a busy-poll loop
//! that never sleeps. Readable means the rx ring has frames; the sockets stay
//! usable through their own methods in every case.

use std::{io, ops::ControlFlow};

use crate::{socket::QueueSocket, umem::Frame};

#[cfg(feature = "mio")]
impl mio::event::Source for QueueSocket {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        mio::unix::SourceFd(&self.as_raw_fd()).register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        mio::unix::SourceFd(&self.as_raw_fd()).reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        mio::unix::SourceFd(&self.as_raw_fd()).deregister(registry)
    }
}

/// Wraps a socket for tokio: `readable().await` resolves when frames arrived.
/// Must be called inside a tokio runtime; on failure the socket is handed back
/// inside the error.
#[cfg(feature = "tokio")]
pub fn async_fd(
    socket: QueueSocket,
) -> Result<
    tokio::io::unix::AsyncFd<QueueSocket>,
    Box<tokio::io::unix::AsyncFdRegisterError<QueueSocket>>,
> {
    socket.into_async_fd(tokio::io::Interest::READABLE)
}

/// Watches an fd of a socket for readability with the current tokio
/// runtime, while the socket itself stays where it is (behind a lock,
/// polled by another part of the program): `fd` is a duplicate, e.g.
/// `socket.as_fd().try_clone_to_owned()`, owned by the returned `AsyncFd`.
/// Must be called inside a tokio runtime.
///
/// ```
/// use std::os::fd::AsFd;
/// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
/// let _inside = rt.enter();
/// let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
/// let watched = steer_xdp::readiness::async_readable(socket.as_fd().try_clone_to_owned().unwrap());
/// assert!(watched.is_ok());
/// ```
#[cfg(feature = "tokio")]
pub fn async_readable(
    fd: std::os::fd::OwnedFd,
) -> io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    crate::socket::register_owned(fd, tokio::io::Interest::READABLE)
}

/// Receives from `socket` in a tight loop (no sleeping, no blocking): each
/// round takes up to `batch` frames (possibly none) and hands them to
/// `handler`, which owns them: it sends, recycles or keeps them (frames left
/// in the vector are recycled). Idle rounds reap tx completions. Returns when
/// the handler breaks, with its value. Idle rounds make a non-blocking
/// `recvfrom`, which is how busy-poll sockets drive the device.
pub fn busy_poll<B>(
    socket: &mut QueueSocket,
    batch: usize,
    mut handler: impl FnMut(&mut QueueSocket, &mut Vec<Frame>) -> ControlFlow<B>,
) -> io::Result<B> {
    let mut frames = Vec::with_capacity(batch);
    loop {
        if socket.recv(&mut frames, batch)? == 0 {
            socket.complete();
            // Drives NAPI when busy-poll socket options are set.
            socket.wake_rx()?;
        }
        let flow = handler(socket, &mut frames);
        if !frames.is_empty() {
            socket.recycle(frames.drain(..));
        }
        if let ControlFlow::Break(b) = flow {
            return Ok(b);
        }
    }
}
