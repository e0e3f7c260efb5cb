//! The least-privilege flags every serving command shares (`--user`,
//! `--group`, `--seccomp`): who the process runs as once set up, and the
//! seccomp allowlist it runs under.
//!
//! Invariants: the user and group are looked up while the flags are turned
//! into a builder, before anything is touched (an unknown name is a
//! one-line error with nothing attached); the switch itself is the
//! library's, at the end of set-up (`EngineBuilder::run_as`,
//! `KernelSteeringBuilder::run_as`); the seccomp filter goes on once the
//! command has finished setting up (its threads, runtimes and endpoints
//! started), for every thread at once.

use clap::{Args, ValueEnum};
use steer_xdp::privileges::seccomp::{self, SeccompMode};
use steer_xdp::privileges::RunAs;

/// `--user`, `--group`, `--seccomp`.
#[derive(Debug, Clone, Args)]
pub struct PrivilegeArgs {
    /// Once set up, run as this user (a name or uid, e.g. `nobody`): every
    /// thread's user and group ids, and only the capabilities still needed.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// With --user: run as this group (a name or gid; default: the user's
    /// primary group), also the only supplementary group.
    #[arg(long, value_name = "GROUP", requires = "user")]
    pub group: Option<String>,
    /// Once set up, every thread may make only the system calls steer uses:
    /// `on` refuses the others with EPERM, `log` lets them through and the
    /// kernel logs them (audit type=1326 in dmesg), `off` applies no filter.
    #[arg(long, value_enum, default_value = "on")]
    pub seccomp: SeccompArg,
}

/// `--seccomp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SeccompArg {
    /// Refuse calls outside the allowlist (EPERM).
    On,
    /// Allow them and log them in the kernel log.
    Log,
    /// No filter.
    Off,
}

impl PrivilegeArgs {
    /// The user and group to run as, looked up now (`None` without
    /// `--user`).
    pub fn run_as(&self) -> anyhow::Result<Option<RunAs>> {
        let Some(user) = &self.user else {
            return Ok(None);
        };
        Ok(Some(
            RunAs::lookup(user, self.group.as_deref())
                .map_err(|e| anyhow::anyhow!("--user/--group: {e}"))?,
        ))
    }

    /// The seccomp mode `--seccomp` names.
    pub fn seccomp_mode(&self) -> SeccompMode {
        match self.seccomp {
            SeccompArg::On => SeccompMode::On,
            SeccompArg::Log => SeccompMode::Log,
            SeccompArg::Off => SeccompMode::Off,
        }
    }

    /// Applies the seccomp allowlist to every thread; call once set up.
    pub fn apply_seccomp(&self) -> anyhow::Result<()> {
        seccomp::apply(self.seccomp_mode())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        privileges: PrivilegeArgs,
    }

    #[test]
    fn seccomp_is_on_by_default_and_a_group_needs_a_user() {
        let cli = Cli::try_parse_from(["t"]).unwrap();
        assert_eq!(cli.privileges.seccomp_mode(), SeccompMode::On);
        assert!(cli.privileges.run_as().unwrap().is_none());
        assert!(Cli::try_parse_from(["t", "--group", "nogroup"]).is_err());
        assert!(Cli::try_parse_from(["t", "--seccomp", "maybe"]).is_err());
        let cli = Cli::try_parse_from(["t", "--user", "root", "--seccomp", "log"]).unwrap();
        assert_eq!(
            cli.privileges.run_as().unwrap(),
            Some(RunAs { uid: 0, gid: 0 })
        );
        assert_eq!(cli.privileges.seccomp_mode(), SeccompMode::Log);
        let cli = Cli::try_parse_from(["t", "--user", "no-such-user-here"]).unwrap();
        let e = cli.privileges.run_as().unwrap_err().to_string();
        assert!(e.starts_with("--user/--group: no user"), "{e}");
    }
}
