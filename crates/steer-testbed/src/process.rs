//! [`Spawned`]: a child process whose stdout is read line by line on a
//! thread of its own (so the test can wait for a line with a timeout) and
//! whose stderr is kept as its log (and echoed to the test's stderr). A
//! child still running when its [`Spawned`] drops is killed and reaped:
//! a test whose assertion fails first leaves no orphan holding its output
//! open, a veth's XDP program in place or a namespace busy.
//! [`move_process`] moves a running process to another CPU.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long [`Spawned::expect`] and [`Spawned::next_line`] wait for a line.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(20);

/// A running child, its stdout lines and its stderr log.
#[derive(Debug)]
pub struct Spawned {
    /// The child (its stdin is whatever the command set up).
    pub child: Child,
    name: String,
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
    /// Says when the stderr reader reached the end of the pipe.
    stderr_done: Receiver<()>,
}

impl Spawned {
    /// Starts `cmd` with stdout and stderr piped; `name` labels its log
    /// lines and failures. Fails the test if it does not start.
    pub fn start(name: &str, mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name} does not start: {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&stderr);
        let pipe = child.stderr.take().expect("stderr is piped");
        let label = name.to_owned();
        let (done, stderr_done) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                eprintln!("{label} (child): {line}");
                log.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(line);
            }
            let _ = done.send(());
        });
        Spawned {
            child,
            name: name.to_owned(),
            lines,
            stderr,
            stderr_done,
        }
    }

    /// The next stdout line ([`LINE_TIMEOUT`] at most); `None` once stdout
    /// is closed. Fails the test on timeout.
    pub fn next_line(&self) -> Option<String> {
        match self.lines.recv_timeout(LINE_TIMEOUT) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{} printed nothing for {LINE_TIMEOUT:?}", self.name)
            }
        }
    }

    /// The next stdout line containing `word`, skipping the others
    /// ([`LINE_TIMEOUT`] at most for each line). Fails the test when
    /// stdout closes or times out first.
    pub fn expect(&self, word: &str) -> String {
        loop {
            let line = self.next_line().unwrap_or_else(|| {
                panic!("{} never printed {word:?}: {:?}", self.name, self.log())
            });
            if line.contains(word) {
                return line;
            }
        }
    }

    /// Every stdout line still to come, until the child closes stdout.
    pub fn rest(&self) -> Vec<String> {
        std::iter::from_fn(|| self.next_line()).collect()
    }

    /// The lines it wrote to stderr so far (its log).
    pub fn log(&self) -> Vec<String> {
        self.stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` to it; fails the test if that fails.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child process.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(
            rc,
            0,
            "kill {}: {}",
            self.pid(),
            std::io::Error::last_os_error()
        );
    }

    /// Waits for it to exit, and then (a second at most: a process it
    /// started may hold the pipe) until its log has every line it wrote.
    pub fn wait(&mut self) -> ExitStatus {
        let status = self
            .child
            .wait()
            .unwrap_or_else(|e| panic!("waiting for {}: {e}", self.name));
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(1));
        status
    }

    /// `signal`, then its exit status.
    pub fn stop_with(mut self, signal: i32) -> ExitStatus {
        self.signal(signal);
        self.wait()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Moves every thread of process `pid` to `cpu` (`taskset -a -p`); fails
/// the test if that fails.
pub fn move_process(pid: u32, cpu: usize) {
    let ok = Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("taskset: {e}"))
        .success();
    assert!(ok, "moving {pid} to CPU {cpu}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn lines_are_waited_for_and_the_rest_collected() {
        let mut s = Spawned::start("sh", sh("echo a; echo b >&2; echo ready x; echo c; echo d"));
        assert_eq!(s.expect("ready"), "ready x");
        assert_eq!(s.next_line().as_deref(), Some("c"));
        assert_eq!(s.rest(), ["d"]);
        assert!(s.wait().success());
        assert_eq!(s.log(), ["b"]);
    }

    #[test]
    fn a_running_child_is_killed_on_drop() {
        let s = Spawned::start("sleep", {
            let mut c = Command::new("sleep");
            c.arg("600");
            c
        });
        let pid = s.pid();
        drop(s);
        // SAFETY: signal 0 only checks that the process exists.
        assert_ne!(unsafe { libc::kill(pid, 0) }, 0, "{pid} still runs");
    }
}
