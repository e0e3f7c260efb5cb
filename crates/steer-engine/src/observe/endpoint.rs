//! The stats socket: one unix stream socket per interface,
//! `<run dir>/<interface>.sock` (`/run/steer/eth1.sock` by default), that
//! answers a one-line request with one line of JSON ([`LiveStats`]).
//!
//! The protocol: the client connects, sends `stats\n`, reads one JSON line
//! and the server closes. A client that is root or the engine's own user
//! may instead send one control line ([`Control`], `steer ctl`: `policy
//! llc`, `pin 1 flow ...`) and reads `{"ok": "..."}`. Anything else (too
//! long, not UTF-8, unknown, a control from anybody else, nothing within a
//! second) gets `{"error": "..."}` instead.
//!
//! Invariants:
//! - The socket is created `0600` (its owner only: root) in a directory
//!   created `0755`, or `0660` with the group the operator names
//!   ([`StatsAccess::Group`]); a reader without the right gets a permission
//!   error from the kernel before the engine sees anything.
//! - Nothing a client sends can change the engine but a valid control line
//!   from root or the engine's user (checked with `SO_PEERCRED` by the
//!   observer); `stats` is answered from a snapshot; everything else,
//!   however long, malformed or slow, gets one error line and the
//!   connection closed.
//! - [`StatsEndpoint::claim`] decides who owns the path before the engine
//!   touches the interface: a socket that answers belongs to a running
//!   engine (refused, naming its pid); one that refuses connections was
//!   left by an engine that is gone (removed, and the engine may take over
//!   what that engine left on the interface); no socket, nobody.
//! - The owner removes the socket when it stops, and only if the path still
//!   holds the socket it created; an engine that runs as another user once
//!   set up owns its socket, in a sticky directory its group may write
//!   ([`StatsEndpoint::hand_to`]), so that it still can, and can remove
//!   nothing else there.
//! - A reader ([`query`]) never hangs: connecting to a left-over socket
//!   fails at once (`ECONNREFUSED`), and a live engine that does not answer
//!   within the timeout is an error.

use std::fs::{self, DirBuilder, Permissions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::control::Control;
use super::live::{LiveStats, FORMAT_VERSION};
use super::Service;

/// Where engines put their stats sockets unless told otherwise.
pub const DEFAULT_RUN_DIR: &str = "/run/steer";

/// The longest request line the server reads.
pub const MAX_REQUEST: usize = 64;

/// The longest reply a reader accepts.
const MAX_REPLY: u64 = 16 << 20;

/// How long the server waits for a request and to write its reply.
const SERVER_IO_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a stats socket could not be claimed or read.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Nothing at the socket's path.
    #[error(
        "no steer engine on {interface}: {} does not exist (start one with `steer echo` or \
         `steer proxy` on {interface}; an engine started with another --run-dir has its socket there)",
        path.display()
    )]
    NoEngine {
        /// The interface asked about.
        interface: String,
        /// The socket's path.
        path: PathBuf,
    },
    /// The socket (or its directory) is not ours to open.
    #[error(
        "permission denied on {}: the stats socket is root's (mode 0600); run as root, e.g. \
         `sudo steer stats {interface}`",
        path.display()
    )]
    PermissionDenied {
        /// The interface asked about.
        interface: String,
        /// The socket's path.
        path: PathBuf,
    },
    /// A socket nobody listens on: its engine is gone.
    #[error(
        "the steer engine on {interface} is gone: {} was left by an engine that no longer runs \
         (killed?); the next engine started on {interface} replaces it",
        path.display()
    )]
    Stale {
        /// The interface asked about.
        interface: String,
        /// The socket's path.
        path: PathBuf,
    },
    /// The engine accepted the connection but did not answer in time.
    #[error(
        "the steer engine on {interface} did not answer within {:.1} s ({}); is it stopped \
         (SIGSTOP) or overloaded?",
        timeout.as_secs_f64(),
        path.display()
    )]
    Timeout {
        /// The interface asked about.
        interface: String,
        /// The socket's path.
        path: PathBuf,
        /// How long the reader waited.
        timeout: Duration,
    },
    /// Another engine answers on the socket this engine wants.
    #[error(
        "another steer engine ({}) serves {interface}: its stats socket {} answers; stop it \
         first, or give this engine another interface",
        pid.map_or("pid unknown".to_string(), |p| format!("pid {p}")),
        path.display()
    )]
    AlreadyServed {
        /// The interface.
        interface: String,
        /// The socket's path.
        path: PathBuf,
        /// The running engine's pid, if it said.
        pid: Option<u32>,
    },
    /// The group named for the stats socket does not exist.
    #[error("no group {0:?} for the stats socket: create it (`groupadd {0}`) or name another")]
    UnknownGroup(String),
    /// Not an interface name a socket can be named after.
    #[error("{0:?} is not an interface name (1 to 15 characters, no `/`)")]
    BadInterface(String),
    /// The engine answered something a reader cannot use.
    #[error("{}: {reason}", path.display())]
    Protocol {
        /// The socket's path.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A system call failed.
    #[error("{context} {}: {source}", path.display())]
    Io {
        /// What was being done.
        context: &'static str,
        /// The path involved.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
}

/// The stats socket of `interface` under `run_dir`.
///
/// ```
/// use std::path::Path;
/// use steer_engine::observe::socket_path;
/// let p = socket_path(Path::new("/run/steer"), "eth1").unwrap();
/// assert_eq!(p, Path::new("/run/steer/eth1.sock"));
/// assert!(socket_path(Path::new("/run/steer"), "../etc").is_err());
/// ```
pub fn socket_path(run_dir: &Path, interface: &str) -> Result<PathBuf, ObserveError> {
    let ok = !interface.is_empty()
        && interface.len() <= 15
        && !interface.contains('/')
        && interface != "."
        && interface != ".."
        && !interface.contains('\0');
    if !ok {
        return Err(ObserveError::BadInterface(interface.into()));
    }
    Ok(run_dir.join(format!("{interface}.sock")))
}

/// A request on the stats socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The [`LiveStats`] now.
    Stats,
    /// A change to the running engine (`steer ctl`; root or the engine's
    /// own user only).
    Control(Control),
}

/// The first words of control lines ([`Control`]).
const CONTROL_WORDS: [&str; 6] = [
    "policy",
    "fast-path",
    "flow-limit",
    "balance",
    "pin",
    "unpin",
];

/// Parses one request line (trailing newline and spaces allowed); the
/// error is the text the server sends back.
///
/// ```
/// use steer_engine::observe::{parse_request, Request};
/// assert_eq!(parse_request(b"stats\n"), Ok(Request::Stats));
/// assert!(matches!(parse_request(b"policy always\n"), Ok(Request::Control(_))));
/// assert!(parse_request(b"policy maybe\n").unwrap_err().contains("llc or always"));
/// assert!(parse_request(b"reboot\n").unwrap_err().contains("unknown request"));
/// ```
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    if line.len() > MAX_REQUEST {
        return Err(format!("request longer than {MAX_REQUEST} bytes"));
    }
    let text = std::str::from_utf8(line).map_err(|_| "request is not UTF-8".to_string())?;
    match text.trim() {
        "stats" => Ok(Request::Stats),
        "" => Err("empty request: send `stats`".into()),
        other
            if other
                .split_whitespace()
                .next()
                .is_some_and(|w| CONTROL_WORDS.contains(&w)) =>
        {
            other
                .parse::<Control>()
                .map(Request::Control)
                .map_err(|e| e.to_string())
        }
        other => Err(format!(
            "unknown request {other:?}: send `stats`, or a control such as `policy llc`"
        )),
    }
}

/// Who may read the stats socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatsAccess {
    /// Its owner only (root): mode `0600`.
    #[default]
    Owner,
    /// Its owner and the members of this group (a gid): mode `0660`.
    Group(u32),
}

impl StatsAccess {
    /// The group named `name` (`--stats-group`), looked up in the system's
    /// group database.
    ///
    /// ```
    /// use steer_engine::observe::StatsAccess;
    /// assert_eq!(StatsAccess::group("root").unwrap(), StatsAccess::Group(0));
    /// assert!(StatsAccess::group("no-such-group-here").is_err());
    /// ```
    pub fn group(name: &str) -> Result<Self, ObserveError> {
        match nix::unistd::Group::from_name(name) {
            Ok(Some(g)) => Ok(Self::Group(g.gid.as_raw())),
            Ok(None) => Err(ObserveError::UnknownGroup(name.into())),
            Err(e) => Err(ObserveError::Io {
                context: "looking up the group",
                path: PathBuf::from("/etc/group"),
                source: e.into(),
            }),
        }
    }

    /// The socket's permission bits.
    pub fn mode(self) -> u32 {
        match self {
            Self::Owner => 0o600,
            Self::Group(_) => 0o660,
        }
    }
}

/// A claimed stats socket, listening; removed again when dropped.
#[derive(Debug)]
pub struct StatsEndpoint {
    listener: UnixListener,
    path: PathBuf,
    ino: u64,
    replaced_stale: bool,
}

impl StatsEndpoint {
    /// Claims `interface`'s socket under `run_dir` (created `0755` if
    /// missing): refused while another engine answers there; a socket left
    /// by an engine that is gone is removed
    /// ([`StatsEndpoint::replaced_stale`]). The new socket is `0600`
    /// ([`StatsEndpoint::claim_for`] opens it to a group) and non-blocking.
    pub fn claim(run_dir: &Path, interface: &str) -> Result<Self, ObserveError> {
        Self::claim_for(run_dir, interface, StatsAccess::Owner)
    }

    /// [`StatsEndpoint::claim`], readable as `access` says.
    pub fn claim_for(
        run_dir: &Path,
        interface: &str,
        access: StatsAccess,
    ) -> Result<Self, ObserveError> {
        let path = socket_path(run_dir, interface)?;
        let io_err = |context: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| ObserveError::Io {
                context,
                path,
                source,
            }
        };
        DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(run_dir)
            .map_err(io_err("creating the stats directory", run_dir))?;
        let replaced_stale = match UnixStream::connect(&path) {
            Ok(stream) => {
                return Err(ObserveError::AlreadyServed {
                    interface: interface.into(),
                    pid: ask_pid(stream),
                    path,
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                fs::remove_file(&path).map_err(io_err("removing the stale socket", &path))?;
                true
            }
            Err(e) => return Err(io_err("checking for a running engine at", &path)(e)),
        };
        let listener = match UnixListener::bind(&path) {
            Ok(l) => l,
            // Another engine bound it between our check and our bind.
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                return Err(ObserveError::AlreadyServed {
                    interface: interface.into(),
                    pid: None,
                    path,
                })
            }
            Err(e) => return Err(io_err("creating the stats socket", &path)(e)),
        };
        // Only root could connect before this too: a new socket is created
        // with root's umask (no write bit for others), and connecting needs
        // write permission. The group first, then the mode that lets it in.
        if let StatsAccess::Group(gid) = access {
            nix::unistd::chown(&path, None, Some(nix::unistd::Gid::from_raw(gid)))
                .map_err(|e| io_err("giving the stats socket its group", &path)(e.into()))?;
        }
        fs::set_permissions(&path, Permissions::from_mode(access.mode()))
            .map_err(io_err("restricting the stats socket", &path))?;
        let ino = fs::metadata(&path)
            .map_err(io_err("reading the stats socket", &path))?
            .ino();
        listener
            .set_nonblocking(true)
            .map_err(io_err("setting up the stats socket", &path))?;
        Ok(Self {
            listener,
            path,
            ino,
            replaced_stale,
        })
    }

    /// Hands the socket to `uid` (the user the engine runs as once set up,
    /// [`steer_xdp::privileges::RunAs`]) so that the engine can still remove
    /// it at stop: the socket becomes the user's (its group and mode stay),
    /// and its directory stays root's but becomes writable by group `gid`
    /// with the sticky bit, as `/tmp` is: the user may remove only what it
    /// owns, never the owner locks or another engine's socket.
    ///
    /// ```no_run
    /// use std::path::Path;
    /// use steer_engine::observe::StatsEndpoint;
    /// let endpoint = StatsEndpoint::claim(Path::new("/run/steer"), "eth1")?;
    /// endpoint.hand_to(65534, 65534)?;
    /// # Ok::<(), steer_engine::observe::ObserveError>(())
    /// ```
    pub fn hand_to(&self, uid: u32, gid: u32) -> Result<(), ObserveError> {
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        let io_err = |context: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source: io::Error| ObserveError::Io {
                context,
                path,
                source,
            }
        };
        nix::unistd::chown(&self.path, Some(nix::unistd::Uid::from_raw(uid)), None)
            .map_err(|e| io_err("handing the stats socket to its user", &self.path)(e.into()))?;
        nix::unistd::chown(dir, None, Some(nix::unistd::Gid::from_raw(gid)))
            .map_err(|e| io_err("handing the stats directory to its group", dir)(e.into()))?;
        let mode = fs::metadata(dir)
            .map_err(io_err("reading the stats directory", dir))?
            .mode();
        fs::set_permissions(dir, Permissions::from_mode((mode & 0o7777) | 0o1070)).map_err(io_err(
            "making the stats directory group-writable and sticky",
            dir,
        ))
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a socket left by an engine that is gone was removed.
    pub fn replaced_stale(&self) -> bool {
        self.replaced_stale
    }

    /// The listening socket (non-blocking).
    pub(crate) fn listener(&self) -> &UnixListener {
        &self.listener
    }
}

impl Drop for StatsEndpoint {
    fn drop(&mut self) {
        // Only our own socket: never one a later engine put there.
        if fs::metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The reply to what a client has sent so far (`closed`: it will send no
/// more): `None` while its request line may still be coming. One line of
/// JSON: the snapshot, `{"ok": ...}` for a control applied (only when
/// `may_control`), or `{"error": ...}`.
pub(crate) fn reply_to(
    received: &[u8],
    closed: bool,
    service: &dyn Service,
    may_control: bool,
) -> Option<Vec<u8>> {
    let line = match received.iter().position(|&b| b == b'\n') {
        Some(i) => &received[..=i],
        None if closed || received.len() > MAX_REQUEST => received,
        None => return None,
    };
    let mut reply = match parse_request(line) {
        Ok(Request::Stats) => service
            .stats_json()
            .unwrap_or_else(|e| serde_json::json!({ "error": e }).to_string()),
        Ok(Request::Control(_)) if !may_control => serde_json::json!({
            "error": "control needs root or the user the engine runs as"
        })
        .to_string(),
        Ok(Request::Control(c)) => match service.control(&c) {
            Ok(done) => serde_json::json!({ "ok": done }).to_string(),
            Err(e) => serde_json::json!({ "error": e }).to_string(),
        },
        Err(e) => serde_json::json!({ "error": e }).to_string(),
    };
    reply.push('\n');
    Some(reply.into_bytes())
}

/// The reply to a client that sent no whole request in its time.
pub(crate) fn timeout_reply() -> Vec<u8> {
    let e = format!(
        "no request within {} s: send `stats`",
        SERVER_IO_TIMEOUT.as_secs()
    );
    (serde_json::json!({ "error": e }).to_string() + "\n").into_bytes()
}

/// Answers one connection, blocking (the tests' server; the observer
/// serves many at once without blocking, in `server`).
#[cfg(test)]
pub(crate) fn serve(stream: UnixStream, snapshot: &dyn Fn() -> LiveStats) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(SERVER_IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(SERVER_IO_TIMEOUT));
    super::server::serve_blocking(stream, super::Kind::Stats, &|| snapshot());
}

/// Asks a running engine for its pid (for the error that names it).
fn ask_pid(stream: UnixStream) -> Option<u32> {
    let reply = exchange(&stream, "stats", Duration::from_secs(1)).ok()?;
    let v: Value = serde_json::from_slice(&reply).ok()?;
    v.get("pid")?.as_u64()?.try_into().ok()
}

/// Sends the request and reads the reply line.
fn exchange(stream: &UnixStream, request: &str, timeout: Duration) -> io::Result<Vec<u8>> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut s = stream;
    s.write_all(format!("{request}\n").as_bytes())?;
    let mut reply = Vec::new();
    BufReader::new(s.take(MAX_REPLY)).read_until(b'\n', &mut reply)?;
    Ok(reply)
}

/// Reads the [`LiveStats`] of the engine serving `interface`, whose socket
/// is under `run_dir`, waiting at most `timeout` for each read or write.
/// Each failure is one [`ObserveError`] that says what to do.
///
/// ```no_run
/// use std::path::Path;
/// use std::time::Duration;
/// use steer_engine::observe::{query, DEFAULT_RUN_DIR};
/// let live = query(Path::new(DEFAULT_RUN_DIR), "eth1", Duration::from_secs(2))?;
/// println!("{} rx on {} CPUs", live.total().core.rx, live.per_cpu.len());
/// # Ok::<(), steer_engine::observe::ObserveError>(())
/// ```
pub fn query(
    run_dir: &Path,
    interface: &str,
    timeout: Duration,
) -> Result<LiveStats, ObserveError> {
    let (path, reply) = request(run_dir, interface, "stats", timeout)?;
    parse_reply(&path, &reply)
}

/// What a stats socket answered `stats` with: an engine's [`LiveStats`],
/// or the snapshot of another kind of steer process (`steer rfs`), which
/// names itself in a `kind` field (engines' snapshots have none) and
/// whose reader parses it.
#[derive(Debug, Clone, PartialEq)]
pub enum StatsReply {
    /// An engine's counters.
    Engine(Box<LiveStats>),
    /// Another kind's snapshot, as sent.
    Other {
        /// Its `kind` field (e.g. `"rfs"`).
        kind: String,
        /// The whole snapshot.
        snapshot: Value,
    },
}

/// [`query`] for any steer process serving a stats socket: an engine's
/// [`LiveStats`] (its format version checked), or another kind's snapshot
/// as JSON ([`StatsReply::Other`]).
///
/// ```no_run
/// use std::path::Path;
/// use std::time::Duration;
/// use steer_engine::observe::{query_any, StatsReply, DEFAULT_RUN_DIR};
/// match query_any(Path::new(DEFAULT_RUN_DIR), "eth1", Duration::from_secs(2))? {
///     StatsReply::Engine(live) => println!("an engine, pid {}", live.pid),
///     StatsReply::Other { kind, .. } => println!("steer {kind}"),
/// }
/// # Ok::<(), steer_engine::observe::ObserveError>(())
/// ```
pub fn query_any(
    run_dir: &Path,
    interface: &str,
    timeout: Duration,
) -> Result<StatsReply, ObserveError> {
    let (path, reply) = request(run_dir, interface, "stats", timeout)?;
    parse_any_reply(&path, &reply)
}

/// Sends one control line ([`Control`]) to the engine serving `interface`
/// (`steer ctl`); returns the state it set, as the engine says it. The
/// engine takes control only from root or the user it runs as.
///
/// ```no_run
/// use std::path::Path;
/// use std::time::Duration;
/// use steer_engine::observe::{send_control, DEFAULT_RUN_DIR};
/// let control = "fast-path off".parse()?;
/// let done = send_control(Path::new(DEFAULT_RUN_DIR), "eth1", &control, Duration::from_secs(2))?;
/// assert_eq!(done, "fast-path off");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn send_control(
    run_dir: &Path,
    interface: &str,
    control: &Control,
    timeout: Duration,
) -> Result<String, ObserveError> {
    let (path, reply) = request(run_dir, interface, &control.to_string(), timeout)?;
    let protocol = |reason: String| ObserveError::Protocol {
        path: path.clone(),
        reason,
    };
    let v: Value = serde_json::from_slice(&reply)
        .map_err(|e| protocol(format!("the engine's reply is not JSON ({e})")))?;
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        return Err(protocol(format!("the engine refused the request: {e}")));
    }
    v.get("ok")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| protocol("the engine's reply has neither ok nor error".into()))
}

/// One request line to the engine serving `interface` and its reply line.
fn request(
    run_dir: &Path,
    interface: &str,
    line: &str,
    timeout: Duration,
) -> Result<(PathBuf, Vec<u8>), ObserveError> {
    let path = socket_path(run_dir, interface)?;
    let stream = UnixStream::connect(&path).map_err(|e| {
        let (interface, path) = (interface.to_string(), path.clone());
        match e.kind() {
            io::ErrorKind::NotFound => ObserveError::NoEngine { interface, path },
            io::ErrorKind::ConnectionRefused => ObserveError::Stale { interface, path },
            io::ErrorKind::PermissionDenied => ObserveError::PermissionDenied { interface, path },
            _ => ObserveError::Io {
                context: "connecting to",
                path,
                source: e,
            },
        }
    })?;
    let reply = exchange(&stream, line, timeout).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ObserveError::Timeout {
            interface: interface.into(),
            path: path.clone(),
            timeout,
        },
        _ => ObserveError::Io {
            context: "reading from",
            path: path.clone(),
            source: e,
        },
    })?;
    Ok((path, reply))
}

/// A reply line as [`LiveStats`], or the error the engine sent; another
/// kind's snapshot is an error naming it.
fn parse_reply(path: &Path, reply: &[u8]) -> Result<LiveStats, ObserveError> {
    match parse_any_reply(path, reply)? {
        StatsReply::Engine(live) => Ok(*live),
        StatsReply::Other { kind, .. } => Err(ObserveError::Protocol {
            path: path.to_path_buf(),
            reason: format!("the process serving it is `steer {kind}`, not an engine"),
        }),
    }
}

/// A reply line as an engine's [`LiveStats`] or another kind's snapshot,
/// or the error the process sent.
fn parse_any_reply(path: &Path, reply: &[u8]) -> Result<StatsReply, ObserveError> {
    let protocol = |reason: String| ObserveError::Protocol {
        path: path.to_path_buf(),
        reason,
    };
    let v: Value = serde_json::from_slice(reply)
        .map_err(|e| protocol(format!("the engine's reply is not JSON ({e})")))?;
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        return Err(protocol(format!("the engine refused the request: {e}")));
    }
    if let Some(kind) = v.get("kind").and_then(Value::as_str) {
        return Ok(StatsReply::Other {
            kind: kind.to_owned(),
            snapshot: v,
        });
    }
    match v.get("version").and_then(Value::as_u64) {
        Some(v) if v == u64::from(FORMAT_VERSION) => {}
        other => {
            return Err(protocol(format!(
            "the engine speaks stats format {other:?}; this steer reads version {FORMAT_VERSION}: \
                 use the steer that started the engine"
        )))
        }
    }
    serde_json::from_value(v)
        .map(|live| StatsReply::Engine(Box::new(live)))
        .map_err(|e| protocol(format!("unexpected stats ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("steer-endpoint-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    /// A control line is applied only for a peer that may control; anybody
    /// else gets an error and the service is never asked.
    #[test]
    fn control_lines_need_a_peer_that_may_control() {
        struct Recorder(std::sync::Mutex<Vec<String>>);
        impl Service for Recorder {
            fn snapshot(&self) -> LiveStats {
                LiveStats::empty("veth0")
            }
            fn control(&self, c: &Control) -> Result<String, String> {
                self.0.lock().unwrap().push(c.to_string());
                Ok(c.to_string())
            }
        }
        let rec = Recorder(Default::default());
        let text = |r: Option<Vec<u8>>| String::from_utf8(r.unwrap()).unwrap();
        let refused = text(reply_to(b"balance on\n", false, &rec, false));
        assert!(refused.contains("control needs root"), "{refused}");
        assert!(rec.0.lock().unwrap().is_empty());
        let done = text(reply_to(b"balance on\n", false, &rec, true));
        assert_eq!(done, "{\"ok\":\"balance on\"}\n");
        let bad = text(reply_to(b"balance maybe\n", false, &rec, true));
        assert!(bad.contains("on or off"), "{bad}");
        assert_eq!(*rec.0.lock().unwrap(), ["balance on"]);
        // An engine without controls says so.
        let plain = || LiveStats::empty("veth0");
        let none = text(reply_to(b"balance on\n", false, &plain, true));
        assert!(none.contains("takes no control"), "{none}");
    }

    /// Serves `n` connections of `endpoint` on a thread.
    fn serve_n(endpoint: &StatsEndpoint, n: usize, live: LiveStats) -> std::thread::JoinHandle<()> {
        let listener = endpoint.listener().try_clone().unwrap();
        listener.set_nonblocking(false).unwrap();
        std::thread::spawn(move || {
            for _ in 0..n {
                let (s, _) = listener.accept().unwrap();
                serve(s, &|| live.clone());
            }
        })
    }

    #[test]
    fn a_claimed_socket_answers_and_is_removed_on_drop() {
        let dir = temp_dir("answer");
        let endpoint = StatsEndpoint::claim(&dir, "veth7").unwrap();
        assert!(!endpoint.replaced_stale());
        let mode = fs::metadata(endpoint.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut live = LiveStats::empty("veth7");
        live.uptime_s = 1.5;
        let server = serve_n(&endpoint, 2, live.clone());
        assert_eq!(query(&dir, "veth7", Duration::from_secs(2)).unwrap(), live);
        // A second engine on the same interface is refused, naming the first.
        match StatsEndpoint::claim(&dir, "veth7") {
            Err(ObserveError::AlreadyServed { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id()))
            }
            other => panic!("{other:?}"),
        }
        server.join().unwrap();
        let path = endpoint.path().to_path_buf();
        drop(endpoint);
        assert!(!path.exists());
        assert!(matches!(
            query(&dir, "veth7", Duration::from_secs(1)),
            Err(ObserveError::NoEngine { .. })
        ));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_group_socket_is_0660_with_that_group() {
        let dir = temp_dir("group");
        let adm = StatsAccess::group("adm").or_else(|_| StatsAccess::group("root"));
        let access = adm.unwrap();
        let endpoint = StatsEndpoint::claim_for(&dir, "veth5", access).unwrap();
        let meta = fs::metadata(endpoint.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o660);
        assert_eq!(StatsAccess::Group(meta.gid()), access);
        drop(endpoint);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_socket_errors_at_once_and_is_replaced() {
        let dir = temp_dir("stale");
        fs::create_dir_all(&dir).unwrap();
        let path = socket_path(&dir, "veth8").unwrap();
        // What a killed engine leaves: the socket file, nobody listening.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let t = std::time::Instant::now();
        let err = query(&dir, "veth8", Duration::from_secs(5)).unwrap_err();
        assert!(matches!(err, ObserveError::Stale { .. }), "{err}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        let endpoint = StatsEndpoint::claim(&dir, "veth8").unwrap();
        assert!(endpoint.replaced_stale());
        let server = serve_n(&endpoint, 1, LiveStats::empty("veth8"));
        assert_eq!(
            query(&dir, "veth8", Duration::from_secs(2))
                .unwrap()
                .interface,
            "veth8"
        );
        server.join().unwrap();
        drop(endpoint);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_silent_engine_is_a_timeout_not_a_hang() {
        let dir = temp_dir("silent");
        // Listening, never accepting: as an engine stopped with SIGSTOP.
        let endpoint = StatsEndpoint::claim(&dir, "veth9").unwrap();
        let err = query(&dir, "veth9", Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, ObserveError::Timeout { .. }), "{err}");
        drop(endpoint);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_requests_get_an_error_line() {
        let dir = temp_dir("bad");
        let endpoint = StatsEndpoint::claim(&dir, "veth6").unwrap();
        let requests: [&[u8]; 4] = [b"policy always\n", b"\xff\xfe\n", &[b'x'; 200], b""];
        let server = serve_n(&endpoint, requests.len(), LiveStats::empty("veth6"));
        for r in requests {
            let mut s = UnixStream::connect(endpoint.path()).unwrap();
            s.write_all(r).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            // One line; reading past it may see the reset of a server that
            // closed with part of an over-long request unread.
            let mut reply = String::new();
            BufReader::new(&s).read_line(&mut reply).unwrap();
            let v: Value = serde_json::from_str(&reply).unwrap();
            assert!(v["error"].is_string(), "{r:?}: {reply}");
        }
        server.join().unwrap();
        drop(endpoint);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn replies_that_are_not_stats_are_protocol_errors() {
        let p = Path::new("/x.sock");
        assert!(parse_reply(p, b"nonsense").is_err());
        let e = parse_reply(p, br#"{"error":"no"}"#).unwrap_err();
        assert!(e.to_string().contains("refused"), "{e}");
        let e = parse_reply(p, br#"{"version":99}"#).unwrap_err();
        assert!(e.to_string().contains("version 1"), "{e}");
    }

    /// A snapshot with a `kind` is another process's, handed back as
    /// sent; [`query`]'s engine reader refuses it naming the kind.
    #[test]
    fn a_snapshot_of_another_kind_is_handed_back_as_json() {
        let p = Path::new("/x.sock");
        let reply = br#"{"kind":"rfs","version":1,"interface":"veth0"}"#;
        match parse_any_reply(p, reply).unwrap() {
            StatsReply::Other { kind, snapshot } => {
                assert_eq!(kind, "rfs");
                assert_eq!(snapshot["interface"], "veth0");
            }
            other => panic!("{other:?}"),
        }
        let e = parse_reply(p, reply).unwrap_err().to_string();
        assert!(e.contains("`steer rfs`, not an engine"), "{e}");
        let engine = serde_json::to_vec(&LiveStats::empty("veth0")).unwrap();
        assert!(matches!(
            parse_any_reply(p, &engine).unwrap(),
            StatsReply::Engine(live) if live.interface == "veth0"
        ));
    }

    proptest! {
        #[test]
        fn stats_with_any_spacing_is_a_request(pre in "[ \t]{0,3}", post in "[ \t\r]{0,3}") {
            let line = format!("{pre}stats{post}\n");
            prop_assert_eq!(parse_request(line.as_bytes()), Ok(Request::Stats));
        }

        #[test]
        fn any_request_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let parsed = parse_request(&bytes);
            let is_stats = std::str::from_utf8(&bytes).is_ok_and(|t| t.trim() == "stats");
            prop_assert_eq!(parsed.is_ok(), is_stats && bytes.len() <= MAX_REQUEST);
        }
    }
}
