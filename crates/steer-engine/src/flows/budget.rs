//! How much flow state the engine may hold: the budget a proxy's flows are
//! admitted against, derived from what the host gives the process.
//!
//! A flow costs the engine a little memory (its state and queued
//! datagrams) and, in a proxy, a backend socket: a file descriptor and an
//! ephemeral port. Any sender can open flows at will, so the budget is what
//! keeps a spray of new flows from taking the process down (the analog of
//! conntrack's `nf_conntrack_max`, or Envoy's per-upstream circuit
//! breaker). [`FlowBudget`] is what the application asks for (each field 0:
//! derive it); [`FlowLimits`] is what it resolves to at start, from
//! [`HostResources`]: `RLIMIT_NOFILE` (raised to its hard limit first, as
//! servers do), the descriptors already open, and the memory available.
//!
//! Invariants: the resolved limits are at least 1; the descriptors the
//! engine itself needs later (stats and metrics connections, the hotplug
//! watcher, logs) are kept out of the flows' share ([`RESERVED_FDS`]).
//!
//! The descriptor table is grown once at start to hold the whole budget
//! ([`grow_fd_table`]). The kernel doubles a process's table as descriptors
//! are opened, and in a threaded process each doubling waits for an RCU
//! grace period (5-25 ms measured here, seven times on the way to 20,000
//! descriptors), stalling whichever thread opened the descriptor, and with
//! it every flow that thread serves, in the very second a spray fills the
//! budget.
//!
//! ```
//! use steer_engine::flows::{FlowBudget, HostResources};
//! let host = HostResources { nofile: 1024, fds_open: 40, mem_available: 8 << 30 };
//! let limits = FlowBudget::default().resolve(2, &host);
//! assert!(limits.max_flows <= 1024 - 40);
//! assert!(limits.max_flows_per_worker <= limits.max_flows);
//! ```

use std::net::IpAddr;

use std::os::fd::RawFd;

use nix::fcntl::{fcntl, FcntlArg};
use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Descriptors kept for the engine itself after start (stats socket and its
/// connections, metrics, hotplug watcher, log files, the proxy's own).
pub const RESERVED_FDS: u64 = 64;

/// Memory one flow is assumed to cost when the budget is derived from the
/// memory available: its state, a task, a socket's bookkeeping and a few
/// queued datagrams.
pub const FLOW_BYTES: u64 = 16 << 10;

/// The derived budget never exceeds this many flows.
pub const MAX_DERIVED_FLOWS: usize = 1 << 20;

/// What the application asks of the flow budget; 0 in a field: derive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowBudget {
    /// Most flows open at once in the whole engine. 0: the smaller of the
    /// descriptors left (`RLIMIT_NOFILE`, less those open and
    /// [`RESERVED_FDS`], over `fds_per_flow`) and a quarter of the
    /// available memory over [`FLOW_BYTES`].
    pub max_flows: usize,
    /// Most flows open at once among those one worker received first. 0:
    /// one and a half even shares of `max_flows` (all of it with one
    /// worker).
    pub max_flows_per_worker: usize,
    /// New flows one source (an IPv4 address, an IPv6 /64) may open per
    /// second, a token bucket with a burst of twice that. 0: a sixteenth of
    /// `max_flows` per second, at least 100; `u32::MAX`: no limit.
    pub new_flows_per_source: u32,
    /// Descriptors the application spends per flow (a proxy's backend
    /// socket: 1), for the derived `max_flows`.
    pub fds_per_flow: u32,
    /// Flows evicted per second, at most, to make room for new ones (a
    /// token bucket with a second's worth of burst); past it new flows are
    /// refused. A flow that is evicted for a new one costs the application
    /// twice (its task ends, a new one starts with its backend socket), so
    /// a spray that replaces the table's flows as fast as it sends would
    /// spend the CPU the established flows need. 0: a quarter of
    /// `max_flows` per second (the table turns over in four seconds at
    /// most), at least 100; `u32::MAX`: no limit. A flow's first datagram
    /// draws on a fifth of it ([`FlowLimits::first_try_evictions_per_second`]),
    /// a flow refused a moment ago that sends again on the whole.
    pub evictions_per_second: u32,
}

impl Default for FlowBudget {
    fn default() -> Self {
        Self {
            max_flows: 0,
            max_flows_per_worker: 0,
            new_flows_per_source: 0,
            fds_per_flow: 1,
            evictions_per_second: 0,
        }
    }
}

/// The limits a [`FlowBudget`] resolved to at start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowLimits {
    /// Most flows open at once.
    pub max_flows: usize,
    /// Most flows open at once per receiving worker.
    pub max_flows_per_worker: usize,
    /// New flows per second per source (`f64::INFINITY`: no limit).
    pub new_flows_per_source: f64,
    /// The per-source bucket's depth.
    pub source_burst: f64,
    /// Evictions for room per second (`f64::INFINITY`: no limit); the
    /// bucket holds a second's worth.
    pub evictions_per_second: f64,
    /// Of those, the evictions per second for a flow's first datagram; a
    /// flow refused a moment ago that sends again (a client retrying)
    /// takes from the whole pace: a fifth of `evictions_per_second`, at
    /// least 20 (a spray of one-datagram flows replaces at most that many
    /// flows a second).
    pub first_try_evictions_per_second: f64,
}

/// What the host gives this process, as the budget reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostResources {
    /// `RLIMIT_NOFILE`'s soft limit.
    pub nofile: u64,
    /// Descriptors open now.
    pub fds_open: u64,
    /// `MemAvailable` of /proc/meminfo, in bytes.
    pub mem_available: u64,
}

impl HostResources {
    /// Reads this process's limits and the host's memory, after raising
    /// `RLIMIT_NOFILE`'s soft limit to its hard limit when `raise` (what
    /// servers do at start; nothing else in the process is affected but the
    /// number of descriptors it may open).
    pub fn measure(raise: bool) -> Self {
        let nofile = if raise { raise_nofile() } else { nofile_soft() };
        let fds_open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        let mem_available = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemAvailable:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(1 << 30, |kib| kib * 1024);
        Self {
            nofile,
            fds_open,
            mem_available,
        }
    }
}

fn nofile_soft() -> u64 {
    getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft)
}

/// Raises `RLIMIT_NOFILE`'s soft limit to its hard limit; returns the soft
/// limit in force afterwards.
fn raise_nofile() -> u64 {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

impl FlowLimits {
    /// Descriptors the process may hold with this budget full on `host`:
    /// those open now, [`RESERVED_FDS`] and `fds_per_flow` per flow, at
    /// most the limit.
    pub fn fds_at_budget(&self, fds_per_flow: u32, host: &HostResources) -> u64 {
        let flows = u64::try_from(self.max_flows).unwrap_or(u64::MAX);
        host.fds_open
            .saturating_add(RESERVED_FDS)
            .saturating_add(flows.saturating_mul(u64::from(fds_per_flow)))
            .min(host.nofile)
    }
}

/// Grows this process's descriptor table at once to hold descriptors
/// `0..fds`, so that opening them later never waits for the kernel to grow
/// it (a table never shrinks). Costs about 8 bytes a descriptor.
///
/// It opens a descriptor at `fds - 1` (or the first free one above it)
/// and closes it again: no open descriptor is touched.
///
/// ```
/// steer_engine::flows::grow_fd_table(512).unwrap();
/// let status = std::fs::read_to_string("/proc/self/status").unwrap();
/// let size: u64 = status.lines().find_map(|l| l.strip_prefix("FDSize:")).unwrap().trim().parse().unwrap();
/// assert!(size >= 512);
/// ```
pub fn grow_fd_table(fds: u64) -> nix::Result<()> {
    let Ok(highest) = RawFd::try_from(fds.saturating_sub(1)) else {
        return Err(nix::errno::Errno::EINVAL);
    };
    if highest < 64 {
        return Ok(()); // the table's first size
    }
    let anchor = std::fs::File::open("/dev/null")
        .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO)))?;
    let placed = fcntl(&anchor, FcntlArg::F_DUPFD_CLOEXEC(highest))?;
    nix::unistd::close(placed)
}

impl FlowBudget {
    /// The limits for an engine of `workers` workers on `host`.
    pub fn resolve(&self, workers: usize, host: &HostResources) -> FlowLimits {
        let workers = workers.max(1);
        let max_flows = if self.max_flows > 0 {
            self.max_flows
        } else {
            let by_fds = match u64::from(self.fds_per_flow) {
                0 => u64::MAX,
                per => {
                    host.nofile
                        .saturating_sub(host.fds_open)
                        .saturating_sub(RESERVED_FDS)
                        / per
                }
            };
            let by_memory = host.mem_available / 4 / FLOW_BYTES;
            usize::try_from(by_fds.min(by_memory))
                .unwrap_or(usize::MAX)
                .clamp(1, MAX_DERIVED_FLOWS)
        };
        let max_flows_per_worker = if self.max_flows_per_worker > 0 {
            self.max_flows_per_worker.min(max_flows)
        } else if workers == 1 {
            max_flows
        } else {
            (max_flows * 3).div_ceil(2 * workers).clamp(1, max_flows)
        };
        let rate = match self.new_flows_per_source {
            u32::MAX => f64::INFINITY,
            0 => (max_flows as f64 / 16.0).max(100.0),
            r => f64::from(r),
        };
        let evictions_per_second = match self.evictions_per_second {
            u32::MAX => f64::INFINITY,
            0 => (max_flows as f64 / 4.0).max(100.0),
            r => f64::from(r),
        };
        FlowLimits {
            max_flows,
            max_flows_per_worker,
            new_flows_per_source: rate,
            source_burst: (2.0 * rate).max(1.0),
            evictions_per_second,
            first_try_evictions_per_second: (evictions_per_second / 5.0)
                .max(20.0)
                .min(evictions_per_second),
        }
    }
}

/// A token bucket's level: the tokens it holds and when they were
/// counted. Its rate and depth are the owner's (one pair for many buckets,
/// as the per-source limiter has).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tokens {
    tokens: f64,
    stamp_ns: u64,
}

impl Tokens {
    /// A full bucket of `burst` tokens at `now_ns` (monotonic).
    pub(crate) fn full(burst: f64, now_ns: u64) -> Self {
        Self {
            tokens: burst,
            stamp_ns: now_ns,
        }
    }

    /// Refills at `rate` a second, up to `burst`, for the time since the
    /// last call; whether a token is there at `now_ns` (none is taken).
    /// An infinite rate always has one.
    pub(crate) fn ready(&mut self, rate: f64, burst: f64, now_ns: u64) -> bool {
        if rate.is_infinite() {
            return true;
        }
        let elapsed = now_ns.saturating_sub(self.stamp_ns) as f64 / 1e9;
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.stamp_ns = now_ns;
        self.tokens >= 1.0
    }

    /// Takes a token (after `ready` said yes; a second take in the same
    /// breath runs into debt, repaid by the next refills).
    pub(crate) fn take(&mut self) {
        self.tokens -= 1.0;
    }
}

/// Slots of the per-source token buckets (sources sharing a slot take it
/// over from each other: a forgotten bucket starts full, so a collision
/// only ever admits more, never refuses a well-behaved source).
const SOURCE_SLOTS: usize = 8192;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    source: u128,
    tokens: Tokens,
}

/// One token bucket per source address for new flows: a source that opens
/// flows faster than its rate is refused the excess, so one sender cannot
/// take the whole table. The slot of a source is a keyed hash of it (the
/// key random per engine, so a sender cannot aim at another's slot).
#[derive(Debug)]
pub(crate) struct SourceLimiter {
    rate: f64,
    burst: f64,
    keys: std::hash::RandomState,
    /// Allocated at the first new flow.
    slots: Vec<Option<Bucket>>,
}

impl SourceLimiter {
    pub(crate) fn new(limits: &FlowLimits) -> Self {
        Self {
            rate: limits.new_flows_per_source,
            burst: limits.source_burst,
            keys: std::hash::RandomState::new(),
            slots: Vec::new(),
        }
    }

    /// The key a source is limited under: an IPv4 address, an IPv6 /64
    /// (one host's usual share: rotating the low bits gains nothing).
    fn source_key(src: IpAddr) -> u128 {
        match src {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => (u128::from(a) & !u128::from(u64::MAX)) | (1 << 32),
        }
    }

    /// Takes a token for a new flow from `src` at `now_ns` (monotonic);
    /// `false`: the source is over its rate.
    pub(crate) fn allow(&mut self, src: IpAddr, now_ns: u64) -> bool {
        if self.rate.is_infinite() {
            return true;
        }
        use std::hash::BuildHasher;
        if self.slots.is_empty() {
            self.slots = vec![None; SOURCE_SLOTS];
        }
        let key = Self::source_key(src);
        let slot = (self.keys.hash_one(key) as usize) % SOURCE_SLOTS;
        let bucket = match &mut self.slots[slot] {
            Some(b) if b.source == key => b,
            other => other.insert(Bucket {
                source: key,
                tokens: Tokens::full(self.burst, now_ns),
            }),
        };
        let ready = bucket.tokens.ready(self.rate, self.burst, now_ns);
        if ready {
            bucket.tokens.take();
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd_table_size() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn the_fd_table_is_grown_to_the_budget_and_no_descriptor_is_left_open() {
        let nofile = nofile_soft();
        let want = nofile.min(4000);
        let before = std::fs::read_dir("/proc/self/fd").unwrap().count();
        grow_fd_table(want).unwrap();
        assert!(
            fd_table_size() >= want,
            "FDSize {} < {want}",
            fd_table_size()
        );
        assert_eq!(std::fs::read_dir("/proc/self/fd").unwrap().count(), before);
        assert_eq!(grow_fd_table(nofile + 1), Err(nix::errno::Errno::EINVAL));
    }

    #[test]
    fn fds_at_budget_counts_open_reserved_and_per_flow_within_the_limit() {
        let limits = FlowBudget {
            max_flows: 500,
            ..FlowBudget::default()
        }
        .resolve(1, &HOST_1024);
        assert_eq!(limits.fds_at_budget(1, &HOST_1024), 40 + RESERVED_FDS + 500);
        assert_eq!(limits.fds_at_budget(0, &HOST_1024), 40 + RESERVED_FDS);
        assert_eq!(limits.fds_at_budget(4, &HOST_1024), 1024);
    }

    const HOST_1024: HostResources = HostResources {
        nofile: 1024,
        fds_open: 40,
        mem_available: 8 << 30,
    };

    #[test]
    fn derived_limits_leave_the_engine_its_descriptors() {
        let l = FlowBudget::default().resolve(2, &HOST_1024);
        assert_eq!(l.max_flows, (1024 - 40 - RESERVED_FDS) as usize);
        assert_eq!(l.max_flows_per_worker, (l.max_flows * 3).div_ceil(4));
        assert_eq!(l.new_flows_per_source, 100.0);
        assert_eq!(l.source_burst, 200.0);
        assert_eq!(l.evictions_per_second, l.max_flows as f64 / 4.0);
    }

    #[test]
    fn memory_bounds_the_derived_limit_when_descriptors_are_plenty() {
        let host = HostResources {
            nofile: 1 << 20,
            fds_open: 10,
            mem_available: 64 << 20,
        };
        let l = FlowBudget::default().resolve(1, &host);
        assert_eq!(l.max_flows, (64 << 20) / 4 / FLOW_BYTES as usize);
        assert_eq!(l.max_flows_per_worker, l.max_flows);
    }

    #[test]
    fn explicit_values_win_and_a_starved_host_still_gets_one_flow() {
        let b = FlowBudget {
            max_flows: 500,
            max_flows_per_worker: 9000,
            new_flows_per_source: u32::MAX,
            fds_per_flow: 1,
            evictions_per_second: 300,
        };
        let l = b.resolve(4, &HOST_1024);
        assert_eq!(l.evictions_per_second, 300.0);
        assert_eq!((l.max_flows, l.max_flows_per_worker), (500, 500));
        assert!(l.new_flows_per_source.is_infinite());
        let starved = HostResources {
            nofile: 16,
            fds_open: 40,
            mem_available: 0,
        };
        assert_eq!(FlowBudget::default().resolve(2, &starved).max_flows, 1);
    }

    #[test]
    fn a_source_gets_its_burst_then_its_rate() {
        let limits = FlowBudget {
            max_flows: 1000,
            new_flows_per_source: 10,
            ..FlowBudget::default()
        }
        .resolve(1, &HOST_1024);
        let mut l = SourceLimiter::new(&limits);
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let b: IpAddr = "198.18.0.2".parse().unwrap();
        let admitted = (0..100).filter(|_| l.allow(a, 0)).count();
        assert_eq!(admitted, 20, "the burst is twice the rate");
        assert!(l.allow(b, 0), "another source has its own bucket");
        // Half a second later: five more.
        let later = (0..100).filter(|_| l.allow(a, 500_000_000)).count();
        assert_eq!(later, 5);
    }

    #[test]
    fn an_ipv6_host_cannot_escape_its_limit_by_rotating_low_bits() {
        let limits = FlowBudget {
            max_flows: 1000,
            new_flows_per_source: 1,
            ..FlowBudget::default()
        }
        .resolve(1, &HOST_1024);
        let mut l = SourceLimiter::new(&limits);
        let admitted = (0..50u16)
            .filter(|i| l.allow(format!("2001:db8::{i:x}").parse().unwrap(), 0))
            .count();
        assert_eq!(admitted, 2);
        assert!(l.allow("2001:db8:0:1::1".parse().unwrap(), 0));
    }
}
