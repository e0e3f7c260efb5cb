//! JSON reports for people and scripts: the topology report printed by
//! `examples/topology.rs`.

use steer_core::cpu::CpuSet;
use topology::Topology;

fn ids(set: &CpuSet) -> Vec<usize> {
    set.iter().collect()
}

/// The topology as one JSON object, keys in this order:
/// `{"source": "hwloc|sysfs|synthetic|xml", "cpus": [online ids],
/// "llcs": [[cpus of llc 0], ...], "numa": [[cpus of node 0], ...]}`.
///
/// ```
/// let t = steer::topology::Topology::synthetic("pack:1 l3:2 core:2 pu:1").unwrap();
/// assert_eq!(
///     steer::report::topology_json(&t).to_string(),
///     r#"{"source":"synthetic","cpus":[0,1,2,3],"llcs":[[0,1],[2,3]],"numa":[[0,1,2,3]]}"#
/// );
/// ```
pub fn topology_json(topo: &Topology) -> serde_json::Value {
    serde_json::json!({
        "source": topo.source().name(),
        "cpus": ids(&topo.online_cpus()),
        "llcs": topo.llcs().iter().map(ids).collect::<Vec<_>>(),
        "numa": topo.numa_nodes().iter().map(ids).collect::<Vec<_>>(),
    })
}
