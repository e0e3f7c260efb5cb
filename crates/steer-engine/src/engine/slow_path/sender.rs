//! Replies through the slow path's kernel sockets: [`KernelSender`] sends a
//! UDP payload from an owned port (and the address the request was sent
//! to) to a peer, through the socket of that port and IP version; the
//! kernel fragments it when it does not fit the path's MTU. The workers'
//! slow path answers with it, and flow delivery sends through it the
//! replies AF_XDP cannot carry (a flow born from a reassembled datagram,
//! or a reply longer than a frame).
//!
//! Invariant: never blocks (`MSG_DONTWAIT`); every reply is counted as
//! answered or failed (no socket for that port and version: failed).

use std::net::SocketAddr;
use std::sync::Arc;

use super::counters::{Event, SlowCounters};
use super::socket::SlowSocket;

/// Sends replies through the slow path's kernel sockets.
#[derive(Debug, Clone)]
pub(crate) struct KernelSender {
    pub(crate) sockets: Arc<Vec<SlowSocket>>,
    pub(crate) counters: Arc<SlowCounters>,
}

impl KernelSender {
    /// Sends `payload` from `from` (an owned port; the address the request
    /// went to) to `to`; `ifindex` is the interface the request came in on
    /// (0: any). Returns the bytes sent.
    pub(crate) fn send(
        &self,
        payload: &[u8],
        from: SocketAddr,
        to: SocketAddr,
        ifindex: u32,
    ) -> std::io::Result<usize> {
        let socket = self
            .sockets
            .iter()
            .find(|s| s.port == from.port() && s.addr == from.ip());
        let sent = match socket {
            Some(s) => s.send(payload, from.ip(), to, ifindex),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no slow-path socket on {from}"),
            )),
        };
        match &sent {
            Ok(n) => self.counters.add(Event::Answered(*n)),
            Err(e) => {
                tracing::debug!(error = %e, %from, %to, "reply through the kernel not sent");
                self.counters.add(Event::SendFailed);
            }
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_from_a_port_without_a_socket_is_counted_failed() {
        let sender = KernelSender {
            sockets: Arc::new(Vec::new()),
            counters: Arc::new(SlowCounters::default()),
        };
        let from: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let to: SocketAddr = "127.0.0.1:10".parse().unwrap();
        assert!(sender.send(b"x", from, to, 0).is_err());
        let s = sender.counters.snapshot();
        assert_eq!((s.answered, s.send_failed), (0, 1));
    }
}
