//! Logging for every subcommand: `tracing` to stderr, filtered by
//! `RUST_LOG` (default: warnings), so stdout stays the command's output.

use tracing_subscriber::EnvFilter;

/// Installs the subscriber once, at start.
pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
}
