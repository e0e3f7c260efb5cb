//! `steer`: one command for steer's tools.
//!
//! - `steer demo`: steering made visible (flows steered, moved, kept);
//! - `steer echo`: the L4 UDP echo server on an AF_XDP port;
//! - `steer proxy`: a UDP forwarder handing each flow to a tokio task;
//! - `steer tcp-echo`: a tokio TCP echo on kernel sockets, steered by steer's
//!   flow table through XDP RFS (or not, to compare);
//! - `steer tcp-load`: TCP echo clients, for the above;
//! - `steer replay`: how many steering updates a rule makes on a trace or a
//!   capture;
//! - `steer balance-sim`: worker load under hash placement and under the
//!   load balancer, modelled on a workload;
//! - `steer plot`: SVG pictures of steer-bench's and seed 000's results;
//! - `steer topology`: the CPU/LLC/NUMA topology steer sees;
//! - `steer stats`: the counters of a running engine, once (table or JSON);
//! - `steer top`: the same, refreshed in the terminal;
//! - `steer completions`: shell completions.
//!
//! Errors are one line on stderr, `steer <command>: ...`, and a non-zero exit.

mod args;
mod balance_sim;
mod config_file;
mod ctl;
mod demo;
mod echo;
mod kernel_args;
mod least_privilege;
mod logging;
mod plot;
mod proxy;
mod replay;
mod rfs;
mod rfs_live;
mod rfs_metrics;
mod rfs_view;
mod stats;
mod tcp_echo;
mod tcp_load;
mod top;
mod topology;
mod view;

use std::process::ExitCode;

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// steer: userspace RPS/RFS on AF_XDP with LLC-aware flow steering.
#[derive(Debug, Parser)]
#[command(
    name = "steer",
    version,
    about,
    after_help = "Examples:\n  \
        steer echo -i eth1 -p 11111 --cpus 1          UDP echo on port 11111, one worker on CPU 1\n  \
        steer proxy -i eth1 -p 7000 --backend 127.0.0.1:11111\n  \
        steer tcp-echo -i eth1 -p 7000                 TCP echo, kernel sockets steered to their reader's CPU\n  \
        steer replay --policy llc trace.txt           steering updates the LLC rule would make\n  \
        steer balance-sim --workers 2,8,64 --zipf 1.1 --table   hash placement vs the load balancer\n  \
        steer topology --synthetic \"pack:2 l3:16 core:8 pu:1\"\n  \
        steer stats eth1                              counters of the engine running on eth1\n  \
        steer top eth1                                the same, refreshed per CPU (q quits)\n\n\
        Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=steer_engine=info) for more."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show steering on a veth pair: flows steered to their consumers' CPUs,
    /// moved when the consumers move, kept by the LLC rule (scripts/demo.sh).
    Demo(demo::DemoArgs),
    /// UDP echo over AF_XDP with steer's flow steering.
    Echo(echo::EchoArgs),
    /// UDP forwarder over AF_XDP: each flow to a tokio task and a backend.
    Proxy(proxy::ProxyArgs),
    /// TCP echo on kernel sockets, steered to the CPU that reads each
    /// connection (XDP RFS through a cpumap), or not (`--steer none`).
    TcpEcho(tcp_echo::TcpEchoArgs),
    /// LLC-aware RFS for unmodified applications: their TCP connections on
    /// the given ports are steered to the CPU that reads them, recorded in
    /// the kernel (XDP RFS through a cpumap).
    Rfs(rfs::RfsArgs),
    /// TCP echo clients: many connections, messages per second as JSON.
    TcpLoad(tcp_load::TcpLoadArgs),
    /// Replay a trace or a pcap capture through steer's steering decision;
    /// print the steering updates each rule makes, as JSON.
    Replay(replay::ReplayArgs),
    /// Model worker load under hash placement (RPS) and under the load
    /// balancer on a workload; print max/mean load, moves and queueing
    /// delay, as JSON.
    BalanceSim(balance_sim::BalanceSimArgs),
    /// Print the CPU/LLC/NUMA topology steer uses, as JSON.
    Topology(topology::TopologyArgs),
    /// Draw steer-bench's and seed 000's JSON results as SVG.
    Plot(plot::PlotArgs),
    /// Print the counters of the engine (or `steer rfs`) running on an
    /// interface, once.
    Stats(stats::StatsArgs),
    /// Show the counters of the engine (or `steer rfs`) running on an
    /// interface, refreshed per CPU in the terminal.
    Top(top::TopArgs),
    /// Change a running engine: policy, fast path, flow limit, balancer,
    /// pinned flows and ports (root or the engine's user).
    Ctl(ctl::CtlArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Self::Demo(_) => "demo",
            Self::Echo(_) => "echo",
            Self::Proxy(_) => "proxy",
            Self::TcpEcho(_) => "tcp-echo",
            Self::Rfs(_) => "rfs",
            Self::TcpLoad(_) => "tcp-load",
            Self::Replay(_) => "replay",
            Self::BalanceSim(_) => "balance-sim",
            Self::Topology(_) => "topology",
            Self::Plot(_) => "plot",
            Self::Stats(_) => "stats",
            Self::Top(_) => "top",
            Self::Ctl(_) => "ctl",
            Self::Completions { .. } => "completions",
        }
    }
}

fn main() -> ExitCode {
    logging::init();
    // No program this process runs can gain privileges it does not have
    // (setuid bits, file capabilities); every thread inherits this.
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        tracing::warn!(error = %e, "PR_SET_NO_NEW_PRIVS failed");
    }
    let argv: Vec<OsString> = std::env::args_os().collect();
    let command = command();
    let expanded = match config_file::expand(argv.clone(), &command) {
        Ok(expanded) => expanded,
        Err(e) => {
            let sub = argv.get(1).map(|s| s.to_string_lossy().into_owned());
            eprintln!("steer {}: {e}", sub.unwrap_or_default());
            return ExitCode::from(2);
        }
    };
    let parsed = command
        .try_get_matches_from(&expanded.args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return clap_error(e, &expanded, &argv),
    };
    let name = cli.command.name();
    let result = match &cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Echo(a) => echo::run(a),
        Command::Proxy(a) => proxy::run(a).map(|()| ExitCode::SUCCESS),
        Command::TcpEcho(a) => tcp_echo::run(a),
        Command::Rfs(a) => rfs::run(a),
        Command::TcpLoad(a) => tcp_load::run(a).map(|()| ExitCode::SUCCESS),
        Command::Replay(a) => replay::run(a).map(|()| ExitCode::SUCCESS),
        Command::BalanceSim(a) => balance_sim::run(a).map(|()| ExitCode::SUCCESS),
        Command::Topology(a) => topology::run(a).map(|()| ExitCode::SUCCESS),
        Command::Plot(a) => plot::run(a).map(|()| ExitCode::SUCCESS),
        Command::Stats(a) => stats::run(a).map(|()| ExitCode::SUCCESS),
        Command::Top(a) => top::run(a).map(|()| ExitCode::SUCCESS),
        Command::Ctl(a) => ctl::run(a).map(|()| ExitCode::SUCCESS),
        Command::Completions { shell } => {
            clap_complete::generate(*shell, &mut Cli::command(), "steer", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    };
    result.unwrap_or_else(|e| {
        eprintln!("steer {name}: {}", one_line(&e));
        ExitCode::FAILURE
    })
}

/// The command line's definition. A subcommand that reads `--config`
/// lets a later option replace an earlier one, so the command line
/// overrides the file's options spliced in before it.
fn command() -> clap::Command {
    let mut cli = Cli::command();
    let readers: Vec<String> = cli
        .get_subcommands()
        .filter(|c| c.get_arguments().any(|a| a.get_id() == "config"))
        .map(|c| c.get_name().to_owned())
        .collect();
    for name in readers {
        cli = cli.mut_subcommand(name, |c| c.args_override_self(true));
    }
    cli
}

/// An error and its causes on one line, each cause once: a cause whose text
/// the line already holds (an error that prints its source) is skipped.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Prints help and version as clap does; a usage error as one line that
/// says what was wrong and where to look (clap's own is four).
fn clap_error(e: clap::Error, expanded: &config_file::Expanded, argv: &[OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
    }
    let text = e.render().to_string();
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let sub = std::env::args()
        .nth(1)
        .filter(|a| Cli::command().find_subcommand(a).is_some());
    let file = config_file::blame(first, expanded, argv);
    match (sub, file) {
        (Some(sub), Some(file)) => {
            eprintln!("steer {sub}: {first} (set in {})", file.display())
        }
        (Some(sub), None) => eprintln!("steer {sub}: {first} (see steer {sub} --help)"),
        (None, _) => eprintln!("steer: {first} (see steer --help)"),
    }
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_on_one_line_each_cause_once() {
        // An error that prints its source, as `#[error("{0}")]` with
        // `#[from]` does.
        #[derive(Debug)]
        struct Inner;
        impl std::fmt::Display for Inner {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("ring capacity 0 must be a power of two")
            }
        }
        impl std::error::Error for Inner {}
        #[derive(Debug)]
        struct Outer(Inner);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Outer(Inner)).context("starting\nthe engine");
        assert_eq!(
            one_line(&e),
            "starting the engine: ring capacity 0 must be a power of two"
        );
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
