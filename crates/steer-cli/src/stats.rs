//! `steer stats <interface>`: the counters of the engine running on an
//! interface, read once from its stats socket (`/run/steer/<interface>.sock`)
//! and printed as tables or as JSON; a `steer rfs` there is shown as such
//! (`rfs_view`). The engine keeps running; nothing is
//! changed. Errors (no engine, permission denied, an engine that is gone)
//! are one line.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use steer_engine::observe::{
    query_any, CpuCounters, LiveStats, ObserveError, StatsReply, DEFAULT_RUN_DIR,
};

use crate::rfs_live::RfsLive;
use crate::view::uptime;

/// Where a running engine is found (shared with `steer top`).
#[derive(Debug, Clone, Args)]
pub struct EngineRef {
    /// The interface the engine serves.
    pub interface: String,
    /// Directory of the engines' stats sockets (as given to the engine's
    /// `--run-dir`).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_RUN_DIR)]
    pub run_dir: PathBuf,
    /// Seconds to wait for the engine's answer.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = crate::args::positive_seconds)]
    pub timeout: f64,
}

/// What serves the interface's stats socket, read once.
#[derive(Debug)]
pub enum Running {
    /// A steer engine (`steer echo`, `steer proxy`, ...).
    Engine(Box<LiveStats>),
    /// `steer rfs`: its snapshot, parsed and as sent.
    Rfs {
        live: Box<RfsLive>,
        json: serde_json::Value,
    },
}

impl EngineRef {
    fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout.clamp(0.001, 3600.0))
    }

    /// What runs on the interface now, an engine or `steer rfs`, and its
    /// counters. When nobody answers, the error also says what the
    /// interface's XDP hook holds ([`program_note`]).
    pub fn read_any(&self) -> anyhow::Result<Running> {
        match query_any(&self.run_dir, &self.interface, self.timeout())
            .map_err(|e| self.explain(e))?
        {
            StatsReply::Engine(live) => Ok(Running::Engine(live)),
            StatsReply::Other { kind, snapshot } if kind == crate::rfs_live::KIND => {
                Ok(Running::Rfs {
                    live: Box::new(RfsLive::from_json(snapshot.clone())?),
                    json: snapshot,
                })
            }
            StatsReply::Other { kind, .. } => anyhow::bail!(
                "{} is served by `steer {kind}`, which this steer cannot read: use the steer \
                 that started it",
                self.interface
            ),
        }
    }

    /// `e`, with what the interface's XDP hook holds when nobody answers.
    fn explain(&self, e: ObserveError) -> anyhow::Error {
        match &e {
            ObserveError::NoEngine { .. } | ObserveError::Stale { .. } => {
                match program_note(&self.interface) {
                    Some(note) => anyhow::anyhow!("{e}; {note}"),
                    None => e.into(),
                }
            }
            _ => e.into(),
        }
    }
}

/// What the steer XDP program attached to `interface` (in this network
/// namespace) says about its owner, when no engine answers on the stats
/// socket: left by an engine that is gone (stale), or an engine that runs
/// without a socket there. `None` when no steer program is attached or it
/// cannot be read (not root).
pub fn program_note(interface: &str) -> Option<String> {
    let ifindex = steer_xdp::ifindex(interface).ok()?;
    let p = steer_xdp::attached_programs(ifindex)
        .into_iter()
        .find(|p| p.is_steer())?;
    Some(match p.owner {
        Some(o) if o.is_alive() => format!(
            "a steer engine (pid {}) runs on {interface}, its XDP program id {}, without a stats \
             socket there (started with --no-stats-socket, or another --run-dir)",
            o.pid, p.id
        ),
        Some(o) => format!(
            "its XDP program (id {}) is stale: still attached, owner pid {} is gone; the next \
             engine on {interface} replaces it, or remove it with `ip link set dev {interface} xdp off`",
            p.id, o.pid
        ),
        None => format!(
            "a steer XDP program (id {}) without an owner record is attached to {interface}; \
             remove it with `ip link set dev {interface} xdp off`",
            p.id
        ),
    })
}

/// `steer stats` arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    steer stats eth1                 per-CPU and per-queue counters of the engine on eth1\n  \
    steer stats eth1 --json | jq .per_cpu\n  \
    steer stats eth1                 where a `steer rfs` on eth1 lands frames, its updates")]
pub struct StatsArgs {
    #[command(flatten)]
    pub engine: EngineRef,
    /// Print the counters as JSON (the stats socket's own format).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &StatsArgs) -> anyhow::Result<()> {
    match args.engine.read_any()? {
        Running::Engine(live) if args.json => {
            println!("{}", serde_json::to_string_pretty(&live)?)
        }
        Running::Engine(live) => print!("{}", report(&live)),
        Running::Rfs { json, .. } if args.json => {
            println!("{}", serde_json::to_string_pretty(&json)?)
        }
        Running::Rfs { live, .. } => print!("{}", crate::rfs_view::report(&live)),
    }
    Ok(())
}

/// A per-CPU column: header and value.
type Column = (&'static str, fn(&CpuCounters) -> u64);

/// The per-CPU row's columns.
const CPU_COLUMNS: &[Column] = &[
    ("rx", |r| r.core.rx),
    ("processed", |r| r.core.processed),
    ("tx", |r| r.tx),
    ("fast", |r| r.core.fast_path),
    ("st_in", |r| r.core.steered_in),
    ("st_out", |r| r.core.steered_out),
    ("ring_drop", |r| r.core.dropped),
    ("flow_lim", |r| r.core.flow_limit_drops),
    ("other_drop", |r| {
        r.core.malformed + r.tx_dropped + r.app_dropped
    }),
    ("updates", |r| r.core.hook_calls),
    ("squeeze", |r| r.core.time_squeeze),
];

/// The whole report: the engine, per-CPU table, steering, sockets, frames.
pub fn report(live: &LiveStats) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", headline(live));
    let _ = write!(out, "{:>5}", "cpu");
    for (name, _) in CPU_COLUMNS {
        let _ = write!(out, " {name:>10}");
    }
    out.push('\n');
    let total = live.total();
    let rows = live
        .per_cpu
        .iter()
        .map(|r| (r.cpu.to_string(), r))
        .chain(std::iter::once(("all".to_string(), &total)));
    for (label, r) in rows {
        let _ = write!(out, "{label:>5}");
        for (_, value) in CPU_COLUMNS {
            let _ = write!(out, " {:>10}", value(r));
        }
        out.push('\n');
    }
    let _ = writeln!(out, "\n{}", steering_line(live));
    if let Some(line) = balancer_line(live) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(line) = flows_line(live) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(line) = slow_path_line(live) {
        let _ = writeln!(out, "{line}");
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "{:>5} {:>10} {:>10} {:>10} {:>12} {:>10} {:>13} {:>10} {:>10}",
        "queue",
        "rx_packets",
        "tx_packets",
        "rx_dropped",
        "rx_ring_full",
        "fill_empty",
        "tx_ring_empty",
        "rx_invalid",
        "tx_invalid"
    );
    for s in &live.sockets {
        let _ = writeln!(
            out,
            "{:>5} {:>10} {:>10} {:>10} {:>12} {:>10} {:>13} {:>10} {:>10}",
            s.queue,
            s.rx_packets,
            s.tx_packets,
            s.rx_dropped,
            s.rx_ring_full,
            s.rx_fill_ring_empty_descs,
            s.tx_ring_empty_descs,
            s.rx_invalid_descs,
            s.tx_invalid_descs,
        );
    }
    let _ = writeln!(out, "\n{}", frames_line(live));
    out
}

/// One line about the engine itself.
pub fn headline(live: &LiveStats) -> String {
    let mut line = format!(
        "steer on {} (pid {}), up {}, policy {}, fast path {}, xdp {}, bind {}",
        live.interface,
        live.pid,
        uptime(live.uptime_s),
        live.policy,
        if live.fast_path { "on" } else { "off" },
        live.xdp_mode,
        live.bind_mode,
    );
    if let Some(down) = workers_down(live) {
        line.push_str(" | ");
        line.push_str(&down);
    }
    if let Some(restarted) = workers_restarted(live) {
        line.push_str(" | ");
        line.push_str(&restarted);
    }
    line
}

/// The running workers that were restarted after a panic, if any.
pub fn workers_restarted(live: &LiveStats) -> Option<String> {
    let restarted: Vec<String> = live
        .workers
        .iter()
        .filter(|w| w.up && w.restarts > 0)
        .map(|w| match &w.panic {
            Some(p) => format!("cpu{} x{} (last: {p})", w.cpu, w.restarts),
            None => format!("cpu{} x{}", w.cpu, w.restarts),
        })
        .collect();
    if restarted.is_empty() {
        return None;
    }
    Some(format!("restarted {}", restarted.join(", ")))
}

/// The workers that died, if any (`None`: every worker runs).
pub fn workers_down(live: &LiveStats) -> Option<String> {
    let down: Vec<String> = live
        .workers
        .iter()
        .filter(|w| !w.up)
        .map(|w| match &w.panic {
            Some(p) => format!("cpu{} ({p})", w.cpu),
            None => format!("cpu{}", w.cpu),
        })
        .collect();
    if down.is_empty() {
        return None;
    }
    Some(format!(
        "WORKERS DOWN {} of {}: {}",
        down.len(),
        live.workers.len(),
        down.join(", "),
    ))
}

/// Desired-table writes by reason and the suppressed changes.
pub fn steering_line(live: &LiveStats) -> String {
    let reasons: Vec<String> = live
        .desired
        .updates
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    format!(
        "steering: {} updates (flow moves that called the hook); desired-CPU table: {} writes{}, {} suppressed",
        live.steering_updates(),
        live.desired.total_updates(),
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join(", "))
        },
        live.desired.suppressed,
    )
}

/// The load balancer's counters, when it is on or has moved something.
pub fn balancer_line(live: &LiveStats) -> Option<String> {
    let b = &live.balance;
    (b.on || b.moves() > 0).then(|| {
        format!(
            "balancer {}: {} moves (same LLC {}, cross LLC {}), {} released, {} elephants, {} rounds",
            if b.on { "on" } else { "off" },
            b.moves(),
            b.moves_same_llc,
            b.moves_cross_llc,
            b.released,
            b.elephants,
            b.rounds,
        )
    })
}

/// Flow delivery's budget, when the engine delivers flows: open of the
/// most, and what was refused and evicted to stay within it.
pub fn flows_line(live: &LiveStats) -> Option<String> {
    let f = live.flows.as_ref()?;
    Some(format!(
        "flows: {} open of {}, {} accepted; refused {} (XDP gate {}, budget {}, rate limit {}, overload {}, backlog {}); gate {} ({} retries let through, closed {} times); evicted {} (unassured {}, idle {}); backend errors {}",
        f.open,
        f.max_flows,
        f.accepted,
        f.gate_dropped + f.refused + f.rate_limited + f.overload + f.accept_drops,
        f.gate_dropped,
        f.refused,
        f.rate_limited,
        f.overload,
        f.accept_drops,
        if f.gate_closed { "closed" } else { "open" },
        f.gate_retries,
        f.gate_closings,
        f.evicted(),
        f.evicted_unassured,
        f.evicted_idle,
        f.backend_errors,
    ))
}

/// The slow path (fragmented datagrams the kernel reassembled, answered
/// through the engine's kernel sockets), when it has sockets or a port it
/// could not bind.
pub fn slow_path_line(live: &LiveStats) -> Option<String> {
    let s = &live.slow_path;
    if s.sockets == 0 && s.bind_failed == 0 {
        return None;
    }
    let mut line = format!(
        "slow path (reassembled datagrams): {} received ({} B), {} answered ({} B), {} consumed, \
         {} refused; dropped: too large {}, queue full {}, send failed {}, left at stop {}; sockets {}",
        s.received,
        s.received_bytes,
        s.answered,
        s.answered_bytes,
        s.consumed,
        s.refused,
        s.too_large,
        s.queue_full,
        s.send_failed,
        s.left_at_stop,
        s.sockets,
    );
    if s.bind_failed > 0 {
        line.push_str(&format!(
            " ({} NOT BOUND: port taken, fragments not answered)",
            s.bind_failed
        ));
    }
    Some(line)
}

/// Where the UMEM frames are.
pub fn frames_line(live: &LiveStats) -> String {
    let f = &live.frames;
    let places: Vec<String> = f
        .places()
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    format!(
        "UMEM frames: {} in use of {} ({})",
        f.in_use(),
        f.total,
        places.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use steer_engine::observe::SocketCounters;

    use super::*;

    #[test]
    fn dead_workers_show_in_the_headline() {
        let mut live = LiveStats::empty("eth9");
        live.workers = vec![
            steer_engine::observe::WorkerStatus {
                cpu: 0,
                up: true,
                panic: None,
                restarts: 0,
            },
            steer_engine::observe::WorkerStatus {
                cpu: 1,
                up: false,
                panic: Some("boom".into()),
                restarts: 5,
            },
        ];
        assert!(
            headline(&live).ends_with("| WORKERS DOWN 1 of 2: cpu1 (boom)"),
            "{}",
            headline(&live)
        );
        live.workers[1].up = true;
        assert!(!headline(&live).contains("DOWN"));
        assert!(
            headline(&live).ends_with("| restarted cpu1 x5 (last: boom)"),
            "{}",
            headline(&live)
        );
    }

    #[test]
    fn the_slow_path_shows_once_it_has_sockets_and_says_when_a_port_is_not_bound() {
        let mut live = LiveStats::empty("eth9");
        assert_eq!(slow_path_line(&live), None);
        assert!(!report(&live).contains("slow path"));
        live.slow_path.sockets = 2;
        live.slow_path.received = 3;
        live.slow_path.received_bytes = 9000;
        live.slow_path.answered = 2;
        live.slow_path.queue_full = 1;
        let line = slow_path_line(&live).unwrap();
        assert!(line.contains("3 received (9000 B), 2 answered"), "{line}");
        assert!(line.contains("queue full 1"), "{line}");
        assert!(!line.contains("NOT BOUND"), "{line}");
        assert!(report(&live).contains(&line));
        live.slow_path.bind_failed = 1;
        assert!(slow_path_line(&live).unwrap().contains("1 NOT BOUND"));
    }

    #[test]
    fn the_report_has_every_cpu_the_total_and_the_sockets() {
        let mut live = LiveStats::empty("eth9");
        for cpu in [0, 3] {
            let mut r = CpuCounters {
                cpu,
                tx: 5,
                ..Default::default()
            };
            r.core.rx = 7;
            r.core.hook_calls = 1;
            live.per_cpu.push(r);
        }
        live.sockets.push(SocketCounters {
            queue: 0,
            rx_ring_full: 4,
            ..Default::default()
        });
        live.desired.updates.insert("cross_llc".into(), 2);
        live.desired.suppressed = 6;
        live.frames.total = 10;
        live.frames.free = 10;
        assert!(!report(&live).contains("balancer"));
        live.balance.on = true;
        live.balance.moves_cross_llc = 3;
        let text = report(&live);
        assert!(
            text.contains("balancer on: 3 moves (same LLC 0, cross LLC 3)"),
            "{text}"
        );
        assert!(text.starts_with("steer on eth9 (pid "), "{text}");
        let row = |label: &str| {
            text.lines()
                .find(|l| l.split_whitespace().next() == Some(label))
                .unwrap_or_else(|| panic!("no row {label} in\n{text}"))
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(row("3")[1], "7");
        assert_eq!(row("all")[1], "14");
        assert_eq!(row("all")[3], "10");
        assert!(text.contains("steering: 2 updates"), "{text}");
        assert!(text.contains("(cross_llc 2), 6 suppressed"), "{text}");
        assert!(text.contains("UMEM frames: 0 in use of 10"), "{text}");
        let queue0: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("queue"))
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(queue0[4], "4", "rx_ring_full of queue 0 in\n{text}");
    }
}
