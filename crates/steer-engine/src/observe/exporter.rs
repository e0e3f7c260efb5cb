//! The observer for a steer process that is not an engine (`steer rfs`):
//! its own snapshot on a stats socket and its own text on `/metrics`,
//! served by the observer's thread and HTTP side as an engine's are (a
//! second per connection, at most 64 at once; `stats` on the socket,
//! `GET` and `HEAD` of `/metrics`), built by its owner at each request.
//!
//! Invariants:
//! - The stats socket's snapshot is a JSON object carrying `"kind"` (the
//!   process's kind, set here, never by the owner's snapshot), which is
//!   how a reader ([`query_any`](super::query_any)) tells it from an
//!   engine's [`LiveStats`]; an engine's snapshot is not touched by this
//!   module.
//! - Control lines (`steer ctl`) are refused in one line naming the kind.
//! - The listeners are served from [`ExporterBuilder::start`] until the
//!   exporter is dropped, which stops the thread, closes every connection
//!   and removes the stats socket; nothing is built between requests, and
//!   a snapshot or render that fails is an error reply (the socket's
//!   `{"error": ...}`, a 500), never a panic.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::{bind_metrics, Control, LiveStats, Observer, Service, StatsEndpoint};

/// Builds a snapshot: a JSON object, or why not (one line).
type Snapshot = Box<dyn Fn() -> Result<Value, String> + Send + Sync>;
/// Renders `/metrics` in the text exposition format.
type Render = Box<dyn Fn() -> prometheus::Result<String> + Send + Sync>;

/// A stats socket and/or a `/metrics` endpoint serving what their owner
/// builds.
///
/// ```no_run
/// use steer_engine::observe::exporter::Exporter;
/// let exporter = Exporter::start("127.0.0.1:0".parse().unwrap(), || {
///     Ok("# TYPE up gauge\nup 1\n".to_string())
/// })?;
/// println!("metrics on http://{}/metrics", exporter.addr().unwrap());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Exporter {
    _observer: Observer,
    addr: Option<SocketAddr>,
    stats_path: Option<PathBuf>,
}

/// What an [`Exporter`] serves, before it starts.
///
/// ```no_run
/// use std::path::Path;
/// use steer_engine::observe::exporter::Exporter;
/// use steer_engine::observe::StatsEndpoint;
/// let endpoint = StatsEndpoint::claim(Path::new("/run/steer"), "eth1")?;
/// let exporter = Exporter::builder("rfs")
///     .stats(endpoint, || Ok(serde_json::json!({ "interface": "eth1" })))
///     .start()?;
/// // `steer stats eth1` now reads {"kind":"rfs","interface":"eth1"}.
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub struct ExporterBuilder {
    kind: String,
    stats: Option<(StatsEndpoint, Snapshot)>,
    metrics: Option<(SocketAddr, Render)>,
}

impl std::fmt::Debug for ExporterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExporterBuilder")
            .field("kind", &self.kind)
            .field("stats", &self.stats.as_ref().map(|(e, _)| e.path()))
            .field("metrics", &self.metrics.as_ref().map(|(a, _)| a))
            .finish()
    }
}

/// The observer's service for an exporter.
struct Served {
    kind: String,
    snapshot: Option<Snapshot>,
    render: Option<Render>,
}

impl Served {
    /// The snapshot, marked with the kind.
    fn marked(&self) -> Result<Value, String> {
        let snapshot = self
            .snapshot
            .as_ref()
            .ok_or_else(|| format!("steer {} serves no stats here", self.kind))?;
        match snapshot()? {
            Value::Object(fields) => {
                // First, where a reader looks.
                let mut marked = serde_json::Map::new();
                marked.insert("kind".into(), Value::String(self.kind.clone()));
                marked.extend(fields.into_iter().filter(|(k, _)| k != "kind"));
                Ok(Value::Object(marked))
            }
            _ => Err(format!(
                "steer {}'s snapshot is not a JSON object",
                self.kind
            )),
        }
    }
}

impl Service for Served {
    /// Never asked: the stats socket and `/metrics` are served from
    /// `stats_json` and `metrics_text`.
    fn snapshot(&self) -> LiveStats {
        LiveStats::empty("")
    }
    fn stats_json(&self) -> Result<String, String> {
        serde_json::to_string(&self.marked()?).map_err(|e| format!("encoding the stats: {e}"))
    }
    fn metrics_text(&self) -> prometheus::Result<String> {
        match &self.render {
            Some(render) => render(),
            None => Err(prometheus::Error::Msg("no metrics here".into())),
        }
    }
    fn control(&self, _control: &Control) -> Result<String, String> {
        Err(format!(
            "steer {} takes no control requests (`steer ctl` is for engines)",
            self.kind
        ))
    }
}

impl ExporterBuilder {
    /// Serves `snapshot`'s object, with `"kind"` added, on `endpoint` (a
    /// claimed stats socket; removed when the exporter is dropped).
    pub fn stats(
        mut self,
        endpoint: StatsEndpoint,
        snapshot: impl Fn() -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        self.stats = Some((endpoint, Box::new(snapshot)));
        self
    }

    /// Serves `render`'s text on `/metrics` at `addr` (port 0: a free one,
    /// see [`Exporter::addr`]).
    pub fn metrics(
        mut self,
        addr: SocketAddr,
        render: impl Fn() -> prometheus::Result<String> + Send + Sync + 'static,
    ) -> Self {
        self.metrics = Some((addr, Box::new(render)));
        self
    }

    /// Binds `/metrics`' address and starts serving both from a thread of
    /// its own.
    pub fn start(self) -> io::Result<Exporter> {
        let (endpoint, snapshot) = match self.stats {
            Some((e, s)) => (Some(e), Some(s)),
            None => (None, None),
        };
        let (listener, render) = match self.metrics {
            Some((addr, r)) => (Some(bind_metrics(addr)?), Some(r)),
            None => (None, None),
        };
        let addr = listener.as_ref().map(|l| l.local_addr()).transpose()?;
        let stats_path = endpoint.as_ref().map(|e| e.path().to_path_buf());
        let service = Served {
            kind: self.kind,
            snapshot,
            render,
        };
        let observer = Observer::start(endpoint, listener, Arc::new(service))?;
        Ok(Exporter {
            _observer: observer,
            addr,
            stats_path,
        })
    }
}

impl Exporter {
    /// What a process of `kind` (`"rfs"`: `steer rfs`) will serve.
    pub fn builder(kind: &str) -> ExporterBuilder {
        ExporterBuilder {
            kind: kind.into(),
            stats: None,
            metrics: None,
        }
    }

    /// Binds `addr` (port 0: a free one, see [`Exporter::addr`]) and serves
    /// `render`'s text, in the Prometheus text exposition format, on
    /// `/metrics` from a thread of its own (no stats socket).
    pub fn start(
        addr: SocketAddr,
        render: impl Fn() -> prometheus::Result<String> + Send + Sync + 'static,
    ) -> io::Result<Self> {
        Self::builder("exporter").metrics(addr, render).start()
    }

    /// The address `/metrics` is served on, if it is.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The stats socket's path, if one is served.
    pub fn stats_path(&self) -> Option<&Path> {
        self.stats_path.as_deref()
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
        let reply = get(ok.addr().unwrap(), "/metrics");
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert!(
            reply.ends_with("\r\n\r\n# TYPE up gauge\nup 1\n"),
            "{reply}"
        );
        assert!(get(ok.addr().unwrap(), "/").starts_with("HTTP/1.1 404"));

        let failing = Exporter::start("127.0.0.1:0".parse().unwrap(), || {
            Err(prometheus::Error::Msg("the program is gone".into()))
        })
        .unwrap();
        let reply = get(failing.addr().unwrap(), "/metrics");
        assert!(reply.starts_with("HTTP/1.1 500"), "{reply}");
        assert!(reply.contains("the program is gone"), "{reply}");
        // Dropped: the port is closed.
        let addr = ok.addr().unwrap();
        drop(ok);
        assert!(TcpStream::connect(addr).is_err());
    }

    /// A stats socket answers the owner's object marked with its kind,
    /// refuses control in one line, and is removed when the exporter is
    /// dropped; a failing snapshot is an error line.
    #[test]
    fn the_stats_socket_answers_the_marked_snapshot_and_refuses_control() {
        use std::time::Duration;
        let dir = std::env::temp_dir().join(format!("steer-exporter-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let endpoint = StatsEndpoint::claim(&dir, "veth2").unwrap();
        let exporter = Exporter::builder("rfs")
            .stats(endpoint, || {
                Ok(serde_json::json!({ "interface": "veth2", "pid": 7 }))
            })
            .start()
            .unwrap();
        assert!(exporter.addr().is_none());
        let path = exporter.stats_path().unwrap().to_path_buf();
        let wait = Duration::from_secs(2);
        match super::super::query_any(&dir, "veth2", wait).unwrap() {
            super::super::StatsReply::Other { kind, snapshot } => {
                assert_eq!(kind, "rfs");
                assert_eq!(snapshot["interface"], "veth2");
                assert_eq!(snapshot["pid"], 7);
            }
            other => panic!("{other:?}"),
        }
        let e = super::super::send_control(&dir, "veth2", &"policy llc".parse().unwrap(), wait)
            .unwrap_err()
            .to_string();
        assert!(e.contains("steer rfs takes no control requests"), "{e}");
        drop(exporter);
        assert!(!path.exists());

        let endpoint = StatsEndpoint::claim(&dir, "veth2").unwrap();
        let failing = Exporter::builder("rfs")
            .stats(endpoint, || Err("the program is gone".into()))
            .start()
            .unwrap();
        let e = super::super::query_any(&dir, "veth2", wait)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the program is gone"), "{e}");
        drop(failing);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
