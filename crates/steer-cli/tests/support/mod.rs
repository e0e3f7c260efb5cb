//! What the command's tests share beyond steer-testbed: the UDP port the
//! engines under test own, the multi-flow driver aimed at it, the key of
//! a peer's flow to it, `steer proxy`'s command line with a kernel UDP
//! echo as its backend, starting a `steer` command and waiting until it is
//! ready, and starting and stopping `steer rfs` beside an unmodified
//! server pinned to a CPU.

#![allow(dead_code)]

use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use steer_core::flow::{flow_key, FlowKey};
use steer_core::packet::build::FrameBuilder;
use steer_testbed::TestNet;

/// The UDP port the engines under test own.
pub const PORT: u16 = 7777;

/// Sends `per_flow` numbered datagrams on each flow to [`PORT`] in bursts
/// and collects the replies ([`steer_testbed::traffic::drive_flows`]).
pub fn drive_flows(net: &TestNet, flows: usize, per_flow: u32, burst: u32) -> Vec<Vec<u32>> {
    steer_testbed::traffic::drive_flows(net, PORT, flows, per_flow, burst)
}

/// The key of the UDP flow from the peer's IPv4 address and `sport` to
/// the host's [`PORT`], as the engine parses it from such a frame.
pub fn peer_udp_key(net: &TestNet, sport: u16) -> FlowKey {
    let frame = FrameBuilder::udp(net.peer_v4.into(), net.host_v4.into(), sport, PORT).build();
    flow_key(&frame)
        .expect("a built UDP frame parses")
        .expect("a UDP frame has a flow key")
}

/// A kernel UDP echo on loopback (datagrams of any size); returns its
/// port.
pub fn kernel_backend() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
    port
}

/// `steer proxy` on the host end of `net` (UDP [`PORT`]) to the loopback
/// `backend`, its final stats written to `json`, stdin piped for its
/// run-time commands.
pub fn proxy_command(net: &TestNet, backend: u16, json: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_steer"));
    cmd.arg("proxy")
        .args(["--interface", &net.host, "--port", &PORT.to_string()])
        .args(["--backend", &format!("127.0.0.1:{backend}")])
        .args(["--stats-json", json.to_str().unwrap()])
        .stdin(Stdio::piped());
    cmd
}

/// `steer rfs` on the host end of `net` recording `port` (`flag`: `-p`
/// for TCP, `-u` for UDP) on CPUs 0 and 1, its JSON summary written to
/// `json`, stdout and stderr piped.
pub fn rfs_command(net: &TestNet, flag: &str, port: u16, json: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_steer"));
    cmd.args(["rfs", "-i", &net.host, flag, &port.to_string()])
        .args(["--cpus", "0,1", "--stats-json"])
        .arg(json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// `program` pinned to `cpu` (`taskset -c CPU PROGRAM`), in the root
/// namespace.
pub fn on_cpu(cpu: usize, program: &str) -> Command {
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &cpu.to_string(), program]);
    cmd
}

/// Stops a running `steer rfs` (SIGINT), which must exit 0 with no libbpf
/// or libxdp noise and leave nothing attached to the host end of `net`;
/// returns the JSON summary it wrote to `json` (the file is removed).
pub fn stop_rfs(rfs: Child, net: &TestNet, json: &Path) -> serde_json::Value {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(rfs.id() as i32, libc::SIGINT) }, 0);
    let out = rfs.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("libbpf") && !stderr.contains("libxdp"),
        "{stderr}"
    );
    assert!(
        !net.link_show().contains("xdp"),
        "still attached: {}",
        net.link_show()
    );
    let text = std::fs::read_to_string(json).unwrap();
    let _ = std::fs::remove_file(json);
    serde_json::from_str(&text).unwrap()
}

/// The cells of the first row of `text` whose first cell is `label`
/// (table borders dropped): a row of `steer stats` or `steer top --once`.
pub fn row(text: &str, label: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.trim_matches(|c: char| c == '│' || c.is_whitespace()))
        .find(|l| l.split_whitespace().next() == Some(label))
        .unwrap_or_else(|| panic!("no row {label:?} in\n{text}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// A running `steer`, killed if the test fails before it stops it.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        // A failed test must not leave steer (and its XDP program) behind.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `steer <args>` and waits for its "ready" line; the rest of its
/// output, a line at a time.
pub fn start_steer(args: &[&str]) -> (Running, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_steer"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("steer starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    loop {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("steer printed ready");
        if line.contains("ready") {
            break;
        }
    }
    (Running(child), lines)
}
