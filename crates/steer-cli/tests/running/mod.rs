//! A `steer echo` running as a child process on a test net, as an operator
//! would run it, and the `steer` command pointed at it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::support::net::TestNet;
use super::support::PORT;

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

/// A `steer echo` child, its stdout line by line, and what it logged.
pub struct Echo {
    pub child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Echo {
    /// Starts `steer echo` on the host end of `net` (UDP [`PORT`]) with
    /// `extra` flags, and waits until it says it is ready (its stats
    /// socket, when it has one, exists by then).
    pub fn start(net: &TestNet, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_steer"))
            .arg("echo")
            .args(["--interface", &net.host, "--port", &PORT.to_string()])
            .args(["--no-table", "--frames", "4096", "--xsk-ring-size", "512"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("steer echo starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                eprintln!("steer echo (child): {line}");
                log.lock().unwrap().push(line);
            }
        });
        let echo = Echo {
            child,
            lines,
            stderr,
        };
        echo.expect("ready");
        echo
    }

    /// The lines it wrote to stderr so far (its log).
    pub fn log(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// The next line containing `word` (20 s at most).
    pub fn expect(&self, word: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("steer echo never printed {word:?}"));
            if line.contains(word) {
                return line;
            }
        }
    }

    /// The metrics address it printed (after [`Echo::start`] with `--metrics`).
    pub fn metrics_addr(&self) -> SocketAddr {
        let line = self.expect("metrics on http://");
        let url = line.split("http://").nth(1).unwrap();
        url.trim_end_matches("/metrics").parse().unwrap()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` to it.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// SIGINT, and its exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGINT);
        self.child.wait().unwrap()
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `steer ARGS`.
pub fn steer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_steer"))
        .args(args)
        .output()
        .unwrap()
}

/// `steer stats IFACE --json`, parsed (the command must succeed).
pub fn stats_json(interface: &str) -> serde_json::Value {
    let out = steer(&["stats", interface, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
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
