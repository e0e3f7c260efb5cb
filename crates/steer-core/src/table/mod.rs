//! The two RFS flow tables.
//!
//! - [`desired`]: the desired-CPU table (the kernel's `rps_sock_flow_table`),
//!   one per process, written by application threads when they consume a
//!   flow (`record`), read by every dispatcher (`lookup`). One atomic `u32`
//!   per entry; lock-free; only a hint.
//! - [`rx`]: the per-rx-queue flow table (the kernel's `rps_dev_flow_table`),
//!   one per rx queue, owned by that queue's dispatcher. It remembers which
//!   CPU currently serves each flow and how far that CPU's queue had got when
//!   the flow's last packet was queued, so a flow follows its consumer to a
//!   new CPU only once that cannot reorder it.
//!
//! The update rule `record` applies lives in [`crate::policy`]; the hook
//! called when an rx-queue entry moves a flow lives in [`crate::hook`].

pub mod desired;
pub mod rx;

pub use desired::{DesiredCpuTable, RecordError, RecordStats, SlotCodec, TableError, MAX_ENTRIES};
pub use rx::{
    QueueHeads, RxFlowCounters, RxFlowStats, RxFlowTable, SteerAction, Steered, SweepReport, Tick,
};
