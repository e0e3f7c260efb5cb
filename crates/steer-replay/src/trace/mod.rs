//! The text trace `steer replay` reads and `--record-trace` writes: one
//! event per line, `#` starts a comment.
//!
//! ```text
//! topology pack:2 l3:16 core:8 pu:1   # the machine: hwloc synthetic spec ...
//! llcs 0-3 4-7                        # ... or its LLCs, one CPU list each
//! table 4096                          # desired-table slots, before any c or p
//! engine workers=0-7 queues=8 rps=local fast_path=on rx_table=4096 ring=1024
//! p 0x9e3779b9 2 t=1500               # a packet of that flow on rx queue 2
//! c 0x9e3779b9 3 t=2100               # a thread on CPU 3 consumed the flow
//! c udp/10.0.0.1:5000/10.0.0.2:53 17 allowed=16-31
//! off 3 t=9000                        # CPU 3 goes offline
//! on 3                                # ... and comes back
//! ```
//!
//! A flow is a non-zero u32 hash (decimal or 0x hex) or a 5-tuple
//! `proto/src:port/dst:port` (IPv6 addresses in brackets), hashed by the
//! replay. `t=` is the event's time in ns (the previous event's when
//! absent, 0 at the start); times never go backwards. Today's traces
//! (`topology`, `table`, `c`, `off`, `on` without times) read as before.
//!
//! [`parse_line`] reads one line (the `parse` submodule); an [`Event`]'s
//! `Display` prints it as one (the `print` submodule), the way the
//! engine's recorder writes it: hashes in 0x hex, options `allowed=` then
//! `t=`.
//!
//! Invariants, for any line:
//! - Parsing never panics, and what it accepts is bounded: the counts an
//!   `engine` line gives are at most [`MAX_QUEUES`], [`MAX_RX_TABLE`] and
//!   [`MAX_RING`], so a trace cannot make the replay allocate without
//!   bound.
//! - An event that parses prints to one line that parses to the same event.
//! - An error is one line of text (quoted input is escaped).

mod parse;
mod print;

use std::fmt;

use steer_core::cpu::{CpuId, CpuSet};
use steer_core::flow::FlowKey;
use steer_core::runtime::RpsMode;

pub use parse::{parse_cpu, parse_hash, parse_line, MAX_QUEUES, MAX_RING, MAX_RX_TABLE};

/// A flow as a trace names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// The flow hash itself (non-zero).
    Hash(u32),
    /// A 5-tuple, hashed by the replay.
    Tuple(FlowKey),
}

/// The engine settings an `engine` line gives (each optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineLine {
    /// `workers=<cpulist>`: the worker CPUs.
    pub workers: Option<CpuSet>,
    /// `queues=<n>`: rx queues, 1 to [`MAX_QUEUES`].
    pub queues: Option<usize>,
    /// `rps=local|spread`.
    pub rps: Option<RpsMode>,
    /// `fast_path=on|off`.
    pub fast_path: Option<bool>,
    /// `rx_table=<n>`: buckets of each rx-queue table, 1 to [`MAX_RX_TABLE`].
    pub rx_table: Option<usize>,
    /// `ring=<n>`: slots of each ring, 1 to [`MAX_RING`].
    pub ring: Option<usize>,
    /// `idle_ms=<n>`: a flow idle this long loses its state.
    pub idle_ms: Option<u32>,
}

/// One trace event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `topology <hwloc synthetic spec>`.
    Topology(String),
    /// `llcs <cpulist>...`: the CPUs behind each LLC.
    Llcs(Vec<CpuSet>),
    /// `table <entries>`.
    Table(usize),
    /// `engine key=value...`.
    Engine(EngineLine),
    /// `c <flow> <cpu> [allowed=<cpulist>] [t=<ns>]`.
    Consume {
        /// The flow consumed.
        flow: Flow,
        /// The CPU of the thread that consumed it.
        cpu: CpuId,
        /// The CPUs that thread may run on (`None`: any).
        allowed: Option<CpuSet>,
        /// When, in ns (`None`: with the event before).
        t: Option<u64>,
    },
    /// `p <flow> <rxq> [t=<ns>]`.
    Packet {
        /// The packet's flow.
        flow: Flow,
        /// The rx queue it arrived on.
        rxq: u32,
        /// When, in ns (`None`: with the event before).
        t: Option<u64>,
    },
    /// `off <cpu> [t=<ns>]`.
    Off(CpuId, Option<u64>),
    /// `on <cpu> [t=<ns>]`.
    On(CpuId, Option<u64>),
}

/// A bad trace line: its 1-based number and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// The line's number, from 1.
    pub line: usize,
    /// What is wrong with it (one line).
    pub reason: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for LineError {}
