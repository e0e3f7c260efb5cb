//! A veth pair between two places (a namespace each, or one in the root
//! namespace): both [`End`]s get their queues, addresses, the link up and,
//! on request, permanent neighbour entries for each other, so a burst never
//! waits on ARP or ND (an XDP program that redirects every frame would also
//! swallow them). The pair is removed with either end: deleting the root
//! namespace's end, or the namespace holding one.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::cmd::{self, Error, Result};

/// One end of a veth pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// Interface name (at most 15 bytes).
    pub dev: String,
    /// The namespace it lives in; `None`: the root namespace.
    pub ns: Option<String>,
    /// IPv4 address and prefix length, if any.
    pub v4: Option<(Ipv4Addr, u8)>,
    /// IPv6 address and prefix length, if any (added `nodad`).
    pub v6: Option<(Ipv6Addr, u8)>,
}

impl End {
    /// `ip ARGS` in this end's namespace.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut full: Vec<&str> = Vec::new();
        if let Some(ns) = &self.ns {
            full.extend(["-n", ns.as_str()]);
        }
        full.extend_from_slice(args);
        cmd::ip(&full)
    }

    /// Its MAC address, `aa:bb:..` (from `ip -o link show`).
    pub fn mac(&self) -> Result<String> {
        let link = self.ip(&["-o", "link", "show", "dev", &self.dev])?;
        link.split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .map(str::to_owned)
            .ok_or_else(|| Error {
                command: format!("ip -o link show dev {}", self.dev),
                message: "no link/ether address".into(),
            })
    }

    /// `ip link show` of this end.
    pub fn link_show(&self) -> String {
        self.ip(&["link", "show", "dev", &self.dev])
            .unwrap_or_else(|e| e.to_string())
    }
}

/// Creates the veth pair `a` - `b` with `queues` rx and tx queues on each
/// end, moves each end into its namespace, adds the addresses and sets both
/// up. The caller removes it (the root end, or a namespace holding an end).
pub fn connect(a: &End, b: &End, queues: u32) -> Result<()> {
    let q = queues.to_string();
    cmd::ip_quiet(&["link", "del", &a.dev]);
    cmd::ip(&[
        "link",
        "add",
        &a.dev,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
        "type",
        "veth",
        "peer",
        "name",
        &b.dev,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
    ])?;
    for end in [a, b] {
        if let Some(ns) = &end.ns {
            cmd::ip(&["link", "set", &end.dev, "netns", ns])?;
        }
    }
    for end in [a, b] {
        if let Some((v4, len)) = end.v4 {
            end.ip(&["addr", "add", &format!("{v4}/{len}"), "dev", &end.dev])?;
        }
        if let Some((v6, len)) = end.v6 {
            end.ip(&[
                "-6",
                "addr",
                "add",
                &format!("{v6}/{len}"),
                "dev",
                &end.dev,
                "nodad",
            ])?;
        }
        end.ip(&["link", "set", &end.dev, "up"])?;
    }
    Ok(())
}

/// Adds (`on`) or removes permanent neighbour entries on each end for the
/// other's addresses (each family both ends have).
pub fn static_neighbours(a: &End, b: &End, on: bool) -> Result<()> {
    let macs = [a.mac()?, b.mac()?];
    for (here, there, there_mac) in [(a, b, &macs[1]), (b, a, &macs[0])] {
        let addrs = [
            there.v4.map(|(v4, _)| v4.to_string()),
            there.v6.map(|(v6, _)| v6.to_string()),
        ];
        let mine = [here.v4.is_some(), here.v6.is_some()];
        for (addr, mine) in addrs.iter().zip(mine) {
            let Some(addr) = addr.as_deref().filter(|_| mine) else {
                continue;
            };
            if on {
                here.ip(&[
                    "neigh",
                    "replace",
                    addr,
                    "lladdr",
                    there_mac,
                    "nud",
                    "permanent",
                    "dev",
                    &here.dev,
                ])?;
            } else {
                let _ = here.ip(&["neigh", "del", addr, "dev", &here.dev]);
            }
        }
    }
    Ok(())
}
