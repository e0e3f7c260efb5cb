//! `/metrics` for another text than an engine's: the observer's thread and
//! HTTP side (a second per connection, at most 64 at once, `GET` and
//! `HEAD` of `/metrics`, as for an engine) serving whatever its owner
//! renders at each scrape. `steer rfs` serves the RFS program's counters
//! through it.
//!
//! Invariants: the listener is bound and the thread serves from
//! [`Exporter::start`] until the exporter is dropped, which stops the thread
//! and closes every connection; nothing is rendered between scrapes, and a
//! render that fails is a 500 with its message, never a panic.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use super::{bind_metrics, LiveStats, Observer, Service};

/// A `/metrics` endpoint serving a rendered text.
///
/// ```no_run
/// use steer_engine::observe::exporter::Exporter;
/// let exporter = Exporter::start("127.0.0.1:0".parse().unwrap(), || {
///     Ok("# TYPE up gauge\nup 1\n".to_string())
/// })?;
/// println!("metrics on http://{}/metrics", exporter.addr());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Exporter {
    _observer: Observer,
    addr: SocketAddr,
}

/// The observer's service for a rendered text (it has no stats socket, so
/// its snapshot is never asked for).
struct Rendered<F>(F);

impl<F: Fn() -> prometheus::Result<String>> Service for Rendered<F> {
    fn snapshot(&self) -> LiveStats {
        LiveStats::empty("")
    }
    fn metrics_text(&self) -> prometheus::Result<String> {
        (self.0)()
    }
}

impl Exporter {
    /// Binds `addr` (port 0: a free one, see [`Exporter::addr`]) and serves
    /// `render`'s text, in the Prometheus text exposition format, on
    /// `/metrics` from a thread of its own.
    pub fn start(
        addr: SocketAddr,
        render: impl Fn() -> prometheus::Result<String> + Send + Sync + 'static,
    ) -> io::Result<Self> {
        let listener = bind_metrics(addr)?;
        let addr = listener.local_addr()?;
        let observer = Observer::start(None, Some(listener), Arc::new(Rendered(render)))?;
        Ok(Self {
            _observer: observer,
            addr,
        })
    }

    /// The address it serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        reply
    }

    #[test]
    fn serves_the_rendered_text_on_metrics_and_a_failed_render_as_500() {
        let ok = Exporter::start("127.0.0.1:0".parse().unwrap(), || {
            Ok("# TYPE up gauge\nup 1\n".into())
        })
        .unwrap();
        let reply = get(ok.addr(), "/metrics");
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert!(
            reply.ends_with("\r\n\r\n# TYPE up gauge\nup 1\n"),
            "{reply}"
        );
        assert!(get(ok.addr(), "/").starts_with("HTTP/1.1 404"));

        let failing = Exporter::start("127.0.0.1:0".parse().unwrap(), || {
            Err(prometheus::Error::Msg("the program is gone".into()))
        })
        .unwrap();
        let reply = get(failing.addr(), "/metrics");
        assert!(reply.starts_with("HTTP/1.1 500"), "{reply}");
        assert!(reply.contains("the program is gone"), "{reply}");
        // Dropped: the port is closed.
        let addr = ok.addr();
        drop(ok);
        assert!(TcpStream::connect(addr).is_err());
    }
}
