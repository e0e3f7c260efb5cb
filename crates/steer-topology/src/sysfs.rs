//! Discovery from sysfs, the fallback when hwloc fails, reading under a root
//! directory so tests can feed a fake tree:
//! - `sys/devices/system/cpu/possible` and `online` (kernel CPU lists);
//! - `sys/devices/system/cpu/cpuN/cache/indexM/{level,type,shared_cpu_list}`:
//!   the LLC is the highest-level data or unified cache, identified by the
//!   lowest CPU of its `shared_cpu_list`;
//! - `sys/devices/system/node/nodeN/cpulist` for NUMA (absent on kernels
//!   without NUMA: then no CPU has a node).
//!
//! An offline CPU usually has no `cache` directory: it gets no LLC and stays
//! offline until the topology is rebuilt.

use std::fs;
use std::path::{Path, PathBuf};

use steer_core::cpu::CpuSet;

use crate::model::Model;
use crate::Error;

fn cpu_dir(root: &Path) -> PathBuf {
    root.join("sys/devices/system/cpu")
}

fn read_trimmed(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| Error::Sysfs {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

fn read_list(path: &Path) -> Result<CpuSet, Error> {
    read_trimmed(path)?
        .parse()
        .map_err(|e: steer_core::cpu::CpuListError| Error::Sysfs {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// The online CPUs (`sys/devices/system/cpu/online` under `root`).
pub(crate) fn online(root: &Path) -> Result<CpuSet, Error> {
    read_list(&cpu_dir(root).join("online"))
}

/// The LLC of `cpu`: the lowest CPU sharing its highest-level data/unified cache.
fn llc_key(root: &Path, cpu: usize) -> Option<u64> {
    let cache = cpu_dir(root).join(format!("cpu{cpu}/cache"));
    let mut best: Option<(u32, u64)> = None;
    for entry in fs::read_dir(cache).ok()?.flatten() {
        let dir = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let Ok(kind) = read_trimmed(&dir.join("type")) else {
            continue;
        };
        if kind == "Instruction" {
            continue;
        }
        let Some(level) = read_trimmed(&dir.join("level"))
            .ok()
            .and_then(|l| l.parse().ok())
        else {
            continue;
        };
        let Some(first) = read_list(&dir.join("shared_cpu_list"))
            .ok()
            .and_then(|s| s.nth(0))
        else {
            continue;
        };
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, first as u64));
        }
    }
    best.map(|(_, first)| first)
}

pub(crate) fn read(root: &Path) -> Result<Model, Error> {
    let dir = cpu_dir(root);
    let online = online(root)?;
    let possible = read_list(&dir.join("possible")).unwrap_or(online);
    let mut model = Model::default();
    for cpu in possible.iter() {
        let llc = llc_key(root, cpu);
        let entry = model.entry(cpu);
        entry.online = online.contains(cpu);
        entry.llc_key = llc;
        if entry.online && llc.is_none() {
            // No cache information at all (some VMs): one domain per CPU would
            // make every move "cross-LLC"; treat the machine as one LLC instead.
            entry.llc_key = Some(u64::MAX);
        }
    }
    let nodes = root.join("sys/devices/system/node");
    if let Ok(entries) = fs::read_dir(&nodes) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name
                .strip_prefix("node")
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            for cpu in read_list(&entry.path().join("cpulist"))?.iter() {
                if cpu < model.nr_cpus() {
                    model.entry(cpu).numa_key = Some(id);
                }
            }
        }
    }
    Ok(model)
}
