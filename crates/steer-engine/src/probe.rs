//! The live [`CpuProbe`](steer_core::record::CpuProbe) for
//! [`Recorder`](steer_core::record::Recorder): the current CPU from
//! `sched_getcpu` (rseq/vDSO) and the allowed set from `sched_getaffinity`.
//! It lives in the topology crate (kernel-socket steering uses it too); this
//! module keeps the engine's path to it.
//!
//! ```
//! use std::sync::Arc;
//! use steer_core::record::Recorder;
//! use steer_core::table::DesiredCpuTable;
//! let topo = steer_topology::Topology::live().unwrap();
//! let table = Arc::new(DesiredCpuTable::new(4096, topo.nr_cpus()).unwrap());
//! let mut rec = Recorder::new(table.clone(), topo.layout(), steer_engine::probe::LiveProbe);
//! rec.record(0xfeed).unwrap();
//! assert!(table.lookup(0xfeed).is_some());
//! ```

pub use steer_topology::thread::LiveProbe;
