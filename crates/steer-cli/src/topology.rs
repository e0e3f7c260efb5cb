//! `steer topology`: the CPU/LLC/NUMA topology steer sees, as one JSON
//! object `{"source": ..., "cpus": [...], "llcs": [[...], ...], "numa": [[...], ...]}`,
//! from the live machine (hwloc, sysfs fallback), an hwloc synthetic
//! description or an XML export.

use std::path::PathBuf;

use clap::Args;
use steer_core::cpu::CpuSet;
use steer_topology::Topology;

/// `steer topology` arguments.
#[derive(Debug, Args)]
#[command(
    group = clap::ArgGroup::new("input").multiple(false),
    after_help = "Examples:\n  \
        steer topology                                     this machine (hwloc, sysfs fallback)\n  \
        steer topology --synthetic \"pack:2 l3:16 core:8 pu:1\"  2 x 128 cores, 8 per L3\n  \
        steer topology --xml machine.xml                   from `lstopo --of xml machine.xml`"
)]
pub struct TopologyArgs {
    /// An hwloc synthetic description, e.g. "pack:2 l3:16 core:8 pu:1".
    #[arg(long, group = "input")]
    pub synthetic: Option<String>,
    /// An hwloc XML export (`lstopo --of xml FILE`).
    #[arg(long, group = "input")]
    pub xml: Option<PathBuf>,
    /// Read the live machine from sysfs under this root instead of hwloc.
    #[arg(long, group = "input")]
    pub sysfs: Option<PathBuf>,
}

/// Loads the topology the arguments name.
pub fn load(args: &TopologyArgs) -> Result<Topology, steer_topology::Error> {
    match (&args.synthetic, &args.xml, &args.sysfs) {
        (Some(spec), _, _) => Topology::synthetic(spec),
        (_, Some(path), _) => Topology::from_xml_file(path),
        (_, _, Some(root)) => Topology::from_sysfs(root),
        _ => Topology::live(),
    }
}

/// Prints the topology report.
pub fn run(args: &TopologyArgs) -> anyhow::Result<()> {
    println!("{}", topology_json(&load(args)?));
    Ok(())
}

fn ids(set: &CpuSet) -> Vec<usize> {
    set.iter().collect()
}

/// The topology as one JSON object, keys in this order:
/// `{"source": "hwloc|sysfs|synthetic|xml", "cpus": [online ids],
/// "llcs": [[cpus of llc 0], ...], "numa": [[cpus of node 0], ...]}`.
pub fn topology_json(topo: &Topology) -> serde_json::Value {
    serde_json::json!({
        "source": topo.source().name(),
        "cpus": ids(&topo.online_cpus()),
        "llcs": topo.llcs().iter().map(ids).collect::<Vec<_>>(),
        "numa": topo.numa_nodes().iter().map(ids).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_report_lists_llcs_in_order() {
        let t = Topology::synthetic("pack:1 l3:2 core:2 pu:1").unwrap();
        assert_eq!(
            topology_json(&t).to_string(),
            r#"{"source":"synthetic","cpus":[0,1,2,3],"llcs":[[0,1],[2,3]],"numa":[[0,1,2,3]]}"#
        );
    }
}
