//! `steer stats` and `steer top --once` reading a running `steer rfs`
//! through its stats socket, beside a kernel TCP server that never heard
//! of steer (a thread of this test pinned to CPU 1, on the owned port):
//! while a peer in the namespace sends, the snapshot's counters move
//! (reads, updates, flows, frames landed on CPU 1), `steer top` shows a
//! landing rate on CPU 1, `steer ctl` is refused in one line, and the
//! socket is gone after SIGINT. Needs root and two CPUs, as CI runs it.

mod running;
mod support;

use support::row;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use running::{one_line_error, steer, steer_ok};
use steer_testbed::TestNet;

const PORT: u16 = 7413;

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside
    // it, and sched_setaffinity reads it for the calling thread (0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

/// A kernel TCP server on `addr` reading every connection on CPU 1 until
/// it closes (one connection at a time).
fn serve_on_cpu1(addr: SocketAddr) {
    let listener = TcpListener::bind(addr).unwrap();
    std::thread::spawn(move || {
        pin_to(1);
        let mut buf = vec![0u8; 64 << 10];
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
}

/// From the peer: one connection to `to`, 16 KiB every 10 ms for `time`.
fn send_for(net: &TestNet, to: SocketAddr, time: Duration) {
    net.in_ns(|| {
        let mut c = TcpStream::connect_timeout(&to, Duration::from_secs(2)).unwrap();
        let chunk = vec![7u8; 16 << 10];
        let end = Instant::now() + time;
        while Instant::now() < end {
            c.write_all(&chunk).unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
    });
}

/// `steer stats IF --json --run-dir DIR`, parsed.
fn stats_json(interface: &str, dir: &str) -> serde_json::Value {
    let out = steer_ok(&["stats", interface, "--json", "--run-dir", dir]);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `landed` of CPU `cpu` in a snapshot.
fn landed(v: &serde_json::Value, cpu: u64) -> u64 {
    v["per_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cpu"] == cpu)
        .map_or(0, |r| r["landed"].as_u64().unwrap())
}

#[test]
fn stats_and_top_read_a_running_steer_rfs() {
    let net = TestNet::new();
    let tag = format!("{}-{}", std::process::id(), net.host);
    let run_dir = std::env::temp_dir().join(format!("steer-rfs-stats-{tag}"));
    let dir = run_dir.to_str().unwrap().to_owned();
    let json = std::env::temp_dir().join(format!("steer-rfs-stats-{tag}.json"));
    let mut rfs = support::rfs_command(&net, "-p", PORT, &json)
        .args(["--run-dir", &dir, "--no-table"])
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(rfs.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("recording tcp ports [7413]"), "{line}");
    let socket = run_dir.join(format!("{}.sock", net.host));
    assert!(socket.exists(), "{}", socket.display());

    let before = stats_json(&net.host, &dir);
    assert_eq!(before["kind"], "rfs", "{before:#}");
    assert_eq!(before["interface"], net.host.as_str());
    assert_eq!(before["pid"], rfs.id());
    assert_eq!(before["tcp_ports"], serde_json::json!([PORT]));
    assert_eq!(before["policy"], "llc");

    let server: SocketAddr = (net.host_v4, PORT).into();
    serve_on_cpu1(server);
    std::thread::scope(|s| {
        s.spawn(|| send_for(&net, server, Duration::from_millis(2500)));
        std::thread::sleep(Duration::from_millis(700));
        // Rates over one interval while the peer sends.
        let top = steer_ok(&[
            "top",
            &net.host,
            "--once",
            "--interval",
            "1",
            "--run-dir",
            &dir,
        ]);
        let text = String::from_utf8_lossy(&top.stdout);
        assert!(text.starts_with("steer rfs on "), "{text}");
        assert!(text.contains("per CPU"), "{text}");
        let cpu1 = row(&text, "1");
        let per_s: u64 = cpu1[1].parse().unwrap_or(0);
        assert!(per_s > 0, "frames land on the reader's CPU 1:\n{text}");
        assert!(text.contains("rates over 1."), "{text}");
    });

    let after = stats_json(&net.host, &dir);
    let c = &after["counters"];
    let grew = |f: &str| c[f].as_u64().unwrap() > before["counters"][f].as_u64().unwrap();
    assert!(
        grew("reads") && grew("updates") && grew("redirected"),
        "{after:#}"
    );
    assert!(c["new_flows"].as_u64().unwrap() >= 1, "{after:#}");
    assert!(after["flows_tracked"].as_u64().unwrap() >= 1, "{after:#}");
    assert!(
        landed(&after, 1) > 10 * landed(&after, 0).max(1),
        "the segments landed on the reader's CPU 1: {after:#}"
    );
    assert!(after["uptime_s"].as_f64() > before["uptime_s"].as_f64());

    let table = steer_ok(&["stats", &net.host, "--run-dir", &dir]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("steer rfs on "), "{text}");
    assert_eq!(row(&text, "1")[3], landed(&after, 1).to_string(), "{text}");
    assert!(text.contains("suppressed by the LLC rule"), "{text}");

    // Nothing to control: one line, exit 1.
    let ctl = steer(&["ctl", &net.host, "--run-dir", &dir, "policy", "always"]);
    let e = one_line_error("ctl", &ctl);
    assert!(e.contains("steer rfs takes no control requests"), "{e}");

    support::stop_rfs(rfs, &net, &json);
    assert!(!socket.exists(), "{} left after SIGINT", socket.display());
    let e = one_line_error("stats", &steer(&["stats", &net.host, "--run-dir", &dir]));
    assert!(e.contains("does not exist"), "{e}");
    let _ = std::fs::remove_dir_all(&run_dir);
}

/// Run as nobody with `--stats-group adm`, the socket is nobody's, `0660`
/// with group adm: a member of adm reads it, another user is refused, and
/// `steer rfs` still removes it at SIGINT (its run directory sticky and
/// writable by nobody's group, as an engine's).
#[test]
fn run_as_nobody_its_socket_is_the_groups_to_read_and_removed_at_stop() {
    use std::os::unix::fs::MetadataExt;
    let net = TestNet::new();
    let adm = nix::unistd::Group::from_name("adm")
        .unwrap()
        .expect("Debian's adm group");
    let tag = format!("{}-{}", std::process::id(), net.host);
    let run_dir = std::env::temp_dir().join(format!("steer-rfs-stats-{tag}"));
    let dir = run_dir.to_str().unwrap().to_owned();
    let json = std::env::temp_dir().join(format!("steer-rfs-stats-{tag}.json"));
    let mut rfs = support::rfs_command(&net, "-p", PORT + 1, &json)
        .args(["--run-dir", &dir, "--no-table"])
        .args(["--user", "nobody", "--stats-group", "adm"])
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(rfs.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("ready on"), "{line}");
    let socket = run_dir.join(format!("{}.sock", net.host));
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!(
        (meta.mode() & 0o777, meta.uid(), meta.gid()),
        (0o660, 65534, adm.gid.as_raw())
    );
    let stats = ["stats", &net.host, "--run-dir", &dir];
    let out = running::steer_as_nobody(&stats, &adm.gid.to_string());
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("steer rfs on"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another user, not in adm (nobody owns the socket: it may read).
    let other = std::process::Command::new("setpriv")
        .args([
            "--reuid=65533",
            "--regid=65533",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_steer"))
        .args(stats)
        .output()
        .unwrap();
    let e = one_line_error("stats", &other);
    assert!(e.contains("permission denied"), "{e}");

    support::stop_rfs(rfs, &net, &json);
    assert!(!socket.exists(), "{} left after SIGINT", socket.display());
    let _ = std::fs::remove_dir_all(&run_dir);
}
