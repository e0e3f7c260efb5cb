//! What RFS needs to know about the machine, and nothing else: which CPUs are
//! online, which last-level cache (LLC) and NUMA node each one sits behind,
//! and how a thread is pinned or finds where it runs.
//!
//! A [`Topology`] comes from one of four [`Source`]s:
//! - the live machine through hwloc ([`Topology::live`]), falling back to
//!   sysfs when hwloc fails;
//! - an hwloc synthetic description such as `pack:2 l3:16 core:8 pu:1`
//!   ([`Topology::synthetic`]), CPUs numbered in hwloc's logical order;
//! - an hwloc XML export (`lstopo --of xml`, [`Topology::from_xml_file`]),
//!   CPUs numbered as on the exported machine;
//! - a sysfs tree ([`Topology::from_sysfs`]), normally `/`.
//!
//! Synthetic and XML topologies model another machine: plan with them, but
//! bind threads through the live machine. [`Topology::pin_current_thread`] on a
//! model silently does nothing, as hwloc's binding does.
//!
//! Invariants: CPU ids are dense indices below [`MAX_CPUS`]; LLC and NUMA ids
//! are dense, numbered by their lowest CPU; the LLC map never changes after
//! construction, only the online state does ([`Topology::set_online`],
//! [`Topology::refresh_online`]), and it is shared with every holder of
//! [`Topology::layout`], so steer-core's LLC rule sees it at once.
#![forbid(unsafe_code)]

mod hwloc;
mod model;
mod sysfs;
pub mod thread;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use steer_core::cpu::{CpuId, CpuLayout, CpuSet, LlcId, MAX_CPUS};

use model::Model;

/// Where a [`Topology`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The live machine, discovered by hwloc.
    Hwloc,
    /// The live machine, read from sysfs under this root (hwloc failed or
    /// sysfs was asked for).
    Sysfs(PathBuf),
    /// An hwloc synthetic description.
    Synthetic(String),
    /// An hwloc XML export.
    Xml(PathBuf),
}

impl Source {
    /// Short name: `hwloc`, `sysfs`, `synthetic` or `xml`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Hwloc => "hwloc",
            Self::Sysfs(_) => "sysfs",
            Self::Synthetic(_) => "synthetic",
            Self::Xml(_) => "xml",
        }
    }

    /// Whether this source describes the machine we run on.
    pub fn is_live(&self) -> bool {
        matches!(self, Self::Hwloc | Self::Sysfs(_))
    }
}

/// Errors from building or querying a topology. Each message names the input
/// at fault and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// hwloc rejected a synthetic description.
    #[error("bad hwloc synthetic topology {spec:?}: {reason} (expected e.g. \"pack:2 l3:16 core:8 pu:1\")")]
    BadSynthetic {
        /// The description as given.
        spec: String,
        /// What hwloc or steer objected to.
        reason: String,
    },
    /// An XML file could not be read or hwloc rejected it.
    #[error("bad hwloc XML topology {path}: {reason} (export one with `lstopo --of xml FILE`)")]
    BadXml {
        /// The file as given.
        path: PathBuf,
        /// Why it failed.
        reason: String,
    },
    /// Neither hwloc nor sysfs could describe the live machine.
    #[error(
        "cannot discover this machine's topology: hwloc failed ({hwloc}); sysfs failed ({sysfs})"
    )]
    Discovery {
        /// hwloc's failure.
        hwloc: String,
        /// sysfs's failure.
        sysfs: String,
    },
    /// A sysfs file was missing or unreadable.
    #[error("cannot read {path}: {reason}")]
    Sysfs {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The description has no CPUs, or more than steer handles.
    #[error("unusable topology: {0}")]
    Layout(#[from] steer_core::cpu::LayoutError),
    /// A CPU id outside the topology.
    #[error("CPU {cpu} is not in this topology (CPUs 0-{max})")]
    UnknownCpu {
        /// The id asked for.
        cpu: CpuId,
        /// The largest valid id.
        max: CpuId,
    },
    /// Online state of a live topology is re-read, not set by hand.
    #[error("CPU online state of a live topology follows the kernel: call refresh_online(), or use a synthetic/XML model to mark CPUs by hand")]
    LiveOnlineState,
    /// A thread call failed.
    #[error(transparent)]
    Thread(#[from] thread::ThreadError),
}

/// The machine as RFS sees it: online CPUs, LLCs and NUMA nodes.
///
/// ```
/// use steer_topology::Topology;
/// // The seed machine: 2 sockets of 128 cores, 8 cores per L3.
/// let topo = Topology::synthetic("pack:2 l3:16 core:8 pu:1").unwrap();
/// assert_eq!(topo.online_cpus().len(), 256);
/// assert_eq!(topo.llcs().len(), 32);
/// assert!(topo.shares_llc(0, 7) && !topo.shares_llc(7, 8));
/// topo.set_online(8, false).unwrap();
/// assert!(!topo.layout().is_online(8));
/// ```
#[derive(Debug, Clone)]
pub struct Topology {
    source: Source,
    layout: Arc<CpuLayout>,
    llcs: Vec<CpuSet>,
    numa_of: Vec<Option<usize>>,
    numa_nodes: Vec<CpuSet>,
}

impl Topology {
    /// The machine we run on: hwloc first, sysfs (`/`) when hwloc fails. The
    /// source used is in [`Topology::source`] and logged.
    pub fn live() -> Result<Self, Error> {
        match hwloc::live() {
            Ok(model) => Self::from_model(Source::Hwloc, model),
            Err(hwloc_err) => {
                tracing::warn!(error = %hwloc_err, "hwloc discovery failed; falling back to sysfs");
                Self::from_sysfs("/").map_err(|sysfs_err| Error::Discovery {
                    hwloc: hwloc_err.to_string(),
                    sysfs: sysfs_err.to_string(),
                })
            }
        }
    }

    /// A model from an hwloc synthetic description (`pack:2 l3:16 core:8
    /// pu:1`); CPUs are numbered in hwloc's logical order, all online.
    pub fn synthetic(spec: &str) -> Result<Self, Error> {
        let model = hwloc::synthetic(spec).map_err(|reason| Error::BadSynthetic {
            spec: spec.to_string(),
            reason,
        })?;
        Self::from_model(Source::Synthetic(spec.to_string()), model)
    }

    /// A model from an hwloc XML export; CPUs keep the exported machine's
    /// numbering.
    pub fn from_xml_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let model = hwloc::xml_file(path).map_err(|reason| Error::BadXml {
            path: path.to_path_buf(),
            reason,
        })?;
        Self::from_model(Source::Xml(path.to_path_buf()), model)
    }

    /// The live machine read from sysfs under `root` (normally `/`; tests use
    /// a fake tree): `sys/devices/system/cpu/{online,possible}`,
    /// `cpuN/cache/index*/{level,type,shared_cpu_list}`, and
    /// `sys/devices/system/node/nodeN/cpulist`.
    pub fn from_sysfs(root: impl AsRef<Path>) -> Result<Self, Error> {
        let root = root.as_ref();
        let model = sysfs::read(root)?;
        Self::from_model(Source::Sysfs(root.to_path_buf()), model)
    }

    fn from_model(source: Source, model: Model) -> Result<Self, Error> {
        let layout = CpuLayout::new(model.llc_ids())?;
        for cpu in 0..model.nr_cpus() {
            layout.set_online(cpu, model.is_online(cpu));
        }
        let llcs = (0..layout.nr_llcs())
            .map(|l| layout.cpus_of_llc(LlcId::try_from(l).unwrap_or(LlcId::MAX)))
            .collect();
        let numa_of = model.numa_ids();
        let nr_nodes = numa_of.iter().flatten().map(|&n| n + 1).max().unwrap_or(0);
        let numa_nodes = (0..nr_nodes)
            .map(|n| {
                numa_of
                    .iter()
                    .enumerate()
                    .filter(|(_, &node)| node == Some(n))
                    .map(|(cpu, _)| cpu)
                    .collect()
            })
            .collect();
        tracing::debug!(
            source = source.name(),
            cpus = layout.nr_cpus(),
            llcs = layout.nr_llcs(),
            "topology loaded"
        );
        Ok(Self {
            source,
            layout: Arc::new(layout),
            llcs,
            numa_of,
            numa_nodes,
        })
    }

    /// Where this topology came from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The shared cache layout steer-core consults. Online changes made through
    /// this topology are seen by every holder of the returned handle.
    pub fn layout(&self) -> Arc<CpuLayout> {
        Arc::clone(&self.layout)
    }

    /// Number of CPU ids (online or not).
    pub fn nr_cpus(&self) -> usize {
        self.layout.nr_cpus()
    }

    /// The CPUs online now.
    pub fn online_cpus(&self) -> CpuSet {
        self.layout.online_cpus()
    }

    /// Whether `cpu` exists and is online.
    pub fn is_online(&self, cpu: CpuId) -> bool {
        self.layout.is_online(cpu)
    }

    /// The LLC `cpu` is behind (`None` for an unknown or absent CPU).
    pub fn llc_of(&self, cpu: CpuId) -> Option<LlcId> {
        self.layout.llc_of(cpu)
    }

    /// Whether `a` and `b` share a last-level cache.
    pub fn shares_llc(&self, a: CpuId, b: CpuId) -> bool {
        self.layout.shares_llc(a, b)
    }

    /// The CPUs of each LLC, by LLC id (online or not).
    pub fn llcs(&self) -> &[CpuSet] {
        &self.llcs
    }

    /// The CPUs behind LLC `llc` (empty for an unknown id).
    pub fn cpus_of_llc(&self, llc: LlcId) -> CpuSet {
        self.llcs.get(usize::from(llc)).copied().unwrap_or_default()
    }

    /// The NUMA node of `cpu`, if known.
    pub fn numa_of(&self, cpu: CpuId) -> Option<usize> {
        self.numa_of.get(cpu).copied().flatten()
    }

    /// The CPUs of each NUMA node, by node id.
    pub fn numa_nodes(&self) -> &[CpuSet] {
        &self.numa_nodes
    }

    /// Marks a CPU of a *model* (synthetic or XML) offline or online. A live
    /// topology follows the kernel instead: see [`Topology::refresh_online`].
    pub fn set_online(&self, cpu: CpuId, online: bool) -> Result<(), Error> {
        if self.source.is_live() {
            return Err(Error::LiveOnlineState);
        }
        self.check_cpu(cpu)?;
        self.layout.set_online(cpu, online);
        Ok(())
    }

    /// Re-reads which CPUs are online (`/sys/devices/system/cpu/online`) for a
    /// live topology and updates the shared layout; returns the CPUs whose
    /// state changed. A model keeps its state and returns an empty set.
    pub fn refresh_online(&self) -> Result<CpuSet, Error> {
        let root = match &self.source {
            Source::Hwloc => Path::new("/"),
            Source::Sysfs(root) => root.as_path(),
            Source::Synthetic(_) | Source::Xml(_) => return Ok(CpuSet::new()),
        };
        let online = sysfs::online(root)?;
        let mut changed = CpuSet::new();
        for cpu in 0..self.nr_cpus() {
            // A CPU whose cache we never saw cannot be used even if it comes up.
            let now = online.contains(cpu) && self.layout.llc_of(cpu).is_some();
            if now != self.layout.is_online(cpu) {
                self.layout.set_online(cpu, now);
                changed.insert(cpu);
            }
        }
        Ok(changed)
    }

    /// Pins the calling thread to `cpu` on the live machine. A synthetic or
    /// XML model plans (its LLCs decide the rule) but threads still run
    /// here: the thread is pinned to the CPU of the same number on this
    /// machine, and a CPU this machine lacks is an error (the caller runs
    /// the thread unpinned and says so).
    pub fn pin_current_thread(&self, cpu: CpuId) -> Result<(), Error> {
        self.check_cpu(cpu)?;
        thread::pin_current(cpu)?;
        Ok(())
    }

    fn check_cpu(&self, cpu: CpuId) -> Result<(), Error> {
        if self.layout.is_valid(cpu) {
            Ok(())
        } else {
            Err(Error::UnknownCpu {
                cpu,
                max: self.nr_cpus().saturating_sub(1),
            })
        }
    }
}
