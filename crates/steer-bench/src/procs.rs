//! The processes a run starts (steer's servers, `sockperf`, `iperf3`, `cargo`):
//! started with their output in a log file, optionally pinned and with a
//! stdin pipe for control lines; waited for (`ready` in the log, exit);
//! stopped with SIGINT, then SIGTERM, then SIGKILL; their CPU time read
//! from /proc.
//!
//! Invariant: a `Proc` owns its child. Dropping it (also on error or
//! Ctrl-C) ends a child still running, so no run leaves a process
//! behind.

use std::{
    fs::{self, File},
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

/// A started process.
pub struct Proc {
    /// What it is, for messages.
    pub name: String,
    /// Its stdout and stderr.
    pub log: PathBuf,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
}

/// How to start a [`Proc`].
#[derive(Debug, Default, Clone)]
pub struct Spawn {
    /// Pin the process to these CPUs before it execs.
    pub pin: Option<Vec<usize>>,
    /// Give it a stdin pipe ([`Proc::send_line`]); else /dev/null.
    pub stdin: bool,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub dir: Option<PathBuf>,
}

/// An exit status as the shell reports it: the code, or 128 + the signal.
pub fn status_code(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code()
        .or_else(|| st.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// utime + stime (clock ticks, all threads) from the text of /proc/PID/stat.
/// The command name may hold spaces and parentheses: fields are counted
/// after its last `)`.
pub fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest: state(3) ppid(4) ... utime(14) stime(15).
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The file `cmd` names: itself when it has a `/`, else the first match
/// in `PATH`; `None` when there is no such file.
pub fn find_in_path(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Path::new(cmd).is_file().then(|| PathBuf::from(cmd));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// The first line `cmd arg` prints (stdout, then stderr), empty when it
/// cannot run: a tool's version.
pub fn first_line(cmd: &str, arg: &str) -> String {
    Command::new(cmd)
        .arg(arg)
        .output()
        .ok()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            text.lines().next().unwrap_or_default().to_owned()
        })
        .unwrap_or_default()
}

/// The last `n` lines of `log` other than libbpf's and libxdp's chatter,
/// joined with ` | `.
pub fn tail(log: &Path, n: usize) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("libbpf") && !l.starts_with("libxdp"))
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

impl Proc {
    /// Starts `argv` with stdout and stderr to `log`.
    pub fn spawn(name: &str, argv: &[String], log: &Path, how: &Spawn) -> Result<Self> {
        let Some((prog, args)) = argv.split_first() else {
            bail!("{name}: empty command");
        };
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(prog);
        cmd.args(args).stdout(out).stderr(err);
        cmd.stdin(if how.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.envs(how.env.iter().map(|(k, v)| (k, v)));
        if let Some(d) = &how.dir {
            cmd.current_dir(d);
        }
        if let Some(cpus) = &how.pin {
            crate::sys::pin_child(&mut cmd, cpus);
        }
        // `stop` sends SIGINT: it must not be ignored by inheritance.
        crate::sys::default_stop_signals_in_child(&mut cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("{name}: starting {prog} (is it installed?)"))?;
        let stdin = child.stdin.take();
        Ok(Proc {
            name: name.into(),
            log: log.into(),
            child: Some(child),
            stdin,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Waits until its log has the word `ready`; fails with the log's last
    /// lines when it exits first or `timeout` passes.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let t = Instant::now();
        loop {
            let text = fs::read_to_string(&self.log).unwrap_or_default();
            if text.split_whitespace().any(|w| w == "ready") {
                return Ok(());
            }
            if !self.alive() {
                bail!(
                    "{} exited before it said `ready`: {}",
                    self.name,
                    tail(&self.log, 10)
                );
            }
            if t.elapsed() > timeout {
                bail!(
                    "{} did not say `ready` within {} s: {}",
                    self.name,
                    timeout.as_secs(),
                    tail(&self.log, 10)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Writes one line to its stdin; false when it has none or it is gone.
    pub fn send_line(&mut self, line: &str) -> bool {
        match &mut self.stdin {
            Some(s) => writeln!(s, "{line}").and_then(|()| s.flush()).is_ok(),
            None => false,
        }
    }

    /// Its CPU time so far (utime + stime, clock ticks).
    pub fn cpu_ticks(&self) -> Option<u64> {
        stat_ticks(&fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?)
    }

    /// SIGINT; SIGTERM after `grace`; SIGKILL 2 s later. Its exit status
    /// ([`status_code`]).
    pub fn stop(&mut self, grace: Duration) -> Result<i32> {
        let Some(mut c) = self.child.take() else {
            bail!("{} was already stopped", self.name)
        };
        self.stdin = None;
        let _ = crate::sys::interrupt(c.id());
        if let Some(st) = wait_for(&mut c, grace)? {
            return Ok(status_code(st));
        }
        tracing::warn!(
            "{} ignored SIGINT for {} s: SIGTERM",
            self.name,
            grace.as_secs()
        );
        let _ = crate::sys::terminate(c.id());
        if let Some(st) = wait_for(&mut c, Duration::from_secs(2))? {
            return Ok(status_code(st));
        }
        let _ = c.kill();
        Ok(status_code(c.wait()?))
    }

    /// Waits for it to exit by itself; stops it ([`stop`](Self::stop), 5 s
    /// grace) after `timeout`. Its exit status, and whether it had to be
    /// stopped.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<(i32, bool)> {
        let Some(c) = self.child.as_mut() else {
            bail!("{} was already stopped", self.name)
        };
        if let Some(st) = wait_for(c, timeout)? {
            self.child = None;
            self.stdin = None;
            return Ok((status_code(st), false));
        }
        tracing::warn!(
            "{} still running after {} s: stopping it",
            self.name,
            timeout.as_secs()
        );
        Ok((self.stop(Duration::from_secs(5))?, true))
    }
}

fn wait_for(c: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait()? {
            return Ok(Some(st));
        }
        if t.elapsed() >= timeout {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop(Duration::from_secs(3));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found_in_path_or_by_their_path() {
        let sh = find_in_path("sh").expect("sh is in PATH");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(find_in_path(&sh.to_string_lossy()), Some(sh.clone()));
        assert_eq!(find_in_path("no-such-tool-here"), None);
        assert_eq!(find_in_path("/no/such/file"), None);
    }

    #[test]
    fn the_first_line_a_tool_prints() {
        assert_eq!(first_line("echo", "v1.2"), "v1.2");
        assert_eq!(first_line("/nonexistent/tool", "--version"), "");
    }

    #[test]
    fn ticks_after_the_command_name() {
        let stat = "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 3 0 99 0";
        assert_eq!(stat_ticks(stat), Some(287));
        assert_eq!(stat_ticks("4242 (x) S 1"), None);
        assert_eq!(stat_ticks("garbage"), None);
    }

    #[test]
    fn runs_waits_and_stops_a_process() {
        let dir = std::env::temp_dir().join(format!("sb-procs-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("p.log");
        let sh = |script: &str| vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
        // Says ready, then waits for a line on stdin and echoes it.
        let mut p = Proc::spawn(
            "reader",
            &sh("echo ready; read l; echo got $l; exit 3"),
            &log,
            &Spawn {
                stdin: true,
                ..Spawn::default()
            },
        )
        .unwrap();
        p.wait_ready(Duration::from_secs(10)).unwrap();
        assert!(p.cpu_ticks().is_some());
        assert!(p.send_line("hello"));
        let (code, stopped) = p.wait_exit(Duration::from_secs(10)).unwrap();
        assert_eq!((code, stopped), (3, false));
        assert!(tail(&log, 1).contains("got hello"), "{}", tail(&log, 5));
        // Never ready: the error carries its last words.
        let mut q =
            Proc::spawn("quitter", &sh("echo bye; exit 1"), &log, &Spawn::default()).unwrap();
        let e = q
            .wait_ready(Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bye"), "{e}");
        // A sleeper is stopped by SIGINT (130 as the shell reports it).
        let mut s = Proc::spawn("sleeper", &sh("exec sleep 30"), &log, &Spawn::default()).unwrap();
        let (code, stopped) = s.wait_exit(Duration::from_millis(100)).unwrap();
        assert!(stopped);
        assert_eq!(code, 128 + 2);
        fs::remove_dir_all(&dir).unwrap();
    }
}
