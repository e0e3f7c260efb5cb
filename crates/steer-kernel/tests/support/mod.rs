//! Test hosts for kernel-socket steering: two network namespaces of the
//! test's own, a server side (the veth end steer attaches to) and a client
//! side, joined by a 2-queue veth pair. Nothing is addressed in the root
//! namespace, so parallel runs (names carry the pid) cannot collide, and the
//! server namespace's TCP counters are the test's alone. The client end
//! keeps veth's default offloads: its frames carry partial checksums, which
//! the RFS program completes before a redirect (`Pair::full_checksums`
//! turns them off).

#![allow(dead_code)]

use std::collections::HashMap;
use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Fails the test with a clear message when not root.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "steer-kernel integration tests need root (network namespaces, veth, XDP): run them as root, as CI does"
    );
}

fn run(cmd: &[&str]) -> Output {
    Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn must(cmd: &[&str]) {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces joined by a veth pair, removed on drop.
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
}

impl Pair {
    /// Builds both namespaces and the veth pair (2 queues each side).
    pub fn new() -> Self {
        require_root();
        let tag = format!(
            "{}{}",
            std::process::id() % 100_000,
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let p = Pair {
            srv_ns: format!("sksrv{tag}"),
            cli_ns: format!("skcli{tag}"),
            srv_dev: format!("sks{tag}"),
            cli_dev: format!("skc{tag}"),
            srv_v4: Ipv4Addr::new(10, 77, 0, 1),
            cli_v4: Ipv4Addr::new(10, 77, 0, 2),
            srv_v6: "fd00:77::1".parse().unwrap(),
            cli_v6: "fd00:77::2".parse().unwrap(),
        };
        for ns in [&p.srv_ns, &p.cli_ns] {
            let _ = run(&["ip", "netns", "del", ns]);
            must(&["ip", "netns", "add", ns]);
        }
        let _ = run(&["ip", "link", "del", &p.srv_dev]);
        must(&[
            "ip",
            "link",
            "add",
            &p.srv_dev,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            &p.cli_dev,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
        ]);
        must(&["ip", "link", "set", &p.srv_dev, "netns", &p.srv_ns]);
        must(&["ip", "link", "set", &p.cli_dev, "netns", &p.cli_ns]);
        for (ns, dev, v4, v6) in [
            (&p.srv_ns, &p.srv_dev, p.srv_v4, p.srv_v6),
            (&p.cli_ns, &p.cli_dev, p.cli_v4, p.cli_v6),
        ] {
            must(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{v4}/24"),
                "dev",
                dev,
            ]);
            must(&[
                "ip",
                "-n",
                ns,
                "-6",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            must(&["ip", "-n", ns, "link", "set", dev, "up"]);
            must(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        let mac = |ns: &str, dev: &str| {
            let out = run(&[
                "ip",
                "netns",
                "exec",
                ns,
                "cat",
                &format!("/sys/class/net/{dev}/address"),
            ]);
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let (srv_mac, cli_mac) = (mac(&p.srv_ns, &p.srv_dev), mac(&p.cli_ns, &p.cli_dev));
        for (ns, dev, addr, lladdr) in [
            (&p.srv_ns, &p.srv_dev, p.cli_v4.to_string(), &cli_mac),
            (&p.srv_ns, &p.srv_dev, p.cli_v6.to_string(), &cli_mac),
            (&p.cli_ns, &p.cli_dev, p.srv_v4.to_string(), &srv_mac),
            (&p.cli_ns, &p.cli_dev, p.srv_v6.to_string(), &srv_mac),
        ] {
            must(&[
                "ip",
                "-n",
                ns,
                "neigh",
                "replace",
                &addr,
                "lladdr",
                lladdr,
                "nud",
                "permanent",
                "dev",
                dev,
            ]);
        }
        p
    }

    /// Makes the client compute full checksums (`ethtool -K tx off`).
    pub fn full_checksums(&self) {
        must(&[
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
        let path = format!("/run/netns/{ns}");
        let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: `file` is an open namespace file; setns switches only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }

    /// Runs `f` on a new thread inside namespace `ns`.
    pub fn spawn_in<R: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> std::thread::JoinHandle<R> {
        let ns = ns.to_owned();
        std::thread::spawn(move || {
            Self::enter(&ns);
            f()
        })
    }

    /// Runs `f` on a thread inside `ns` and waits for it.
    pub fn in_ns<R: Send + 'static>(ns: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
        Self::spawn_in(ns, f)
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }

    /// The server namespace's TCP extension counters (`TcpExt:` lines of
    /// /proc/net/netstat, read from inside it).
    pub fn tcp_ext(&self) -> HashMap<String, u64> {
        Self::counters(&self.srv_ns, "netstat", "TcpExt:")
    }

    /// One group of counters (`Tcp:`, `Udp:`, `TcpExt:`, ...) of
    /// /proc/net/`file` (`snmp`, `netstat`) in namespace `ns`.
    pub fn counters(ns: &str, file: &str, group: &str) -> HashMap<String, u64> {
        let (file, group) = (file.to_owned(), group.to_owned());
        Self::in_ns(ns, move || {
            let text = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")).unwrap();
            let mut lines = text.lines().filter(|l| l.starts_with(group.as_str()));
            let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
            names
                .split_whitespace()
                .zip(values.split_whitespace())
                .skip(1)
                .map(|(n, v)| (n.to_owned(), v.parse().unwrap_or(0)))
                .collect()
        })
    }

    /// `ip link show` of the server's end.
    pub fn srv_link(&self) -> String {
        let out = run(&[
            "ip",
            "-n",
            &self.srv_ns,
            "link",
            "show",
            "dev",
            &self.srv_dev,
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.srv_ns]);
        let _ = run(&["ip", "netns", "del", &self.cli_ns]);
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) {
    steer_topology::thread::pin_current(cpu).unwrap();
}
