//! `steer ctl IF CONTROL...`: one live change to the engine serving an
//! interface, over its stats socket (root or the engine's own user only).
//! The words after the interface form one control line
//! ([`steer_engine::engine::Control`]); a flow is given as one quoted word
//! (`'udp 10.0.0.1:5000 -> 10.0.0.2:53'`: `->` would be a redirection to the
//! shell). What the engine set is printed; a refusal is one line on stderr
//! and a non-zero exit.

use std::time::Duration;

use anyhow::Context;
use steer_engine::engine::Control;
use steer_engine::observe::send_control;

use crate::stats::EngineRef;

/// `steer ctl`'s arguments.
#[derive(Debug, clap::Args)]
#[command(after_help = "CONTROLS:\n  \
    policy llc|always          the desired table's update policy\n  \
    fast-path on|off           the same-CPU fast path\n  \
    flow-limit on|off          the per-CPU flow limit\n  \
    balance on|off             the load balancer\n  \
    pin CPU flow 'FLOW'        steer one flow to a worker CPU, e.g.\n                             \
    pin 1 flow 'udp 10.0.0.1:5000 -> 10.0.0.2:53'\n  \
    unpin flow 'FLOW'          let it follow its consumer again\n  \
    pin CPU port PORT          steer every flow to a local port\n  \
    unpin port PORT")]
pub struct CtlArgs {
    #[command(flatten)]
    pub engine: EngineRef,
    /// The control, as words (see CONTROLS below).
    #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
    pub control: Vec<String>,
}

/// Parses the control before anything is sent, sends it, prints what was
/// set.
pub fn run(args: &CtlArgs) -> anyhow::Result<()> {
    let control: Control = args.control.join(" ").parse()?;
    let done = send_control(
        &args.engine.run_dir,
        &args.engine.interface,
        &control,
        Duration::from_secs_f64(args.engine.timeout.clamp(0.001, 3600.0)),
    )
    .with_context(|| format!("sending `{control}`"))?;
    println!("{}: {done}", args.engine.interface);
    Ok(())
}
