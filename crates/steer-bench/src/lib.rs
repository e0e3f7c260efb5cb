//! steer-bench: a load generator and checker that drives UDP echo servers
//! over a veth pair it builds itself, and reports capacity, CPU per reply
//! and latency for steer's echo server against the kernel (a
//! recvmmsg/sendmmsg echo and `sockperf server`, both with RPS/RFS), the raw
//! AF_XDP turnaround and an XDP_TX reflector (the floor). Also the sockperf
//! comparison (`steer-bench compare-kernel`) with its report parser, and the
//! seed reproductions (`steer-bench seed ...`).
//!
//! See benches/README.md for the method.
//!
//! Where things are: the command line is `main.rs` (its values parsed in
//! [`args`]); a run is [`bench`](mod@bench) driving [`gen`] against [`servers`] and
//! summed up by [`report`]; numbers are formatted by [`num`] and tables
//! drawn by [`table`] for every command; child processes are [`procs`],
//! syscalls [`sys`]; each seed reproduction is one module of [`seeds`],
//! named by what it measures.

#![deny(unsafe_code)]

/// The XDP_TX-free AF_XDP turnaround server (`afxdp-echo`).
pub mod afxdp_echo;
/// The command line's values: rates, CPU lists, settings.
pub mod args;
/// One benchmark run: its settings and their checks, test bed, generator
/// thread, servers in turn.
pub mod bench;
/// The sockperf comparison (`steer-bench compare-kernel`).
pub mod compare_kernel;
/// /proc/stat and per-thread CPU.
pub mod cpustat;
/// Per-flow checking.
pub mod flows;
/// Latency against CPU: every idle policy (`steer-bench frontier`).
pub mod frontier;
/// The AF_XDP generator and checker.
pub mod gen;
/// Whether a phase held its rate, retries, and what was saturated.
pub mod hold;
/// A proxy in front of a spray of new flows (`steer-bench hostile`).
pub mod hostile;
/// The kernel socket echo (`kernel-echo`).
pub mod kernel_echo;
/// Threaded NAPI pinned to the receiver's CPUs (`--rx-on receiver`).
pub mod napi;
/// Namespace, veth pair, RPS/RFS settings.
pub mod netns;
/// Numbers as the reports print and store them: medians, ratios, fixed
/// decimals, JSON numbers.
pub mod num;
/// Pacing: the token bucket, burst and tick, weighted flows' shares.
pub mod pacing;
/// Request and reply frames.
pub mod payload;
/// Child processes: spawned into a log, pid, CPU time, stopped on drop.
pub mod procs;
/// From phase results to the report: medians, own cost, ratios, the
/// tables, JSON.
pub mod report;
/// The scheduling slice of another process's threads.
pub mod sched_slice;
/// The seed reproductions (`steer-bench seed ...`).
pub mod seeds;
/// The servers under test.
pub mod servers;
/// sockperf report parsing and the compare-kernel report.
pub mod sockperf;
/// Where the kernel processed received packets, per CPU
/// (/proc/net/softnet_stat), split by the CPU a reader was on.
pub mod softnet;
/// Whether the runs agree: each headline number's spread across runs.
pub mod spread;
/// The syscalls (clock, sleeps, pinning, lock, namespaces, signals).
pub mod sys;
/// Fixed-width text tables and Markdown tables: the one renderer.
pub mod table;
/// `steer rfs` beside an unmodified iperf3 whose reader moves.
pub mod transparent;
/// The XDP programs of this crate.
pub mod xdp;
