//! [`Pair`]: two network namespaces of the test's own, a server side (the
//! veth end steer attaches to) and a client side, joined by a 2-queue veth
//! pair. Nothing is addressed in the root namespace, so parallel runs
//! cannot collide, and the server namespace's TCP counters are the test's
//! alone. The client end keeps veth's default offloads: its frames carry
//! partial checksums ([`Pair::full_checksums`] turns them off). `Drop`
//! removes both namespaces, and the pair with them (also on panic).

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::cmd::{self, Result};
use crate::names;
use crate::netns::Netns;
use crate::veth::{self, End};

/// Two namespaces joined by a veth pair, removed on drop.
#[derive(Debug)]
pub struct Pair {
    /// The server's namespace (steer attaches to `srv_dev` there).
    pub srv_ns: String,
    /// The client's namespace.
    pub cli_ns: String,
    /// The server's veth end.
    pub srv_dev: String,
    /// The client's veth end.
    pub cli_dev: String,
    /// Server address.
    pub srv_v4: Ipv4Addr,
    /// Client address.
    pub cli_v4: Ipv4Addr,
    /// Server IPv6 address.
    pub srv_v6: Ipv6Addr,
    /// Client IPv6 address.
    pub cli_v6: Ipv6Addr,
    /// Held for their `Drop`, which removes both namespaces.
    _namespaces: [Netns; 2],
}

impl Pair {
    /// Builds both namespaces and the veth pair (2 queues each side), with
    /// static neighbours both ways; fails the test on error.
    pub fn new() -> Self {
        crate::require_root();
        Self::create().unwrap_or_else(|e| panic!("namespace pair: {e}"))
    }

    /// [`Pair::new`], returning the failure.
    pub fn create() -> Result<Self> {
        let tag = names::tag();
        let namespaces = [
            Netns::create(&format!("sksrv{tag}"))?,
            Netns::create(&format!("skcli{tag}"))?,
        ];
        let p = Pair {
            srv_ns: namespaces[0].name().to_owned(),
            cli_ns: namespaces[1].name().to_owned(),
            srv_dev: format!("sks{tag}"),
            cli_dev: format!("skc{tag}"),
            srv_v4: Ipv4Addr::new(10, 77, 0, 1),
            cli_v4: Ipv4Addr::new(10, 77, 0, 2),
            srv_v6: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1),
            cli_v6: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 2),
            _namespaces: namespaces,
        };
        let (srv, cli) = p.ends();
        veth::connect(&srv, &cli, 2)?;
        veth::static_neighbours(&srv, &cli, true)?;
        Ok(p)
    }

    fn ends(&self) -> (End, End) {
        (
            End {
                dev: self.srv_dev.clone(),
                ns: Some(self.srv_ns.clone()),
                v4: Some((self.srv_v4, 24)),
                v6: Some((self.srv_v6, 64)),
            },
            End {
                dev: self.cli_dev.clone(),
                ns: Some(self.cli_ns.clone()),
                v4: Some((self.cli_v4, 24)),
                v6: Some((self.cli_v6, 64)),
            },
        )
    }

    /// Makes the client compute full checksums (`ethtool -K tx off`).
    pub fn full_checksums(&self) {
        cmd::must(&[
            "ip",
            "netns",
            "exec",
            &self.cli_ns,
            "ethtool",
            "-K",
            &self.cli_dev,
            "tx",
            "off",
        ]);
    }

    /// Moves the calling thread into namespace `ns` (for good).
    pub fn enter(ns: &str) {
        Netns::enter(ns).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Runs `f` on a new thread inside namespace `ns`.
    pub fn spawn_in<R: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> std::thread::JoinHandle<R> {
        Netns::spawn_in(ns, f)
    }

    /// Runs `f` on a thread inside `ns` and waits for it.
    pub fn in_ns<R: Send>(ns: &str, f: impl FnOnce() -> R + Send) -> R {
        Netns::in_ns(ns, f)
    }

    /// The server namespace's TCP extension counters (`TcpExt:` lines of
    /// /proc/net/netstat, read from inside it).
    pub fn tcp_ext(&self) -> HashMap<String, u64> {
        Self::counters(&self.srv_ns, "netstat", "TcpExt:")
    }

    /// One group of counters of /proc/net/`file` in namespace `ns`
    /// ([`Netns::counters`]).
    pub fn counters(ns: &str, file: &str, group: &str) -> HashMap<String, u64> {
        Netns::counters(ns, file, group)
    }

    /// `ip link show` of the server's end.
    pub fn srv_link(&self) -> String {
        self.ends().0.link_show()
    }
}

impl Default for Pair {
    fn default() -> Self {
        Self::new()
    }
}
