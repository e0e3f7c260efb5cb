//! steer-engine: steer's runtime on an AF_XDP port, and what applications
//! build on it.
//!
//! - [`engine`]: the [`Engine`](engine::Engine) and its builder: the XDP
//!   program, the UMEM and one socket per rx queue (steer-xdp), pinned workers
//!   running steer-core's dispatchers and rings, the application's packet
//!   handler, counters, stop with a frame census.
//! - [`flows`]: flow delivery for proxies, an application built on the
//!   engine: each UDP flow handed to tokio or mio as a `Flow`, its reads
//!   recording the reader's CPU (RFS).
//! - [`echo`]: the L4 UDP echo (a reply rewritten in place), sockperf's rule.
//! - [`sleep`]: the workers' sleeper (mio: doorbell and socket readiness).
//! - `tasks`: the application's tasks on the workers' own threads (a tokio
//!   current_thread runtime per worker, which is also its sleeper), for
//!   flow delivery without a thread hop.
//! - [`probe`]: the live CPU probe recorders use (current and allowed CPUs).
//! - [`trace`]: recording the trace `steer replay` reads (packet arrivals and
//!   consumption), off the hot path.
//! - [`observe`]: a running engine seen from outside: the stats socket
//!   (`/run/steer/<interface>.sock`, read by `steer stats` and `steer
//!   top`) and Prometheus metrics on `/metrics`.
//!
//! The layering, bottom up: `tasks` and `observe` (the published
//! snapshot's format, live control and its two servers) below `engine`,
//! `engine` below `flows`; nothing below imports anything above. Where
//! UMEM frames live between the sockets (the spare pool, the rx source,
//! the frame pool, the transmit path) is steer-xdp's [`frames`] module,
//! which owns the whole frame-ownership argument; this crate has no code
//! the compiler cannot check (the attribute below forbids it).
//!
//! [`frames`]: steer_xdp::frames

#![forbid(unsafe_code)]

pub mod echo;
pub mod engine;
pub mod flows;
pub mod observe;
pub mod probe;
pub mod sleep;
mod tasks;
pub mod trace;
