//! `steer stats` and `steer top --once` against a running `steer echo`, and
//! their one-line errors: no engine on the interface, permission denied, an
//! engine that does not answer, and an engine killed with SIGKILL (its
//! socket left behind: the reader says so at once, and the next engine on
//! the interface starts cleanly and takes over). Needs root, as CI runs it.

mod running;
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use running::{one_line_error, stats_json, steer, Echo};
use steer_testbed::TestNet;
use support::{drive_flows, row};

/// The sum of `field` over the per-CPU rows.
fn total(v: &serde_json::Value, field: &str) -> u64 {
    v["per_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[field].as_u64().unwrap())
        .sum()
}

/// `stats_json` once it shows `sent` replies (workers flush their counters
/// just after a batch's replies leave).
fn settled(interface: &str, sent: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = stats_json(interface);
        if total(&v, "tx") >= sent || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn stats_and_top_read_a_running_engine() {
    let net = TestNet::new();
    let echo = Echo::start(&net, &[]);
    let got = drive_flows(&net, 4, 50, 10);
    assert!(got.iter().all(|g| g.len() == 50), "{got:?}");

    let v = settled(&net.host, 200);
    assert_eq!(v["pid"], echo.pid());
    assert_eq!(v["interface"], net.host.as_str());
    assert_eq!(total(&v, "rx"), 200, "{v:#}");
    assert_eq!(total(&v, "processed"), 200);
    assert_eq!(total(&v, "tx"), 200);
    let sockets = v["sockets"].as_array().unwrap();
    assert_eq!(sockets.len(), 2);
    for field in [
        "rx_dropped",
        "rx_ring_full",
        "rx_fill_ring_empty_descs",
        "tx_ring_empty_descs",
        "rx_invalid_descs",
        "tx_invalid_descs",
    ] {
        assert!(sockets[0][field].is_u64(), "{field} in {v:#}");
    }
    let rx: u64 = sockets
        .iter()
        .map(|s| s["rx_packets"].as_u64().unwrap())
        .sum();
    assert_eq!(rx, 200);
    assert!(v["frames"]["total"].as_i64().unwrap() > 0);

    // The table: one row per CPU and the total (rx, processed, tx first).
    let out = steer(&["stats", &net.host]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("steer on {} (pid {})", net.host, echo.pid())),
        "{text}"
    );
    assert_eq!(row(&text, "all")[1..4], ["200", "200", "200"], "{text}");
    assert!(text.contains("steering: "), "{text}");
    assert!(text.contains("rx_ring_full"), "{text}");
    assert!(text.contains("UMEM frames: "), "{text}");

    // top, one screen: rates over the interval, totals.
    let out = steer(&["top", &net.host, "--once", "--interval", "0.2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains("per CPU") && screen.contains("AF_XDP sockets"),
        "{screen}"
    );
    // cpu, rx/s, tx/s, rx, tx: nothing sent during the interval.
    assert_eq!(
        row(&screen, "all")[1..5],
        ["0", "0", "200", "200"],
        "{screen}"
    );

    // Interactive top needs a terminal: a pipe gets a one-line hint.
    let line = one_line_error("top", &steer(&["top", &net.host]));
    assert!(line.contains("--once"), "{line}");

    // Not root: the socket is 0600.
    let unprivileged = running::steer_as_nobody(&["stats", &net.host], "");
    let line = one_line_error("stats", &unprivileged);
    assert!(
        line.contains("permission denied") && line.contains("run as root"),
        "{line}"
    );

    // An interface nobody serves.
    let line = one_line_error("stats", &steer(&["stats", "steer-nonesuch0"]));
    assert!(
        line.contains("no steer engine on steer-nonesuch0"),
        "{line}"
    );

    // A stopped engine: an answer within the timeout or an error, never a hang.
    echo.signal(libc::SIGSTOP);
    let t = Instant::now();
    let line = one_line_error("stats", &steer(&["stats", &net.host, "--timeout", "0.3"]));
    echo.signal(libc::SIGCONT);
    assert!(line.contains("did not answer"), "{line}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    assert!(echo.stop().success());
    // Stopped cleanly: the socket is gone with it.
    let line = one_line_error("stats", &steer(&["stats", &net.host]));
    assert!(line.contains("no steer engine"), "{line}");
}

#[test]
fn a_killed_engine_is_reported_at_once_and_the_next_one_takes_over() {
    let net = TestNet::new();
    let mut first = Echo::start(&net, &[]);
    let socket = format!("/run/steer/{}.sock", net.host);
    assert!(std::path::Path::new(&socket).exists());
    first.signal(libc::SIGKILL);
    first.child.wait().unwrap();
    // What SIGKILL leaves: the socket file (the XDP program went with the
    // process, its bpf_link closed: tests/crash.rs).
    assert!(std::path::Path::new(&socket).exists());
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());

    for command in [
        vec!["stats", net.host.as_str()],
        vec!["top", net.host.as_str(), "--once"],
    ] {
        let t = Instant::now();
        let line = one_line_error(command[0], &steer(&command));
        assert!(line.contains("is gone"), "{line}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "{command:?}: {:?}",
            t.elapsed()
        );
    }

    // The next engine starts without help, serves, and answers `steer stats`.
    let second = Echo::start(&net, &[]);
    let got = drive_flows(&net, 2, 20, 10);
    assert!(got.iter().all(|g| g.len() == 20), "{got:?}");
    let v = settled(&net.host, 40);
    assert_eq!(v["pid"], second.pid());
    assert_eq!(total(&v, "tx"), 40);
    assert!(second.stop().success());
    assert!(!std::path::Path::new(&socket).exists());
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

/// A tmux server of this test's own with one session running `command`.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(command: &str) -> Self {
        let t = Tmux {
            socket: format!("steer-test-{}", std::process::id()),
        };
        let out = t.run(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "140",
            "-y",
            "30",
            command,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs (scripts/setup.sh installs it)")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Waits until the screen shows what `ok` wants (10 s at most).
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "never {what}:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

#[test]
fn top_in_a_terminal_refreshes_says_when_the_engine_is_gone_and_quits_on_q() {
    let net = TestNet::new();
    let echo = Echo::start(&net, &[]);
    let tmux = Tmux::start(&format!(
        "{} top {} --interval 0.3",
        env!("CARGO_BIN_EXE_steer"),
        net.host
    ));
    tmux.wait_for("the per-CPU table", |s| {
        s.contains("per CPU") && s.contains("rates over")
    });
    let got = drive_flows(&net, 2, 30, 10);
    assert!(got.iter().all(|g| g.len() == 30), "{got:?}");
    // Refreshed: the total row counts what was sent.
    tmux.wait_for("the new counts", |s| {
        s.lines()
            .map(|l| l.trim_matches(|c: char| c == '│' || c.is_whitespace()))
            .find(|l| l.starts_with("all "))
            .is_some_and(|l| l.split_whitespace().nth(3) == Some("60"))
    });
    assert!(echo.stop().success());
    tmux.wait_for("the engine gone", |s| {
        s.contains("not refreshed: no steer engine on")
    });
    let out = tmux.run(&["send-keys", "-t", "top", "q"]);
    assert!(out.status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while tmux.run(&["has-session", "-t", "top"]).status.success() {
        assert!(
            Instant::now() < deadline,
            "q did not quit:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
