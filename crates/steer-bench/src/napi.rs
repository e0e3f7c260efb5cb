//! `--rx-on receiver`: each veth end's receive path (its NAPI, where its XDP
//! program and the AF_XDP copy run) in a kernel thread pinned to the CPUs of
//! whoever owns that end, instead of in the softirq of the CPU that sent
//! the frame (veth's default). That is what a NIC does with its interrupt
//! on the server's CPUs. veth has NAPI only while an XDP program is
//! attached, so this applies to the generator's end (gen_rx) and to the
//! servers that attach one (reflector, AF_XDP turnaround, steer); the
//! kernel servers' receive work moves to their CPUs through RPS.
//!
//! Also the device's interrupt deferral (`napi_defer_hard_irqs`,
//! `gro_flush_timeout`) and GRO (veth's NAPI) for the frontier's kernel
//! points: [`DeferGuard`](crate::napi::DeferGuard),
//! [`GroGuard`](crate::napi::GroGuard).
//!
//! Invariants: NAPI threads are found by name (`napi/<interface>-<id>`,
//! cut to 15 characters by the kernel) and only those are pinned; a
//! deferral or GRO setting is restored when its guard drops.

use std::{fs, process::Command, time::Duration};

use anyhow::{bail, Context, Result};

/// Turns on threaded NAPI for `interface` (in namespace `ns`, or the root
/// namespace) and pins its NAPI threads to `cpus`. Returns how many threads
/// were pinned.
pub fn thread_and_pin(ns: Option<&str>, interface: &str, cpus: &[usize]) -> Result<usize> {
    let path = format!("/sys/class/net/{interface}/threaded");
    match ns {
        None => fs::write(&path, "1").with_context(|| format!("writing 1 to {path}"))?,
        Some(ns) => {
            // sysfs shows the namespace's devices only under `ip netns exec`.
            let out = Command::new("ip")
                .args(["netns", "exec", ns, "sh", "-c", &format!("echo 1 > {path}")])
                .output()
                .context("running ip netns exec")?;
            if !out.status.success() {
                bail!(
                    "threaded NAPI on {interface}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
    }
    let prefix: String = format!("napi/{interface}-").chars().take(15).collect();
    for _ in 0..50 {
        let tids = threads_named(&prefix);
        if !tids.is_empty() {
            for &tid in &tids {
                crate::sys::pin_task(tid, cpus)
                    .with_context(|| format!("pinning NAPI thread {tid} of {interface}"))?;
            }
            return Ok(tids.len());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("no NAPI thread of {interface} appeared (is an XDP program attached?)")
}

/// "napi/x-8@cpu1 (1.20 s), ..." for `interface`'s NAPI threads, if any.
pub fn describe(interface: &str) -> Option<String> {
    let prefix: String = format!("napi/{interface}-").chars().take(15).collect();
    let threads: Vec<crate::cpustat::ThreadCpu> = threads_named(&prefix)
        .into_iter()
        .filter_map(|tid| u32::try_from(tid).ok())
        .flat_map(crate::cpustat::threads)
        .collect();
    (!threads.is_empty()).then(|| crate::cpustat::describe(&threads, 0.0))
}

fn threads_named(prefix: &str) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim_end().starts_with(prefix))
                .unwrap_or(false)
        })
        .collect()
}

/// A device's interrupt deferral (`napi_defer_hard_irqs`,
/// `gro_flush_timeout` in sysfs) set for a measurement and restored to
/// what it was when dropped.
pub struct DeferGuard {
    interface: String,
    old: Vec<(String, String)>,
}

/// The sysfs files of `interface`'s interrupt deferral.
fn defer_files(interface: &str) -> [String; 2] {
    [
        format!("/sys/class/net/{interface}/napi_defer_hard_irqs"),
        format!("/sys/class/net/{interface}/gro_flush_timeout"),
    ]
}

impl DeferGuard {
    /// Sets `napi_defer_hard_irqs` and `gro_flush_timeout` (ns) of
    /// `interface` in this namespace; the old values come back on drop.
    pub fn set(interface: &str, defer_hard_irqs: u32, gro_flush_timeout_ns: u64) -> Result<Self> {
        let mut g = DeferGuard {
            interface: interface.into(),
            old: Vec::new(),
        };
        let values = [
            defer_hard_irqs.to_string(),
            gro_flush_timeout_ns.to_string(),
        ];
        for (path, value) in defer_files(interface).into_iter().zip(values) {
            let old = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            fs::write(&path, &value).with_context(|| format!("writing {value} to {path}"))?;
            g.old.push((path, old.trim().to_owned()));
        }
        Ok(g)
    }
}

impl Drop for DeferGuard {
    fn drop(&mut self) {
        for (path, old) in self.old.iter().rev() {
            if let Err(e) = fs::write(path, old) {
                tracing::warn!("restoring {path} of {} to {old}: {e}", self.interface);
            }
        }
    }
}

/// GRO turned on for a device (on veth that gives the receiving end a
/// NAPI instance, so its packets carry a NAPI id that `SO_BUSY_POLL` can
/// poll and interrupt deferral can defer), turned off again on drop when
/// it was off.
pub struct GroGuard {
    interface: String,
    was_on: bool,
}

/// Whether `ethtool -k` output says generic receive offload is on.
pub fn gro_on(ethtool_k: &str) -> Option<bool> {
    ethtool_k.lines().find_map(|l| {
        let v = l.trim().strip_prefix("generic-receive-offload:")?;
        Some(v.trim().starts_with("on"))
    })
}

fn ethtool(args: &[&str]) -> Result<String> {
    let out = Command::new("ethtool")
        .args(args)
        .output()
        .context("running ethtool (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "ethtool {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl GroGuard {
    /// Turns GRO on for `interface` (in this namespace).
    pub fn on(interface: &str) -> Result<Self> {
        let was_on = gro_on(&ethtool(&["-k", interface])?).unwrap_or(false);
        if !was_on {
            ethtool(&["-K", interface, "gro", "on"])?;
        }
        Ok(GroGuard {
            interface: interface.into(),
            was_on,
        })
    }
}

impl Drop for GroGuard {
    fn drop(&mut self) {
        if !self.was_on {
            if let Err(e) = ethtool(&["-K", &self.interface, "gro", "off"]) {
                tracing::warn!("turning GRO off again on {}: {e:#}", self.interface);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gro_state_from_ethtool() {
        let k = "Features for sb1h:\nrx-checksumming: on\ngeneric-receive-offload: off\nlarge-receive-offload: off [fixed]\n";
        assert_eq!(gro_on(k), Some(false));
        assert_eq!(gro_on("generic-receive-offload: on\n"), Some(true));
        assert_eq!(gro_on("nothing here"), None);
        assert_eq!(
            defer_files("eth0"),
            [
                "/sys/class/net/eth0/napi_defer_hard_irqs",
                "/sys/class/net/eth0/gro_flush_timeout"
            ]
        );
    }
}
