//! Discovery through hwloc (the hwlocality crate): the live machine, an hwloc
//! synthetic description, or an hwloc XML export, reduced to a [`Model`].
//!
//! The LLC of a PU is its outermost CPU data (or unified) cache ancestor; a
//! description without caches falls back to the package, then the machine, so
//! every PU has an LLC domain. Live and XML topologies number CPUs by the PU's
//! OS index; synthetic ones by hwloc's logical order.

use std::collections::HashMap;
use std::path::Path;

use hwlocality::object::types::ObjectType;
use hwlocality::object::TopologyObject;
use hwlocality::topology::builder::{BuildFlags, TopologyBuilder};
use hwlocality::topology::Topology as HwTopology;

use crate::model::Model;

/// How CPU ids are assigned to PUs.
#[derive(Clone, Copy)]
enum Numbering {
    /// The PU's OS index (the kernel's CPU number).
    Os,
    /// hwloc's logical index.
    Logical,
}

pub(crate) fn live() -> Result<Model, String> {
    let topo = TopologyBuilder::new()
        .with_flags(BuildFlags::INCLUDE_DISALLOWED)
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    let mut model = reduce(&topo, Numbering::Os)?;
    // hwloc lists the online PUs; the kernel's own list is the authority.
    if let Ok(online) = crate::sysfs::online(Path::new("/")) {
        for (cpu, entry) in model.cpus.iter_mut().enumerate() {
            entry.online &= online.contains(cpu);
        }
    }
    Ok(model)
}

pub(crate) fn synthetic(spec: &str) -> Result<Model, String> {
    if spec.trim().is_empty() {
        return Err("empty description".into());
    }
    let topo = TopologyBuilder::new()
        .from_synthetic(spec)
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    reduce(&topo, Numbering::Logical)
}

pub(crate) fn xml_file(path: &Path) -> Result<Model, String> {
    // Read it ourselves first so a missing file says so plainly.
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let topo = TopologyBuilder::new()
        .from_xml(&text)
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    reduce(&topo, Numbering::Os)
}

fn cpu_id(pu: &TopologyObject, numbering: Numbering) -> Option<usize> {
    match numbering {
        Numbering::Os => pu.os_index(),
        Numbering::Logical => Some(pu.logical_index()),
    }
}

/// A key unique to an object within its topology (hwloc's global persistent index).
fn key(obj: &TopologyObject) -> u64 {
    obj.global_persistent_index()
}

fn llc_domain(pu: &TopologyObject) -> Option<&TopologyObject> {
    pu.ancestors()
        .filter(|a| a.object_type().is_cpu_data_cache())
        .last()
        .or_else(|| {
            pu.ancestors()
                .find(|a| a.object_type() == ObjectType::Package)
        })
        .or_else(|| pu.ancestors().last())
}

fn reduce(topo: &HwTopology, numbering: Numbering) -> Result<Model, String> {
    let mut model = Model::default();
    // PU os index -> our CPU id, to translate NUMA cpusets (which hold OS indexes).
    let mut by_os = HashMap::new();
    for pu in topo.objects_with_type(ObjectType::PU) {
        let cpu = cpu_id(pu, numbering).ok_or("a PU has no OS index")?;
        if cpu >= crate::MAX_CPUS {
            return Err(format!(
                "CPU {cpu} exceeds steer's limit of {} CPUs",
                crate::MAX_CPUS
            ));
        }
        if let Some(os) = pu.os_index() {
            by_os.insert(os, cpu);
        }
        let entry = model.entry(cpu);
        entry.llc_key = llc_domain(pu).map(key);
        entry.online = true;
    }
    if model.nr_cpus() == 0 {
        return Err("no CPUs (PUs) in the topology".into());
    }
    for node in topo.objects_with_type(ObjectType::NUMANode) {
        let Some(cpuset) = node.cpuset() else {
            continue;
        };
        for os in cpuset.iter_set() {
            if let Some(&cpu) = by_os.get(&usize::from(os)) {
                model.entry(cpu).numa_key = Some(key(node));
            }
        }
    }
    Ok(model)
}
