//! steer-replay: the inputs of `steer replay`, read from untrusted files
//! without a panic, as pure code with no engine and no simulation.
//!
//! Modules, lowest first:
//!
//! - [`link`]: a frame of a capture's link layer (Ethernet, raw IP, Linux
//!   cooked SLL/SLL2, BSD loopback) as the Ethernet frame steer-core's
//!   parser reads.
//! - [`capture`]: pcap and pcapng captures, streamed, as frames with their
//!   link type and absolute time.
//! - [`packets`]: a capture's frames as the replay's packet arrivals: each
//!   frame's flow key at its time since the first frame, never going
//!   backwards, counted by what was skipped.
//! - [`trace`]: the text trace `steer replay` reads and `--record-trace`
//!   writes: one event per line, parsed and printed back.
//!
//! The replay driver (the simulation that takes these events, in
//! steer-cli) decides nothing here: this crate only reads and prints.
//!
//! Invariants, for any input (the fuzz targets `pcap` and `trace` check
//! them):
//! - No input panics a reader or makes it allocate without bound (a
//!   capture block is at most [`capture::MAX_BLOCK`] bytes; a trace's
//!   counts are bounded).
//! - A capture frame is never longer than its stated capture length, and
//!   the frames together never hold more bytes than the input.
//! - An event that parses prints back to a line that parses to the same
//!   event.
//! - Every error is one line.

#![forbid(unsafe_code)]

pub mod capture;
pub mod link;
pub mod packets;
pub mod trace;
