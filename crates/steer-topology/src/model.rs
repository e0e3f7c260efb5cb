//! The raw discovery result every source produces: for each CPU id, an opaque
//! LLC key and NUMA key (whatever identifies the domain in that source) and
//! the online state. Keys are densified here, numbered by their lowest CPU,
//! so every source yields the same ids for the same machine.

use std::collections::HashMap;

use steer_core::cpu::LlcId;

/// One CPU as a source saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CpuEntry {
    /// Identifies the CPU's last-level cache within the source; `None` if
    /// the CPU is absent or its cache unknown.
    pub llc_key: Option<u64>,
    /// Identifies the CPU's NUMA node within the source.
    pub numa_key: Option<u64>,
    /// Whether the CPU is online.
    pub online: bool,
}

/// CPUs indexed by CPU id.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub cpus: Vec<CpuEntry>,
}

impl Model {
    /// Returns the entry for `cpu`, growing the table as needed.
    pub fn entry(&mut self, cpu: usize) -> &mut CpuEntry {
        if self.cpus.len() <= cpu {
            self.cpus.resize(cpu + 1, CpuEntry::default());
        }
        &mut self.cpus[cpu]
    }

    pub fn nr_cpus(&self) -> usize {
        self.cpus.len()
    }

    pub fn is_online(&self, cpu: usize) -> bool {
        self.cpus
            .get(cpu)
            .is_some_and(|e| e.online && e.llc_key.is_some())
    }

    /// Dense LLC ids, numbered in order of each LLC's lowest CPU.
    pub fn llc_ids(&self) -> Vec<Option<LlcId>> {
        densify(self.cpus.iter().map(|e| e.llc_key))
            .into_iter()
            .map(|id| id.map(|i| LlcId::try_from(i).unwrap_or(LlcId::MAX)))
            .collect()
    }

    /// Dense NUMA node ids, numbered in order of each node's lowest CPU.
    pub fn numa_ids(&self) -> Vec<Option<usize>> {
        densify(self.cpus.iter().map(|e| e.numa_key))
    }
}

fn densify(keys: impl Iterator<Item = Option<u64>>) -> Vec<Option<usize>> {
    let mut ids = HashMap::new();
    keys.map(|key| {
        key.map(|k| {
            let next = ids.len();
            *ids.entry(k).or_insert(next)
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_and_ordered_by_lowest_cpu() {
        let mut m = Model::default();
        for (cpu, key) in [(0, 70), (1, 30), (2, 70), (4, 30)] {
            let e = m.entry(cpu);
            e.llc_key = Some(key);
            e.online = true;
        }
        assert_eq!(m.llc_ids(), vec![Some(0), Some(1), Some(0), None, Some(1)]);
        assert!(!m.is_online(3));
        assert!(m.is_online(4));
    }
}
