//! Running the tools the test bed is built with (`ip`, `ethtool`): a
//! command's output, or an [`Error`] naming the command and what it said.
//! Owns no state.

use std::fmt;
use std::process::{Command, Output};

/// A command that could not run or failed: the command line and its
/// stderr (or why it did not start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The command line, space separated.
    pub command: String,
    /// What went wrong: its stderr, or the spawn error.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.command, self.message)
    }
}

impl std::error::Error for Error {}

/// This crate's results.
pub type Result<T> = std::result::Result<T, Error>;

/// Runs `cmd[0]` with the rest as arguments, whatever its exit status.
pub fn run(cmd: &[&str]) -> Result<Output> {
    let (program, args) = cmd.split_first().ok_or_else(|| Error {
        command: String::new(),
        message: "empty command".into(),
    })?;
    Command::new(program)
        .args(args)
        .output()
        .map_err(|e| Error {
            command: cmd.join(" "),
            message: format!("{e} (is it installed?)"),
        })
}

/// Runs `cmd`; its stdout when it exits 0, else its stderr as the error.
pub fn check(cmd: &[&str]) -> Result<String> {
    let out = run(cmd)?;
    if !out.status.success() {
        return Err(Error {
            command: cmd.join(" "),
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip ARGS`, as [`check`].
pub fn ip(args: &[&str]) -> Result<String> {
    let mut cmd = vec!["ip"];
    cmd.extend_from_slice(args);
    check(&cmd)
}

/// `ip ARGS`, run only for its effect: a failure is ignored (removing
/// what may already be gone).
pub fn ip_quiet(args: &[&str]) {
    let _ = ip(args);
}

/// [`check`], failing the calling test on error.
pub fn must(cmd: &[&str]) -> String {
    check(cmd).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_name_the_command() {
        let e = check(&["false"]).unwrap_err();
        assert_eq!(e.command, "false");
        let e = check(&["steer-testbed-no-such-program"]).unwrap_err();
        assert!(e.to_string().contains("is it installed"), "{e}");
        assert!(run(&[]).is_err());
        assert_eq!(check(&["echo", "hi"]).unwrap(), "hi\n");
    }
}
