//! [`TestNet`]: a namespace of the test's own and a veth pair from the root
//! namespace into it. The host end stays in the root namespace (XDP and
//! AF_XDP go there); the peer end is the namespace's only link.
//!
//! Addresses come from the benchmarking range, a /30 per net in
//! 198.18.10.0/24 to 198.18.72.0/24 and a /64 in 2001:db8::/32. Not
//! TEST-NET-1: machines like this one use 192.0.2.0/24 for their own
//! uplink. `Drop` removes the pair and the namespace (also on panic).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::process::Output;

use crate::cmd::{self, Result};
use crate::names;
use crate::netns::Netns;
use crate::veth::{self, End};

/// A namespace + veth pair owned by one test.
#[derive(Debug)]
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
    /// Held for its `Drop`, which removes the namespace.
    _netns: Netns,
}

impl TestNet {
    /// Builds the namespace and the veth pair (2 queues each side).
    pub fn new() -> Self {
        Self::with_queues(2)
    }

    /// Builds the namespace and a veth pair with `queues` rx and tx queues
    /// on each side, with static neighbours both ways.
    pub fn with_queues(queues: u32) -> Self {
        crate::require_root();
        Self::create(queues).unwrap_or_else(|e| panic!("test net: {e}"))
    }

    /// [`TestNet::with_queues`], returning the failure.
    pub fn create(queues: u32) -> Result<Self> {
        let tag = names::tag();
        let slot = names::slot(63) as u8;
        let netns = Netns::create(&format!("sxns{tag}"))?;
        let v6 =
            |last: u16| Ipv6Addr::new(0x2001, 0xdb8, 0x100 + u16::from(slot), 0, 0, 0, 0, last);
        let net = TestNet {
            ns: netns.name().to_owned(),
            host: format!("sxh{tag}"),
            peer: format!("sxp{tag}"),
            host_v4: Ipv4Addr::new(198, 18, 10 + slot, 1),
            peer_v4: Ipv4Addr::new(198, 18, 10 + slot, 2),
            host_v6: v6(1),
            peer_v6: v6(2),
            _netns: netns,
        };
        // From here `Drop` removes whatever was made.
        let (host, peer) = net.ends();
        veth::connect(&host, &peer, queues)?;
        veth::static_neighbours(&host, &peer, true)?;
        Ok(net)
    }

    /// The two ends, as [`veth`] knows them.
    fn ends(&self) -> (End, End) {
        (
            End {
                dev: self.host.clone(),
                ns: None,
                v4: Some((self.host_v4, 30)),
                v6: Some((self.host_v6, 64)),
            },
            End {
                dev: self.peer.clone(),
                ns: Some(self.ns.clone()),
                v4: Some((self.peer_v4, 30)),
                v6: Some((self.peer_v6, 64)),
            },
        )
    }

    /// MAC addresses of the host and peer sides, as `aa:bb:..` strings.
    pub fn macs(&self) -> (String, String) {
        let (host, peer) = self.ends();
        let mac = |e: &End| e.mac().unwrap_or_else(|e| panic!("{e}"));
        (mac(&host), mac(&peer))
    }

    /// Adds (or removes) permanent neighbour entries on both sides, so
    /// bursts do not race ARP/ND resolution on a loaded machine. Tests of
    /// ARP and ND themselves remove them.
    pub fn static_neighbours(&self, on: bool) {
        let (host, peer) = self.ends();
        veth::static_neighbours(&host, &peer, on).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Runs `f` on a thread inside the namespace (setns affects only that
    /// thread).
    pub fn in_ns<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        Netns::in_ns(&self.ns, f)
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
        Netns::exec(&self.ns, cmd)
    }

    /// Sets the MTU of both ends (a jumbo network: 9000).
    pub fn set_mtu(&self, mtu: u32) {
        let mtu = mtu.to_string();
        crate::cmd::ip(&["link", "set", &self.host, "mtu", &mtu]).unwrap();
        let out = self.ns_cmd(&["ip", "link", "set", &self.peer, "mtu", &mtu]);
        assert!(out.status.success(), "peer mtu {mtu}: {out:?}");
    }

    /// `ip link show` of the host side.
    pub fn link_show(&self) -> String {
        self.ends().0.link_show()
    }
}

impl Default for TestNet {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        // The namespace goes with the `netns` field, after this.
        cmd::ip_quiet(&["link", "del", &self.host]);
    }
}
