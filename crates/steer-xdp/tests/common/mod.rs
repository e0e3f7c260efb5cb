//! Test hosts: a network namespace and a veth pair (2 queues, or as many as
//! asked) with unique names,
//! the peer inside the namespace, removed again by `Drop` (also on panic).
//! Addresses come from the benchmarking range (198.18.10.0/30 to
//! 198.18.72.0/30, one /30 per test) and 2001:db8::/32. Not TEST-NET-1:
//! machines like this one use 192.0.2.0/24 for their own uplink.

#![allow(dead_code)]

use std::{
    fs::File,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket},
    os::fd::AsRawFd,
    process::{Command, Output},
    sync::atomic::{AtomicU32, Ordering},
};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Fails the test with a clear message when not root.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "steer-xdp integration tests need root (network namespaces, veth, XDP, AF_XDP): run them as root, as CI does"
    );
}

fn run(cmd: &[&str]) -> Output {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    out
}

fn must(cmd: &[&str]) {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace + veth pair owned by one test.
pub struct TestNet {
    /// Namespace name.
    pub ns: String,
    /// Host-side veth (root namespace; XDP goes here).
    pub host: String,
    /// Peer veth (inside `ns`).
    pub peer: String,
    /// Host address.
    pub host_v4: Ipv4Addr,
    /// Peer address.
    pub peer_v4: Ipv4Addr,
    /// Host IPv6 address.
    pub host_v6: Ipv6Addr,
    /// Peer IPv6 address.
    pub peer_v6: Ipv6Addr,
}

impl TestNet {
    /// Builds the namespace and the veth pair (2 queues each side).
    pub fn new() -> Self {
        Self::with_queues(2)
    }

    /// Builds the namespace and a veth pair with `queues` rx and tx queues
    /// on each side.
    pub fn with_queues(queues: u32) -> Self {
        require_root();
        let queues = queues.to_string();
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{}", pid % 100_000, n);
        let slot = ((pid.wrapping_mul(7) + n) % 63) as u8;
        let net = TestNet {
            ns: format!("sxns{tag}"),
            host: format!("sxh{tag}"),
            peer: format!("sxp{tag}"),
            host_v4: Ipv4Addr::new(198, 18, 10 + slot, 1),
            peer_v4: Ipv4Addr::new(198, 18, 10 + slot, 2),
            host_v6: format!("2001:db8:{:x}::1", 0x100 + u32::from(slot))
                .parse()
                .unwrap(),
            peer_v6: format!("2001:db8:{:x}::2", 0x100 + u32::from(slot))
                .parse()
                .unwrap(),
        };
        // Leftovers of a crashed earlier run with the same names.
        let _ = run(&["ip", "netns", "del", &net.ns]);
        let _ = run(&["ip", "link", "del", &net.host]);
        must(&["ip", "netns", "add", &net.ns]);
        let (h, p, ns) = (net.host.as_str(), net.peer.as_str(), net.ns.as_str());
        must(&[
            "ip",
            "link",
            "add",
            h,
            "numtxqueues",
            &queues,
            "numrxqueues",
            &queues,
            "type",
            "veth",
            "peer",
            "name",
            p,
            "numtxqueues",
            &queues,
            "numrxqueues",
            &queues,
        ]);
        must(&["ip", "link", "set", p, "netns", ns]);
        must(&[
            "ip",
            "addr",
            "add",
            &format!("{}/30", net.host_v4),
            "dev",
            h,
        ]);
        must(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{}/64", net.host_v6),
            "dev",
            h,
            "nodad",
        ]);
        must(&["ip", "link", "set", h, "up"]);
        must(&[
            "ip",
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/30", net.peer_v4),
            "dev",
            p,
        ]);
        must(&[
            "ip",
            "-n",
            ns,
            "-6",
            "addr",
            "add",
            &format!("{}/64", net.peer_v6),
            "dev",
            p,
            "nodad",
        ]);
        must(&["ip", "-n", ns, "link", "set", p, "up"]);
        must(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        net.static_neighbours(true);
        net
    }

    /// MAC addresses of the host and peer sides, as `aa:bb:..` strings.
    pub fn macs(&self) -> (String, String) {
        let host =
            std::fs::read_to_string(format!("/sys/class/net/{}/address", self.host)).unwrap();
        let out = self.ns_cmd(&["cat", &format!("/sys/class/net/{}/address", self.peer)]);
        // `ip netns exec` remounts /sys for the namespace.
        (
            host.trim().to_owned(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        )
    }

    /// Adds (or removes) permanent neighbour entries on both sides, so bursts
    /// do not race ARP/ND resolution on a loaded machine. Tests of ARP and ND
    /// themselves remove them.
    pub fn static_neighbours(&self, on: bool) {
        let (host_mac, peer_mac) = self.macs();
        let (h, p, ns) = (self.host.as_str(), self.peer.as_str(), self.ns.as_str());
        let entries = [
            (Some(ns), self.host_v4.to_string(), host_mac.clone(), p),
            (Some(ns), self.host_v6.to_string(), host_mac, p),
            (None, self.peer_v4.to_string(), peer_mac.clone(), h),
            (None, self.peer_v6.to_string(), peer_mac, h),
        ];
        for (netns, addr, mac, dev) in entries {
            let mut cmd = vec!["ip"];
            if let Some(n) = netns {
                cmd.extend(["-n", n]);
            }
            if on {
                cmd.extend([
                    "neigh",
                    "replace",
                    &addr,
                    "lladdr",
                    &mac,
                    "nud",
                    "permanent",
                    "dev",
                    dev,
                ]);
                must(&cmd);
            } else {
                cmd.extend(["neigh", "del", &addr, "dev", dev]);
                let _ = run(&cmd);
            }
        }
    }

    /// Runs `f` on a thread inside the namespace (setns affects only that thread).
    pub fn in_ns<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        let path = format!("/run/netns/{}", self.ns);
        std::thread::scope(|s| {
            s.spawn(move || {
                let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                // SAFETY: `file` is an open namespace file; setns switches only this thread.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// Sends each `(payload, port)` datagram, in order, from one UDP socket
    /// of the peer (inside the namespace) to the host's IPv4 address.
    pub fn send_udp_v4(&self, datagrams: &[(&[u8], u16)]) {
        self.in_ns(|| {
            let u = UdpSocket::bind(SocketAddr::new(self.peer_v4.into(), 0)).unwrap();
            for &(payload, port) in datagrams {
                u.send_to(payload, SocketAddr::new(self.host_v4.into(), port))
                    .unwrap();
            }
        });
    }

    /// Runs a command inside the namespace.
    pub fn ns_cmd(&self, cmd: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", self.ns.as_str()];
        full.extend_from_slice(cmd);
        run(&full)
    }

    /// `ip link show` of the host side.
    pub fn link_show(&self) -> String {
        String::from_utf8_lossy(&run(&["ip", "link", "show", "dev", &self.host]).stdout)
            .into_owned()
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.host]);
        let _ = run(&["ip", "netns", "del", &self.ns]);
    }
}
