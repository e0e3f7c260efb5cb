//! A crash leaves nothing that needs a human. After `kill -9` of a running
//! `steer echo`, the traffic it owned reaches a kernel socket on the same
//! port; the next engine on the interface takes over by itself, saying so
//! in one log line; a second engine started while the first lives is
//! refused in one line naming the first one's pid. Both ways of holding
//! the XDP program are covered: a bpf_link (the default: the kernel
//! detaches the program with the process) and netlink (the program stays;
//! its owner record says the owner is gone), the latter without a stats
//! socket, so only the program says who owns the interface. Needs root.

mod running;
mod support;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

use running::{one_line_error, steer, Echo};
use steer_testbed::TestNet;
use support::{drive_flows, PORT};

/// A kernel UDP socket on the owned port of the host end.
fn kernel_socket(net: &TestNet) -> UdpSocket {
    let s = UdpSocket::bind(SocketAddr::new(net.host_v4.into(), PORT)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s
}

/// Sends `n` datagrams from the namespace to the owned port and returns
/// how many of them `kernel` received.
fn kernel_receives(net: &TestNet, kernel: &UdpSocket, n: usize) -> usize {
    let to = SocketAddr::new(net.host_v4.into(), PORT);
    net.in_ns(|| {
        let s = UdpSocket::bind(SocketAddr::new(net.peer_v4.into(), 0)).unwrap();
        for i in 0..n {
            s.send_to(format!("after the crash {i}").as_bytes(), to)
                .unwrap();
        }
    });
    let mut buf = [0u8; 256];
    let mut got = 0;
    while let Ok((len, _)) = kernel.recv_from(&mut buf) {
        assert!(buf[..len].starts_with(b"after the crash"));
        got += 1;
    }
    got
}

/// The log lines of `echo` that say it took over.
fn takeover_lines(echo: &Echo) -> Vec<String> {
    echo.log()
        .into_iter()
        .filter(|l| l.contains("took over"))
        .collect()
}

fn echo_args(net: &TestNet, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "echo",
        "--interface",
        &net.host,
        "--port",
        &PORT.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(["--no-table", "--frames", "4096", "--xsk-ring-size", "512"].map(String::from));
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn steer_echo_fails(net: &TestNet, extra: &[&str]) -> String {
    let args = echo_args(net, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    one_line_error("echo", &steer(&args))
}

#[test]
fn after_kill_9_the_kernel_gets_the_traffic_and_the_next_engine_takes_over() {
    let net = TestNet::new();
    let kernel = kernel_socket(&net);
    let first = Echo::start(&net, &[]);
    // steer owns the port: its replies come back, the kernel socket sees nothing.
    let got = drive_flows(&net, 2, 10, 5);
    assert!(got.iter().all(|g| g.len() == 10), "{got:?}");
    assert_eq!(kernel_receives(&net, &kernel, 0), 0);

    // A second engine while the first lives: refused, naming it.
    let line = steer_echo_fails(&net, &[]);
    assert!(
        line.contains(&format!("pid {}", first.pid())) && line.contains(&net.host),
        "{line}"
    );

    let mut first = first;
    first.signal(libc::SIGKILL);
    first.child.wait().unwrap();
    // The program went with the process (its bpf_link closed); the
    // datagrams reach the kernel's socket.
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
    assert_eq!(kernel_receives(&net, &kernel, 20), 20);
    // What is left: the stats socket, which says the engine is gone.
    let line = one_line_error("stats", &steer(&["stats", &net.host]));
    assert!(line.contains("is gone"), "{line}");
    drop(kernel);

    // The next engine takes over by itself, in one log line.
    let second = Echo::start(&net, &[]);
    let got = drive_flows(&net, 2, 10, 5);
    assert!(got.iter().all(|g| g.len() == 10), "{got:?}");
    let lines = takeover_lines(&second);
    assert_eq!(lines.len(), 1, "{:?}", second.log());
    assert!(lines[0].contains("stats socket"), "{lines:?}");
    assert!(second.stop().success());
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

#[test]
fn a_netlink_program_left_by_kill_9_passes_traffic_and_is_replaced_without_a_stats_socket() {
    let net = TestNet::new();
    let kernel = kernel_socket(&net);
    let flags = ["--xdp-attach", "netlink", "--no-stats-socket"];
    let mut first = Echo::start(&net, &flags);
    let got = drive_flows(&net, 2, 10, 5);
    assert!(got.iter().all(|g| g.len() == 10), "{got:?}");
    let socket = format!("/run/steer/{}.sock", net.host);
    assert!(!Path::new(&socket).exists());

    // No stats socket: the program's owner record names the running engine,
    // to a second engine and to `steer stats`.
    for extra in [&flags[..], &[]] {
        let line = steer_echo_fails(&net, extra);
        assert!(line.contains(&format!("pid {}", first.pid())), "{line}");
    }
    assert!(
        !Path::new(&socket).exists(),
        "a refused engine left its socket"
    );
    let line = one_line_error("stats", &steer(&["stats", &net.host]));
    assert!(
        line.contains("no steer engine") && line.contains(&format!("(pid {})", first.pid())),
        "{line}"
    );

    let pid = first.pid();
    first.signal(libc::SIGKILL);
    first.child.wait().unwrap();
    // The program stays (netlink), its sockets are gone: the redirect falls
    // back to XDP_PASS and the kernel's socket gets the datagrams.
    assert!(net.link_show().contains("xdp"), "{}", net.link_show());
    assert_eq!(kernel_receives(&net, &kernel, 20), 20);
    let line = one_line_error("stats", &steer(&["stats", &net.host]));
    assert!(
        line.contains("stale") && line.contains(&format!("pid {pid} is gone")),
        "{line}"
    );
    drop(kernel);

    // The next engine, without a stats socket either, sees the dead owner
    // and replaces the program by itself, in one log line.
    let second = Echo::start(&net, &["--no-stats-socket"]);
    let lines = takeover_lines(&second);
    assert_eq!(lines.len(), 1, "{:?}", second.log());
    assert!(
        lines[0].contains(&format!("pid {pid}")) && lines[0].contains("XDP program"),
        "{lines:?}"
    );
    let got = drive_flows(&net, 2, 10, 5);
    assert!(got.iter().all(|g| g.len() == 10), "{got:?}");
    assert!(second.stop().success());
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

/// Two engines started together on one interface, many times: exactly one
/// serves each time, the other is refused in one line naming it (the
/// interface's owner lock is taken before anything is touched).
#[test]
fn of_two_engines_started_together_exactly_one_serves() {
    use std::process::{Command, Stdio};
    use std::time::Instant;
    const RACES: usize = 50;
    let net = TestNet::new();
    let args = echo_args(&net, &[]);
    for race in 0..RACES {
        let spawn = || {
            running::KillOnDrop(
                Command::new(env!("CARGO_BIN_EXE_steer"))
                    .args(&args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        };
        let mut pair = [spawn(), spawn()];
        // The loser exits on its own; the winner serves until told to stop.
        let deadline = Instant::now() + Duration::from_secs(20);
        let (loser, status) = loop {
            if let Some((i, st)) =
                (0..2).find_map(|i| pair[i].0.try_wait().ok().flatten().map(|st| (i, st)))
            {
                break (i, st);
            }
            assert!(Instant::now() < deadline, "race {race}: both still run");
            std::thread::sleep(Duration::from_millis(10));
        };
        let winner = 1 - loser;
        assert!(!status.success(), "race {race}: both served");
        let mut stderr = Vec::new();
        std::io::Read::read_to_end(&mut pair[loser].0.stderr.take().unwrap(), &mut stderr).unwrap();
        let out = std::process::Output {
            status,
            stdout: Vec::new(),
            stderr,
        };
        let line = one_line_error("echo", &out);
        assert!(
            line.contains("is served by") && line.contains(&format!("pid {}", pair[winner].0.id())),
            "race {race}: {line}"
        );
        // The winner came up and stops cleanly.
        let mut stdout = std::io::BufReader::new(pair[winner].0.stdout.take().unwrap());
        let mut ready = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut ready).unwrap();
        assert!(ready.contains("ready"), "race {race}: {ready}");
        let pid = pair[winner].0.id() as i32;
        // SAFETY: signalling our own child process.
        let rc = unsafe { libc::kill(pid, libc::SIGINT) };
        assert_eq!(rc, 0);
        assert!(pair[winner].0.wait().unwrap().success(), "race {race}");
    }
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}
