//! A `steer echo` running as a child process on a test net, as an operator
//! would run it, and the `steer` command pointed at it.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Child, Command, Output};

use super::support::PORT;
use steer_testbed::{Spawned, TestNet};

/// A child process that is killed and reaped when dropped unfinished: a
/// test whose assertion fails first leaves no orphan holding its output
/// open and its veth's XDP program in place.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A `steer echo` child: steer-testbed's [`Spawned`] (stdout line by
/// line, stderr as its log, killed and reaped on drop) and what the echo
/// prints.
pub struct Echo(pub Spawned);

impl Echo {
    /// Starts `steer echo` on the host end of `net` (UDP [`PORT`]) with
    /// `extra` flags, and waits until it says it is ready (its stats
    /// socket, when it has one, exists by then).
    pub fn start(net: &TestNet, extra: &[&str]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_steer"));
        cmd.arg("echo")
            .args(["--interface", &net.host, "--port", &PORT.to_string()])
            .args(["--no-table", "--frames", "4096", "--xsk-ring-size", "512"])
            .args(extra);
        let echo = Echo(Spawned::start("steer echo", cmd));
        echo.expect("ready");
        echo
    }

    /// The metrics address it printed (after [`Echo::start`] with `--metrics`).
    pub fn metrics_addr(&self) -> SocketAddr {
        let line = self.expect("metrics on http://");
        let url = line.split("http://").nth(1).unwrap();
        url.trim_end_matches("/metrics").parse().unwrap()
    }

    /// SIGINT, and its exit status.
    pub fn stop(self) -> std::process::ExitStatus {
        self.0.stop_with(libc::SIGINT)
    }
}

impl std::ops::Deref for Echo {
    type Target = Spawned;

    fn deref(&self) -> &Spawned {
        &self.0
    }
}

impl std::ops::DerefMut for Echo {
    fn deref_mut(&mut self) -> &mut Spawned {
        &mut self.0
    }
}

/// `steer ARGS`, to add to and run.
pub fn steer_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_steer"));
    cmd.args(args);
    cmd
}

/// Runs `steer ARGS`.
pub fn steer(args: &[&str]) -> Output {
    steer_command(args).output().unwrap()
}

/// Runs `steer ARGS`, which must succeed (else the test fails with its
/// stderr).
pub fn steer_ok(args: &[&str]) -> Output {
    let out = steer(args);
    assert!(
        out.status.success(),
        "steer {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `steer stats IFACE --json`, parsed (the command must succeed).
pub fn stats_json(interface: &str) -> serde_json::Value {
    serde_json::from_slice(&steer_ok(&["stats", interface, "--json"]).stdout).unwrap()
}

/// `steer ARGS` run as user nobody without capabilities (setpriv), with
/// `groups` (setpriv syntax; empty: none) as its supplementary groups.
pub fn steer_as_nobody(args: &[&str], groups: &str) -> Output {
    let groups = if groups.is_empty() {
        "--clear-groups".to_owned()
    } else {
        format!("--groups={groups}")
    };
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", &groups, "--inh-caps=-all"])
        .arg(env!("CARGO_BIN_EXE_steer"))
        .args(args)
        .output()
        .unwrap()
}

/// The JSON report a command wrote to `path`, parsed; the file is removed.
pub fn take_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let _ = std::fs::remove_file(path);
    serde_json::from_str(&text).unwrap()
}

/// The one error line of a failed `steer <command>`.
pub fn one_line_error(command: &str, out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let prefix = format!("steer {command}:");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    lines[0].to_owned()
}
