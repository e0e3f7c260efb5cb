//! One network namespace owned by its [`Netns`] value: made by
//! [`Netns::new`], removed (with any process still running in it) by
//! `Drop`. Threads enter it with `setns`, which moves only the calling
//! thread; [`Netns::in_ns`] and [`Netns::spawn_in`] use a thread of their
//! own so the test's thread stays where it was.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};

use crate::cmd::{self, Error, Result};

/// A network namespace, removed when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Makes namespace `name` (removing a leftover of that name first),
    /// with its loopback up.
    pub fn create(name: &str) -> Result<Self> {
        cmd::ip_quiet(&["netns", "del", name]);
        cmd::ip(&["netns", "add", name])?;
        let ns = Netns {
            name: name.to_owned(),
        };
        cmd::ip(&["-n", name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// [`Netns::create`] of `prefix` and a unique tag ([`crate::names`]);
    /// fails the test on error.
    pub fn new(prefix: &str) -> Self {
        Self::create(&format!("{prefix}{}", crate::names::tag())).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Its name (as `ip netns` knows it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Moves the calling thread into namespace `ns` for good.
    pub fn enter(ns: &str) -> Result<()> {
        let path = format!("/run/netns/{ns}");
        let err = |message: String| Error {
            command: format!("setns {path}"),
            message,
        };
        let file = File::open(&path).map_err(|e| err(e.to_string()))?;
        // SAFETY: `file` is an open namespace file; setns switches only the
        // calling thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(err(std::io::Error::last_os_error().to_string()));
        }
        Ok(())
    }

    /// Runs `f` on a new thread inside namespace `ns`; fails the test
    /// (on that thread) if it cannot enter.
    pub fn spawn_in<R: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> std::thread::JoinHandle<R> {
        let ns = ns.to_owned();
        std::thread::spawn(move || {
            Self::enter(&ns).unwrap_or_else(|e| panic!("{e}"));
            f()
        })
    }

    /// Runs `f` on a scoped thread inside namespace `ns` and waits for it;
    /// a panic there is resumed here.
    pub fn in_ns<R: Send>(ns: &str, f: impl FnOnce() -> R + Send) -> R {
        std::thread::scope(|s| {
            s.spawn(|| {
                Self::enter(ns).unwrap_or_else(|e| panic!("{e}"));
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// `program` to run inside namespace `ns` (`ip netns exec`).
    pub fn command(ns: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]);
        c
    }

    /// `program` to run inside namespace `ns` pinned to `cpu` (`ip netns
    /// exec NS taskset -c CPU PROGRAM`: every thread it starts stays there
    /// unless moved).
    pub fn command_on_cpu(ns: &str, cpu: usize, program: &str) -> Command {
        let mut c = Self::command(ns, "taskset");
        c.args(["-c", &cpu.to_string(), program]);
        c
    }

    /// Runs `cmd` inside namespace `ns` and returns what it did.
    pub fn exec(ns: &str, cmd: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", ns];
        full.extend_from_slice(cmd);
        cmd::run(&full).unwrap_or_else(|e| panic!("{e}"))
    }

    /// One group of counters (`Tcp:`, `Udp:`, `TcpExt:`, ...) of
    /// /proc/net/`file` (`snmp`, `netstat`) in namespace `ns`.
    pub fn counters(ns: &str, file: &str, group: &str) -> HashMap<String, u64> {
        Self::in_ns(ns, || {
            let text = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")).unwrap();
            parse_counters(&text, group)
        })
    }
}

/// The counters of `group` in /proc/net/snmp-style text (a names line and
/// a values line, both starting with `group`); empty when absent.
pub fn parse_counters(text: &str, group: &str) -> HashMap<String, u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(group));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return HashMap::new();
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .skip(1)
        .map(|(n, v)| (n.to_owned(), v.parse().unwrap_or(0)))
        .collect()
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Processes still inside keep no device of ours alive, but would
        // outlive the test: end them first.
        if let Ok(pids) = cmd::ip(&["netns", "pids", &self.name]) {
            for pid in pids
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
            {
                if pid == std::process::id() {
                    continue;
                }
                // SAFETY: kill(2) with a pid and a signal number has no
                // memory preconditions.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        }
        cmd::ip_quiet(&["netns", "del", &self.name]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse_a_group() {
        let text = "Tcp: A B\nTcp: 1 x\nUdp: C\nUdp: 3\n";
        let tcp = parse_counters(text, "Tcp:");
        assert_eq!((tcp["A"], tcp["B"]), (1, 0));
        assert_eq!(parse_counters(text, "Udp:")["C"], 3);
        assert!(parse_counters(text, "Ip:").is_empty());
    }
}
