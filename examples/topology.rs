//! Prints the topology steer sees as one JSON object:
//! `{"source": "...", "cpus": [...], "llcs": [[...], ...], "numa": [[...], ...]}`.
//!
//! ```text
//! cargo run --example topology                                   # live (hwloc, sysfs fallback)
//! cargo run --example topology -- --synthetic "pack:2 l3:16 core:8 pu:1"
//! cargo run --example topology -- --xml machine.xml              # from `lstopo --of xml`
//! cargo run --example topology -- --sysfs /                      # force the sysfs reader
//! ```
//! Bad input exits with status 1 and a one-line error naming the problem.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use steer::topology::Topology;

/// Print the CPU/LLC/NUMA topology steer uses, as JSON.
#[derive(Parser)]
#[command(group = clap::ArgGroup::new("input").multiple(false))]
struct Args {
    /// An hwloc synthetic description, e.g. "pack:2 l3:16 core:8 pu:1".
    #[arg(long, group = "input")]
    synthetic: Option<String>,
    /// An hwloc XML export (`lstopo --of xml FILE`).
    #[arg(long, group = "input")]
    xml: Option<PathBuf>,
    /// Read the live machine from sysfs under this root instead of hwloc.
    #[arg(long, group = "input")]
    sysfs: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let topo = match (&args.synthetic, &args.xml, &args.sysfs) {
        (Some(spec), _, _) => Topology::synthetic(spec),
        (_, Some(path), _) => Topology::from_xml_file(path),
        (_, _, Some(root)) => Topology::from_sysfs(root),
        _ => Topology::live(),
    };
    let topo = match topo {
        Ok(t) => t,
        Err(e) => {
            eprintln!("topology: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = steer::report::topology_json(&topo);
    println!("{report}");
    ExitCode::SUCCESS
}
