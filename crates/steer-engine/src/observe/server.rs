//! The observer's connections: accepted from the stats socket and the
//! metrics listener and served side by side without blocking, each against
//! a wall-clock deadline, so no client, however slow, holds up another
//! reader or the engine's stop.
//!
//! Invariants:
//! - At most [`MAX_CONNECTIONS`] are open; a new one beyond that takes the
//!   slot of the one nearest its deadline (the oldest), which gets the
//!   timeout reply: a flood of idle clients costs the newest reader
//!   nothing.
//! - Each connection lives at most [`DEADLINE`] from its accept, reading
//!   and writing together: past it, a client that has not sent a whole
//!   request gets the timeout reply if its socket takes it at once, and is
//!   closed either way.
//! - A connection reads at most [`MAX_RECEIVED`] bytes; the request parsers
//!   reply (with an error) before that.
//! - Nothing blocks: every socket is non-blocking and registered with the
//!   observer's poll; dropping a [`Connections`] closes them all.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use super::{Kind, Service};

/// Connections served at once.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// How long a connection may take, from accept to the last byte written.
pub(crate) const DEADLINE: Duration = Duration::from_secs(1);
/// Most bytes read from one client (the longest request head and then some).
const MAX_RECEIVED: usize = 16 * 1024;

/// Answers one connection, blocking (the tests' servers; the observer
/// serves many at once without blocking). A read that times out gets the
/// timeout reply.
#[cfg(test)]
pub(crate) fn serve_blocking(mut stream: impl Read + Write, kind: Kind, service: &dyn Service) {
    let mut received = Vec::new();
    let mut buf = [0u8; 1024];
    let reply = loop {
        let (n, closed) = match stream.read(&mut buf) {
            Ok(0) => (0, true),
            Ok(n) => (n, false),
            Err(_) => break kind.timeout_reply(),
        };
        received.extend_from_slice(&buf[..n]);
        if let Some(r) = kind.reply_to(&received, closed, service) {
            break r;
        }
    };
    let _ = stream.write_all(&reply);
    let _ = stream.flush();
}

/// A client's socket.
#[derive(Debug)]
pub(crate) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    /// Wraps an accepted std socket, made non-blocking.
    pub(crate) fn unix(s: std::os::unix::net::UnixStream) -> io::Result<Self> {
        s.set_nonblocking(true)?;
        Ok(Self::Unix(UnixStream::from_std(s)))
    }

    /// Wraps an accepted std socket, made non-blocking.
    pub(crate) fn tcp(s: std::net::TcpStream) -> io::Result<Self> {
        s.set_nonblocking(true)?;
        Ok(Self::Tcp(TcpStream::from_std(s)))
    }

    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        let interest = Interest::READABLE | Interest::WRITABLE;
        match self {
            Self::Unix(s) => registry.register(s, token, interest),
            Self::Tcp(s) => registry.register(s, token, interest),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Unix(s) => s.read(buf),
            Self::Tcp(s) => s.read(buf),
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Unix(s) => s.write(buf),
            Self::Tcp(s) => s.write(buf),
        }
    }
}

/// One client being served.
#[derive(Debug)]
struct Conn {
    stream: Stream,
    kind: Kind,
    received: Vec<u8>,
    /// The reply and how much of it was written.
    reply: Option<(Vec<u8>, usize)>,
    deadline: Instant,
}

/// What a step of a connection came to.
enum Step {
    /// Waiting for the client (more bytes, or room to write).
    Wait,
    /// Done or failed: close it.
    Close,
}

impl Conn {
    /// Reads what the client sent, builds the reply once the request is
    /// whole, writes what the socket takes.
    fn advance(&mut self, service: &dyn Service) -> Step {
        let mut buf = [0u8; 2048];
        while self.reply.is_none() {
            let closed = match self.stream.read(&mut buf) {
                Ok(0) => true,
                Ok(n) => {
                    let room = MAX_RECEIVED.saturating_sub(self.received.len());
                    self.received.extend_from_slice(&buf[..n.min(room)]);
                    false
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Step::Close,
            };
            let reply = self.kind.reply_to(&self.received, closed, service);
            match reply {
                Some(r) => self.reply = Some((r, 0)),
                None if closed => return Step::Close,
                None => {}
            }
        }
        self.write()
    }

    /// Offers a client that has not sent a whole request the timeout
    /// reply, as far as its socket takes it now.
    fn time_out(&mut self) {
        if self.reply.is_none() {
            self.reply = Some((self.kind.timeout_reply(), 0));
            let _ = self.write();
        }
    }

    /// Writes what the socket takes of the reply.
    fn write(&mut self) -> Step {
        let Some((reply, written)) = &mut self.reply else {
            return Step::Wait;
        };
        while *written < reply.len() {
            match self.stream.write(&reply[*written..]) {
                Ok(0) => return Step::Close,
                Ok(n) => *written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Close,
            }
        }
        Step::Close
    }
}

/// The open connections, by token (`first_token` + slot).
#[derive(Debug)]
pub(crate) struct Connections {
    slots: Vec<Option<Conn>>,
    first_token: usize,
    evicted: u64,
    expired: u64,
}

impl Connections {
    /// No connection yet; tokens from `first_token` on are theirs.
    pub(crate) fn new(first_token: usize) -> Self {
        Self {
            slots: (0..MAX_CONNECTIONS).map(|_| None).collect(),
            first_token,
            evicted: 0,
            expired: 0,
        }
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Connections closed early to make room for a new one.
    #[cfg(test)]
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Connections closed at their deadline.
    #[cfg(test)]
    pub(crate) fn expired(&self) -> u64 {
        self.expired
    }

    /// A free slot, or the one of the connection nearest its deadline,
    /// closed (after the timeout reply) to make room.
    fn free_slot(&mut self) -> usize {
        if let Some(free) = self.slots.iter().position(Option::is_none) {
            return free;
        }
        let oldest = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (c.deadline, i)))
            .min()
            .map_or(0, |(_, i)| i);
        if let Some(mut conn) = self.slots[oldest].take() {
            conn.time_out();
            self.evicted += 1;
        }
        oldest
    }

    /// Whether `token` is one of the connections'.
    pub(crate) fn owns(&self, token: Token) -> bool {
        (self.first_token..self.first_token + MAX_CONNECTIONS).contains(&token.0)
    }

    /// Takes a new client, due by `now + DEADLINE`, and serves what it has
    /// sent already.
    pub(crate) fn add(
        &mut self,
        registry: &Registry,
        mut stream: Stream,
        kind: Kind,
        now: Instant,
        service: &dyn Service,
    ) {
        let slot = self.free_slot();
        if stream
            .register(registry, Token(self.first_token + slot))
            .is_err()
        {
            return;
        }
        let mut conn = Conn {
            stream,
            kind,
            received: Vec::new(),
            reply: None,
            deadline: now + DEADLINE,
        };
        if let Step::Wait = conn.advance(service) {
            self.slots[slot] = Some(conn);
        }
    }

    /// Serves the connection of `token` after an event on it.
    pub(crate) fn ready(&mut self, token: Token, service: &dyn Service) {
        let Some(slot) = token.0.checked_sub(self.first_token) else {
            return;
        };
        let Some(entry) = self.slots.get_mut(slot) else {
            return;
        };
        if let Some(conn) = entry {
            if let Step::Close = conn.advance(service) {
                *entry = None;
            }
        }
    }

    /// Closes the connections past their deadline, after offering each
    /// that had not sent a whole request the timeout reply.
    pub(crate) fn expire(&mut self, now: Instant) {
        for entry in &mut self.slots {
            let Some(conn) = entry else { continue };
            if conn.deadline > now {
                continue;
            }
            conn.time_out();
            self.expired += 1;
            *entry = None;
        }
    }

    /// How long until the next deadline (`None`: no connection).
    pub(crate) fn next_timeout(&self, now: Instant) -> Option<Duration> {
        self.slots
            .iter()
            .flatten()
            .map(|c| c.deadline.saturating_duration_since(now))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream as StdUnix;

    use crate::observe::LiveStats;

    fn live() -> LiveStats {
        LiveStats::empty("veth0")
    }

    /// A served end and the client's end.
    fn pair() -> (Stream, StdUnix) {
        let (served, client) = StdUnix::pair().unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        (Stream::unix(served).unwrap(), client)
    }

    fn read_line(c: &mut StdUnix) -> String {
        let mut buf = [0u8; 4096];
        let n = c.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn a_whole_request_is_answered_at_once_and_frees_its_slot() {
        let poll = mio::Poll::new().unwrap();
        let mut conns = Connections::new(10);
        let (served, mut client) = pair();
        client.write_all(b"stats\n").unwrap();
        conns.add(poll.registry(), served, Kind::Stats, Instant::now(), &live);
        assert_eq!(conns.open(), 0);
        assert!(read_line(&mut client).contains("\"interface\":\"veth0\""));
    }

    #[test]
    fn a_trickled_request_is_answered_when_whole() {
        let poll = mio::Poll::new().unwrap();
        let mut conns = Connections::new(10);
        let (served, mut client) = pair();
        client.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        conns.add(
            poll.registry(),
            served,
            Kind::Metrics,
            Instant::now(),
            &live,
        );
        assert_eq!(conns.open(), 1);
        client.write_all(b"\r\n").unwrap();
        conns.ready(Token(10), &live);
        assert_eq!(conns.open(), 0);
        assert!(read_line(&mut client).starts_with("HTTP/1.1 200 OK"));
    }

    #[test]
    fn a_flood_evicts_the_oldest_and_the_deadline_closes_the_rest() {
        let poll = mio::Poll::new().unwrap();
        let mut conns = Connections::new(10);
        let now = Instant::now();
        let mut clients = Vec::new();
        for i in 0..=MAX_CONNECTIONS {
            let (served, client) = pair();
            let at = now + Duration::from_millis(i as u64);
            conns.add(poll.registry(), served, Kind::Stats, at, &live);
            clients.push(client);
        }
        assert_eq!((conns.open(), conns.evicted()), (MAX_CONNECTIONS, 1));
        // The oldest got the timeout reply and was closed.
        let first = read_line(&mut clients[0]);
        assert!(first.contains("no request within"), "{first}");
        assert_eq!(
            conns.next_timeout(now),
            Some(DEADLINE + Duration::from_millis(1))
        );
        // The newest is still served.
        clients[MAX_CONNECTIONS].write_all(b"stats\n").unwrap();
        conns.ready(Token(10), &live);
        assert!(read_line(&mut clients[MAX_CONNECTIONS]).contains("veth0"));
        conns.expire(now + DEADLINE + Duration::from_secs(1));
        assert_eq!(
            (conns.open(), conns.expired()),
            (0, MAX_CONNECTIONS as u64 - 1)
        );
        assert_eq!(conns.next_timeout(now), None);
    }
}
