//! The network namespace's checksum failures: `InCsumErrors` of TCP and UDP
//! in `/proc/net/snmp` and `Udp6InCsumErrors` in `/proc/net/snmp6` (TCP
//! counts both families in one). A frame whose checksum state was lost on
//! the way through a cpumap, then dropped by the stack as corrupt, shows up
//! there and nowhere else, so steering reads them at start and on every
//! sweep, reports the growth since start in `KernelStats`, and warns when
//! they grow while frames are being redirected.
//!
//! Invariants: the files are opened once, at start, in the namespace of
//! the thread starting the steering (the interface's); a `/proc/net` file
//! keeps the namespace it was opened in, so any thread may read them later.
//! Counts only grow; a reading below the base (a namespace reset) gives 0.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Segments and datagrams the stack dropped for a bad checksum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChecksumErrors {
    /// `TcpInCsumErrors` (IPv4 and IPv6).
    pub tcp: u64,
    /// `UdpInCsumErrors` plus `Udp6InCsumErrors`.
    pub udp: u64,
}

impl ChecksumErrors {
    /// The counters in the text of `/proc/net/snmp` and `/proc/net/snmp6`;
    /// a counter the text lacks reads 0.
    ///
    /// ```
    /// use steer_kernel::ChecksumErrors;
    /// let snmp = "Tcp: RtoMin InCsumErrors\nTcp: 200 7\nUdp: InDatagrams InCsumErrors\nUdp: 9 2\n";
    /// let e = ChecksumErrors::parse(snmp, "Udp6InCsumErrors    1\n");
    /// assert_eq!((e.tcp, e.udp), (7, 3));
    /// ```
    pub fn parse(snmp: &str, snmp6: &str) -> Self {
        let udp6 = snmp6
            .lines()
            .filter_map(|l| l.split_once(char::is_whitespace))
            .find(|(name, _)| *name == "Udp6InCsumErrors")
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        Self {
            tcp: snmp_field(snmp, "Tcp:", "InCsumErrors"),
            udp: snmp_field(snmp, "Udp:", "InCsumErrors") + udp6,
        }
    }

    /// The growth from `base` to `self`, each counter at least 0.
    pub fn since(self, base: Self) -> Self {
        Self {
            tcp: self.tcp.saturating_sub(base.tcp),
            udp: self.udp.saturating_sub(base.udp),
        }
    }

    /// Both counters together.
    pub fn total(self) -> u64 {
        self.tcp + self.udp
    }
}

/// The value of `field` in the `prefix` block of `/proc/net/snmp` (a line
/// of names followed by a line of values).
fn snmp_field(snmp: &str, prefix: &str, field: &str) -> u64 {
    let mut lines = snmp.lines().filter(|l| l.starts_with(prefix));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == field)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The two files, open in the steering's namespace.
struct Files {
    snmp: File,
    snmp6: Option<File>,
}

fn read_all(f: &mut File) -> io::Result<String> {
    let mut s = String::new();
    f.seek(SeekFrom::Start(0))?;
    f.read_to_string(&mut s)?;
    Ok(s)
}

/// Reads the counters of the namespace the steering started in, keeps the
/// base taken at start, and decides when their growth deserves a warning.
pub(crate) struct ChecksumWatch {
    files: Mutex<Option<Files>>,
    base: ChecksumErrors,
    warn: Mutex<WarnState>,
}

/// What the warning compares with.
struct WarnState {
    last: ChecksumErrors,
    last_redirected: u64,
    last_warned: Option<Instant>,
}

/// At most one warning per this long.
const WARN_EVERY: Duration = Duration::from_secs(10);

impl ChecksumWatch {
    /// Opens the counters of the calling thread's namespace and takes the
    /// base. Without `/proc` the counters read 0 (and a debug line says so).
    pub(crate) fn start() -> Self {
        let files = File::open("/proc/thread-self/net/snmp").map(|snmp| Files {
            snmp,
            snmp6: File::open("/proc/thread-self/net/snmp6").ok(),
        });
        let files = match files {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::debug!(error = %e, "no /proc/net/snmp: checksum errors not counted");
                None
            }
        };
        let mut this = Self {
            files: Mutex::new(files),
            base: ChecksumErrors::default(),
            warn: Mutex::new(WarnState {
                last: ChecksumErrors::default(),
                last_redirected: 0,
                last_warned: None,
            }),
        };
        this.base = this.read();
        this.warn.get_mut().unwrap_or_else(|e| e.into_inner()).last = this.base;
        this
    }

    /// The namespace's counters now (0 when they cannot be read).
    fn read(&self) -> ChecksumErrors {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let Some(f) = files.as_mut() else {
            return ChecksumErrors::default();
        };
        let snmp = read_all(&mut f.snmp).unwrap_or_default();
        let snmp6 = f
            .snmp6
            .as_mut()
            .and_then(|f| read_all(f).ok())
            .unwrap_or_default();
        ChecksumErrors::parse(&snmp, &snmp6)
    }

    /// The growth since start.
    pub(crate) fn since_start(&self) -> ChecksumErrors {
        self.read().since(self.base)
    }

    /// Called on every sweep with the frames redirected so far: warns when
    /// the counters grew since the last call while frames were redirected,
    /// at most once per ten seconds.
    pub(crate) fn check(&self, redirected: u64) {
        let now = self.read();
        let mut w = self.warn.lock().unwrap_or_else(|e| e.into_inner());
        let grew = now.since(w.last);
        let moved = redirected.saturating_sub(w.last_redirected);
        w.last = now;
        w.last_redirected = redirected;
        if let Some(message) = warning(grew, moved) {
            let quiet = w.last_warned.is_some_and(|t| t.elapsed() < WARN_EVERY);
            if !quiet {
                w.last_warned = Some(Instant::now());
                tracing::warn!(
                    tcp_in_csum_errors = grew.tcp,
                    udp_in_csum_errors = grew.udp,
                    redirected = moved,
                    "{message}"
                );
            }
        }
    }
}

/// The warning for counters that grew by `grew` while `redirected` frames
/// were redirected, if it deserves one.
fn warning(grew: ChecksumErrors, redirected: u64) -> Option<&'static str> {
    (grew.total() > 0 && redirected > 0).then_some(
        "the stack dropped frames for bad checksums while steer redirected frames: if they \
         are steered ones, their checksum state was lost on the redirect; try --xdp-mode \
         generic (XdpMode::Generic) and report the device",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
        Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n\
        Tcp: 1 200 120000 -1 10 20 0 0 2 500 600 3 476 1 476\n\
        Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
        Udp: 100 1 5 90 0 0 5 0 0\n\
        UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
        UdpLite: 0 0 0 0 0 0 9 0 0\n";

    #[test]
    fn reads_tcp_udp_and_udp6_but_not_udplite() {
        let snmp6 = "Udp6InDatagrams                 \t12\nUdp6InCsumErrors                \t2\nUdpLite6InCsumErrors 40\n";
        let e = ChecksumErrors::parse(SNMP, snmp6);
        assert_eq!(e, ChecksumErrors { tcp: 476, udp: 7 });
        assert_eq!(
            ChecksumErrors::parse("", ""),
            ChecksumErrors::default(),
            "missing counters read 0"
        );
    }

    #[test]
    fn growth_never_goes_below_zero() {
        let a = ChecksumErrors { tcp: 5, udp: 1 };
        let b = ChecksumErrors { tcp: 9, udp: 0 };
        assert_eq!(b.since(a), ChecksumErrors { tcp: 4, udp: 0 });
        assert_eq!(b.since(a).total(), 4);
    }

    #[test]
    fn warns_only_when_errors_grow_while_redirecting() {
        let grew = ChecksumErrors { tcp: 3, udp: 0 };
        assert!(warning(grew, 10).is_some());
        assert!(warning(grew, 0).is_none(), "nothing redirected: not ours");
        assert!(warning(ChecksumErrors::default(), 10).is_none());
    }

    #[test]
    fn the_live_counters_read_in_this_namespace() {
        let w = ChecksumWatch::start();
        assert!(
            w.files.lock().unwrap().is_some(),
            "/proc/thread-self/net/snmp opens"
        );
        // The base was taken at start: nothing grew by this much since.
        assert!(w.since_start().total() < 1_000_000);
        w.check(0);
    }
}
