//! The test bed: a network namespace and a veth pair the tool creates and
//! removes itself (with steer-testbed's primitives), the generator's end
//! inside the namespace, the server's end in the root namespace; and the
//! RPS/RFS settings of the kernel servers, restored afterwards.
//!
//! Invariants: names carry the process id (`sb<pid>`, `sb<pid>h`,
//! `sb<pid>p`), so concurrent runs never share them; the /24 comes from
//! 198.18.128.0/17 and is skipped while any address or route in the root
//! namespace uses it. `Drop` removes the veth pair and the namespace (also
//! on error and unwinding, ending what still runs inside);
//! [`RpsGuard`](crate::netns::RpsGuard)'s `Drop` writes back what it
//! changed.

use std::{
    fs::{self, File},
    net::Ipv4Addr,
    os::fd::AsFd,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use steer_testbed::veth::{self, End};
use steer_testbed::Netns;
use tracing::{debug, warn};

/// Runs `ip ARGS`, failing with its stderr.
pub(crate) fn ip(args: &[&str]) -> Result<String> {
    Ok(steer_testbed::cmd::ip(args)?)
}

/// The namespace and veth pair of one run.
#[derive(Debug)]
pub struct TestBed {
    /// Namespace name.
    pub ns: String,
    /// The server's end (root namespace).
    pub host_if: String,
    /// The generator's end (inside `ns`).
    pub peer_if: String,
    /// Server address.
    pub host_v4: Ipv4Addr,
    /// Generator address.
    pub peer_v4: Ipv4Addr,
    /// MAC of the server's end.
    pub host_mac: [u8; 6],
    /// MAC of the generator's end.
    pub peer_mac: [u8; 6],
    /// rx (and tx) queues on each end.
    pub queues: u32,
    /// The namespace itself: removed (with what still runs in it) when the
    /// bed drops, after the veth pair.
    _netns: Netns,
}

fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let mut m = [0u8; 6];
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        bail!("bad MAC address {s:?}");
    }
    for (d, p) in m.iter_mut().zip(parts) {
        *d = u8::from_str_radix(p, 16).with_context(|| format!("bad MAC address {s:?}"))?;
    }
    Ok(m)
}

fn free_slot(pid: u32) -> Result<u8> {
    for i in 0..120u32 {
        let slot = 128 + ((pid + i) % 120) as u8;
        let net = format!("198.18.{slot}.0/24");
        let used = !ip(&["-4", "-o", "addr", "show", "to", &net])?
            .trim()
            .is_empty()
            || !ip(&["-4", "route", "show", "root", &net])?
                .trim()
                .is_empty();
        if !used {
            return Ok(slot);
        }
    }
    bail!("no free /24 in 198.18.128.0/17 for the test bed (ip -4 addr)")
}

impl TestBed {
    /// Creates the namespace and a veth pair with `queues` queues per end,
    /// addresses, static neighbours both ways, both ends up
    /// (steer-testbed's namespace and veth primitives).
    pub fn create(queues: u32) -> Result<Self> {
        let pid = std::process::id();
        let slot = free_slot(pid)?;
        let netns = Netns::create(&format!("sb{pid}"))?;
        let mut bed = TestBed {
            ns: netns.name().to_owned(),
            host_if: format!("sb{pid}h"),
            peer_if: format!("sb{pid}p"),
            host_v4: Ipv4Addr::new(198, 18, slot, 1),
            peer_v4: Ipv4Addr::new(198, 18, slot, 2),
            host_mac: [0; 6],
            peer_mac: [0; 6],
            queues,
            _netns: netns,
        };
        // From here `Drop` removes whatever was made.
        let host = End {
            dev: bed.host_if.clone(),
            ns: None,
            v4: Some((bed.host_v4, 24)),
            v6: None,
        };
        let peer = End {
            dev: bed.peer_if.clone(),
            ns: Some(bed.ns.clone()),
            v4: Some((bed.peer_v4, 24)),
            v6: None,
        };
        veth::connect(&host, &peer, queues)?;
        veth::static_neighbours(&host, &peer, true)?;
        bed.host_mac = parse_mac(&host.mac()?)?;
        bed.peer_mac = parse_mac(&peer.mac()?)?;
        debug!(?bed, "test bed up");
        Ok(bed)
    }

    /// A closure that moves the thread calling it into namespace `ns`
    /// (setns affects only that thread), for handing to a new thread.
    pub fn enter_fn(ns: &str) -> impl FnOnce() -> Result<()> + Send + 'static {
        let ns = ns.to_owned();
        move || {
            let path = format!("/run/netns/{ns}");
            let file = File::open(&path).with_context(|| format!("opening {path}"))?;
            crate::sys::enter_net_ns(file.as_fd()).with_context(|| format!("setns into {ns}"))
        }
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl Drop for TestBed {
    fn drop(&mut self) {
        // The namespace goes with the `netns` field, after this.
        let _ = ip(&["link", "del", &self.host_if]);
    }
}

/// RPS/RFS on an interface's rx queues (`rps_cpus`, `rps_flow_cnt`) and
/// `net.core.rps_sock_flow_entries`, as `compare-kernel` sets them;
/// restored on drop.
#[derive(Debug)]
pub struct RpsGuard {
    saved: Vec<(PathBuf, String)>,
}

/// Entries per rx queue flow table.
pub const RPS_FLOW_CNT: u32 = 16384;
/// Global socket flow table entries.
pub const RPS_SOCK_FLOW_ENTRIES: u32 = 32768;

impl RpsGuard {
    /// Steers `interface`'s received packets to the CPUs of `mask` (hex, as
    /// sysfs wants it) with RFS on.
    pub fn configure(interface: &str, mask: &str) -> Result<Self> {
        Self::configure_under(Path::new("/"), interface, mask)
    }

    /// As [`configure`](Self::configure), with /proc and /sys found under
    /// `root` (a test's scratch tree). On an error, what was already
    /// written is written back before it returns.
    pub fn configure_under(root: &Path, interface: &str, mask: &str) -> Result<Self> {
        let mut guard = RpsGuard { saved: Vec::new() };
        let mut set = |path: PathBuf, value: String| -> Result<()> {
            let old =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            fs::write(&path, &value)
                .with_context(|| format!("writing {value} to {}", path.display()))?;
            guard.saved.push((path, old.trim().to_owned()));
            Ok(())
        };
        set(
            root.join("proc/sys/net/core/rps_sock_flow_entries"),
            RPS_SOCK_FLOW_ENTRIES.to_string(),
        )?;
        let dir = root.join(format!("sys/class/net/{interface}/queues"));
        let mut queues: Vec<String> = fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("rx-"))
            .collect();
        queues.sort();
        for q in queues {
            set(dir.join(&q).join("rps_cpus"), mask.to_owned())?;
            set(dir.join(&q).join("rps_flow_cnt"), RPS_FLOW_CNT.to_string())?;
        }
        Ok(guard)
    }
}

impl Drop for RpsGuard {
    fn drop(&mut self) {
        for (path, value) in self.saved.iter().rev() {
            if let Err(e) = fs::write(path, value) {
                // The interface may be gone already; the sysctl must come back.
                if !path.to_string_lossy().contains("/sys/class/net/") {
                    warn!("restoring {} to {value}: {e}", path.display());
                }
            }
        }
    }
}

/// The sysfs hex mask of a CPU list (`[1]` -> `2`, `[0, 33]` -> `2,00000001`).
pub fn cpu_mask(cpus: &[usize]) -> String {
    let max = cpus.iter().copied().max().unwrap_or(0);
    let mut words = vec![0u32; max / 32 + 1];
    for &c in cpus {
        words[c / 32] |= 1 << (c % 32);
    }
    let mut s = format!("{:x}", words[words.len() - 1]);
    for w in words.iter().rev().skip(1) {
        s.push_str(&format!(",{w:08x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_macs() {
        assert_eq!(cpu_mask(&[1]), "2");
        assert_eq!(cpu_mask(&[0, 1]), "3");
        assert_eq!(cpu_mask(&[0, 33]), "2,00000001");
        assert_eq!(
            parse_mac("02:ab:00:00:00:01\n").unwrap(),
            [2, 0xab, 0, 0, 0, 1]
        );
        assert!(parse_mac("02:ab").is_err());
        assert_eq!(fmt_mac(&[2, 0xab, 0, 0, 0, 1]), "02:ab:00:00:00:01");
    }

    /// A scratch /proc and /sys with `queues` rx queues on `dev`, every
    /// value "0" (as a fresh kernel has them).
    fn scratch(name: &str, dev: &str, queues: u32) -> PathBuf {
        let root = std::env::temp_dir().join(format!("rps-guard-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("proc/sys/net/core")).unwrap();
        fs::write(root.join("proc/sys/net/core/rps_sock_flow_entries"), "0\n").unwrap();
        for q in 0..queues {
            let d = root.join(format!("sys/class/net/{dev}/queues/rx-{q}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("rps_cpus"), "0\n").unwrap();
            fs::write(d.join("rps_flow_cnt"), "0\n").unwrap();
        }
        fs::create_dir_all(root.join(format!("sys/class/net/{dev}/queues/tx-0"))).unwrap();
        root
    }

    fn read(root: &Path, rel: &str) -> String {
        fs::read_to_string(root.join(rel))
            .unwrap()
            .trim()
            .to_owned()
    }

    #[test]
    fn the_guard_sets_rfs_on_every_rx_queue_and_restores_on_drop() {
        let root = scratch("ok", "v0", 2);
        let guard = RpsGuard::configure_under(&root, "v0", "3").unwrap();
        assert_eq!(
            read(&root, "proc/sys/net/core/rps_sock_flow_entries"),
            "32768"
        );
        for q in ["rx-0", "rx-1"] {
            let d = format!("sys/class/net/v0/queues/{q}");
            assert_eq!(read(&root, &format!("{d}/rps_cpus")), "3");
            assert_eq!(read(&root, &format!("{d}/rps_flow_cnt")), "16384");
        }
        assert!(!root.join("sys/class/net/v0/queues/tx-0/rps_cpus").exists());
        drop(guard);
        assert_eq!(read(&root, "proc/sys/net/core/rps_sock_flow_entries"), "0");
        for q in ["rx-0", "rx-1"] {
            let d = format!("sys/class/net/v0/queues/{q}");
            assert_eq!(read(&root, &format!("{d}/rps_cpus")), "0");
            assert_eq!(read(&root, &format!("{d}/rps_flow_cnt")), "0");
        }
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn a_failure_half_way_writes_back_what_was_set() {
        // rx-1 has no rps_flow_cnt: setting it fails after rx-0 and the
        // sysctl were written.
        let root = scratch("fail", "v0", 2);
        fs::remove_file(root.join("sys/class/net/v0/queues/rx-1/rps_flow_cnt")).unwrap();
        assert!(RpsGuard::configure_under(&root, "v0", "3").is_err());
        assert_eq!(read(&root, "proc/sys/net/core/rps_sock_flow_entries"), "0");
        assert_eq!(read(&root, "sys/class/net/v0/queues/rx-0/rps_cpus"), "0");
        assert_eq!(
            read(&root, "sys/class/net/v0/queues/rx-0/rps_flow_cnt"),
            "0"
        );
        assert_eq!(read(&root, "sys/class/net/v0/queues/rx-1/rps_cpus"), "0");
        // An interface that is not there sets nothing either.
        assert!(RpsGuard::configure_under(&root, "nope", "3").is_err());
        assert_eq!(read(&root, "proc/sys/net/core/rps_sock_flow_entries"), "0");
        let _ = fs::remove_dir_all(&root);
    }
}
