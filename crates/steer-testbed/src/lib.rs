//! steer's test bed: the network namespaces, veth pairs and child
//! processes an integration test (or a benchmark run) makes for itself, and
//! removes again.
//!
//! - [`cmd`]: running `ip` and friends, with errors that say what failed.
//! - [`names`]: names unique per process (pid and a counter).
//! - [`netns`]: one network namespace ([`Netns`]), entering it on a thread,
//!   commands inside it, its `/proc/net` counters.
//! - [`veth`]: joining two namespaces (or one and the root namespace) with
//!   a veth pair: queues, addresses, static neighbours.
//! - [`host_peer`]: [`TestNet`], the root namespace's end (where XDP goes)
//!   and a peer in a namespace of its own.
//! - [`pair`]: [`Pair`], two namespaces of their own joined by a veth pair,
//!   nothing in the root namespace.
//! - [`process`]: a child process read line by line, waited for until it
//!   prints a line, killed and reaped on drop.
//! - [`traffic`]: a numbered multi-flow UDP load and its replies.
//! - [`http`]: a one-shot HTTP GET, Prometheus text sums and `promtool`.
//!
//! Invariants:
//! - Every namespace, veth pair and child process this crate makes is
//!   removed by `Drop` of the value that owns it, also when the test
//!   panics (unwinding drops it); leftovers of a crashed earlier run that
//!   had the same names are removed before a name is used again.
//! - Names carry the process id and a per-process counter ([`names`]), so
//!   tests running in parallel, in one process or in several, never share
//!   a namespace or an interface.
//! - It sends traffic only between the ends it made.
//!
//! Everything here needs root (namespaces, veth); [`require_root`] fails a
//! test with a clear message otherwise.

pub mod cmd;
pub mod host_peer;
pub mod http;
pub mod names;
pub mod netns;
pub mod pair;
pub mod process;
pub mod traffic;
pub mod veth;

pub use cmd::Error;
pub use host_peer::TestNet;
pub use netns::Netns;
pub use pair::Pair;
pub use process::Spawned;

/// Fails the calling test with a clear message when not root.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root (network namespaces, veth, XDP, AF_XDP): run it as root, as CI does"
    );
}

/// `aa:bb:..` as bytes; `None` unless six hex octets.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_round_trip() {
        assert_eq!(
            parse_mac("02:ab:00:00:00:01\n"),
            Some([2, 0xab, 0, 0, 0, 1])
        );
        assert_eq!(parse_mac("02:ab"), None);
        assert_eq!(parse_mac("02:ab:00:00:00:zz"), None);
        assert_eq!(fmt_mac(&[2, 0xab, 0, 0, 0, 1]), "02:ab:00:00:00:01");
    }
}
