//! Least privilege: once set up, `steer echo` and `steer proxy` run without
//! the capabilities they no longer need, every thread of them (checked in
//! `/proc/<pid>/task/*/status`), and still serve, report and stop cleanly
//! (the program detached); with `--user nobody` every thread runs as
//! nobody under the seccomp allowlist, and `steer tcp-echo` keeps exactly
//! CAP_NET_ADMIN to detach its program. Needs root, as CI runs it.

mod running;
mod support;

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;

use running::{steer, steer_command, steer_ok, Echo};
use steer_testbed::Spawned;
use steer_testbed::TestNet;
use support::drive_flows;
use support::PORT;

const CAP_NET_ADMIN: u64 = 1 << 12;

/// `field` (CapEff, CapPrm, CapBnd, ...) of every thread of `pid`.
fn thread_caps(pid: i32, field: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let status = std::fs::read_to_string(task.join("status")).unwrap();
        let name = status
            .lines()
            .find_map(|l| l.strip_prefix("Name:"))
            .unwrap_or("")
            .trim()
            .to_owned();
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        out.push((name, value));
    }
    out
}

/// Every thread of `pid` has exactly `want` in its effective, permitted
/// and bounding sets, and more than one thread runs.
fn assert_caps(pid: i32, want: u64) {
    for field in ["CapEff", "CapPrm", "CapBnd"] {
        let caps = thread_caps(pid, field);
        assert!(caps.len() > 2, "{caps:?}");
        assert!(
            caps.iter().all(|(_, v)| *v == want),
            "{field}: {caps:x?}, want {want:#x}"
        );
    }
}

#[test]
fn a_running_echo_has_no_capabilities_and_still_serves_reports_and_stops() {
    let net = TestNet::new();
    let echo = Echo::start(&net, &[]);
    assert_caps(echo.pid(), 0);
    // No thread can gain privileges through a program it runs.
    let nnp = thread_caps(echo.pid(), "NoNewPrivs");
    assert!(nnp.iter().all(|(_, v)| *v == 1), "{nnp:?}");
    let got = drive_flows(&net, 4, 20, 10);
    assert!(got.iter().all(|g| g.len() == 20), "{got:?}");
    let out = steer(&["stats", &net.host, "--json"]);
    assert!(out.status.success());
    // Nothing failed after setup (worker pinning and slices, the stats
    // socket, the report need no capability).
    assert!(
        !echo
            .log()
            .iter()
            .any(|l| l.contains("ERROR") || l.contains("could not") || l.contains("failed")),
        "{:?}",
        echo.log()
    );
    assert!(echo.stop().success());
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

#[test]
fn through_netlink_only_net_admin_stays_to_detach_at_stop() {
    let net = TestNet::new();
    let echo = Echo::start(&net, &["--xdp-attach", "netlink"]);
    assert_caps(echo.pid(), CAP_NET_ADMIN);
    let got = drive_flows(&net, 2, 10, 5);
    assert!(got.iter().all(|g| g.len() == 10), "{got:?}");
    assert!(net.link_show().contains("xdp"));
    assert!(echo.stop().success());
    // Detached with CAP_NET_ADMIN alone.
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

#[test]
fn keep_capabilities_keeps_them() {
    let net = TestNet::new();
    let echo = Echo::start(&net, &["--keep-capabilities"]);
    let caps = thread_caps(echo.pid(), "CapEff");
    assert!(
        caps.iter().all(|(_, v)| v & CAP_NET_ADMIN != 0),
        "{caps:x?}"
    );
    assert!(echo.stop().success());
}

#[test]
fn a_running_proxy_has_no_capabilities_in_any_thread() {
    let net = TestNet::new();
    let mut cmd = steer_command(&["proxy", "--interface", &net.host]);
    cmd.args(["--port", &PORT.to_string(), "--backend", "127.0.0.1:9"])
        .args(["--frames", "4096", "--xsk-ring-size", "512"])
        .stdin(Stdio::piped());
    // Killed if an assertion fails first: an orphan would hold the test's
    // output open and the veth's XDP program in place.
    let mut child = Spawned::start("steer proxy", cmd);
    child.expect("ready");
    // The tokio runtimes and acceptors have started by now.
    std::thread::sleep(Duration::from_millis(200));
    assert_caps(child.pid(), 0);
    child.signal(libc::SIGINT);
    drop(child.child.stdin.take());
    assert!(child.wait().success());
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

/// `steer stats IFACE` as user nobody with `groups` (setpriv syntax) as
/// its supplementary groups, without capabilities.
fn stats_as_nobody(interface: &str, groups: &str) -> std::process::Output {
    running::steer_as_nobody(&["stats", interface], groups)
}

#[test]
fn stats_group_members_read_the_socket_and_nobody_else() {
    use std::os::unix::fs::MetadataExt;
    let net = TestNet::new();
    let adm = nix::unistd::Group::from_name("adm")
        .unwrap()
        .expect("Debian's adm group");
    let echo = Echo::start(&net, &["--stats-group", "adm"]);
    let meta = std::fs::metadata(format!("/run/steer/{}.sock", net.host)).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, adm.gid.as_raw()));
    let out = stats_as_nobody(&net.host, &adm.gid.to_string());
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("steer on"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = running::one_line_error("stats", &stats_as_nobody(&net.host, ""));
    assert!(line.contains("permission denied"), "{line}");
    assert!(echo.stop().success());

    // An unknown group: a one-line error, nothing left behind.
    let out = steer(&[
        "echo",
        "-i",
        &net.host,
        "-p",
        "7777",
        "--stats-group",
        "steer-no-such-group",
    ]);
    let line = running::one_line_error("echo", &out);
    assert!(line.contains("no group \"steer-no-such-group\""), "{line}");
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

/// `field` of every thread of `pid`, as the kernel prints it (tabs kept).
fn thread_field(pid: i32, field: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        let get = |f: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{f}:")))
                .unwrap_or("")
                .trim()
                .to_owned()
        };
        out.push((get("Name"), get(field)));
    }
    out
}

/// Every thread of `pid` runs as nobody (65534 in all four uids and gids,
/// the only group), with NO_NEW_PRIVS and a seccomp filter.
fn assert_nobody(pid: i32) {
    let nobody = "65534\t65534\t65534\t65534";
    for (field, want) in [
        ("Uid", nobody),
        ("Gid", nobody),
        ("Groups", "65534"),
        ("NoNewPrivs", "1"),
        ("Seccomp", "2"),
    ] {
        let got = thread_field(pid, field);
        assert!(got.len() > 2, "{got:?}");
        assert!(got.iter().all(|(_, v)| v == want), "{field}: {got:?}");
    }
}

/// A Prometheus scrape of `addr`: the body of `GET /metrics`.
fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// Held by a test that runs a command as nobody: gives the run directory
/// back to root, mode 0755, when dropped (pass or fail), for the tests
/// after it. One at a time: one test's restore must not pull the directory
/// from under another's engine, which removes its socket at stop.
struct RestoreRunDir(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

impl RestoreRunDir {
    fn take() -> Self {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        Self(
            ONE.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl Drop for RestoreRunDir {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = nix::unistd::chown("/run/steer", Some(0.into()), Some(0.into()));
        let _ = std::fs::set_permissions("/run/steer", std::fs::Permissions::from_mode(0o755));
    }
}

#[test]
fn an_echo_run_as_nobody_serves_reports_and_stops_under_seccomp() {
    let _restore = RestoreRunDir::take();
    let net = TestNet::new();
    let echo = Echo::start(&net, &["--user", "nobody", "--metrics", "127.0.0.1:0"]);
    let metrics = echo.metrics_addr();
    assert_nobody(echo.pid());
    assert_caps(echo.pid(), 0);
    // The socket is nobody's, in root's run directory made writable by
    // nobody's group and sticky: the engine can remove its socket and
    // nothing else there.
    let socket = format!("/run/steer/{}.sock", net.host);
    {
        use std::os::unix::fs::MetadataExt;
        let dir = std::fs::metadata("/run/steer").unwrap();
        assert_eq!((dir.uid(), dir.gid()), (0, 65534));
        assert_eq!(dir.mode() & 0o1070, 0o1070, "{:o}", dir.mode());
        assert_eq!(std::fs::metadata(&socket).unwrap().uid(), 65534);
        assert_eq!(std::fs::metadata("/run/steer/owners").unwrap().uid(), 0);
    }
    let got = drive_flows(&net, 4, 20, 10);
    assert!(got.iter().all(|g| g.len() == 20), "{got:?}");
    steer_ok(&["stats", &net.host, "--json"]);
    let body = scrape(metrics);
    assert!(
        body.starts_with("HTTP/1.") && body.contains("steer_"),
        "{body}"
    );
    // Nothing the filter refused: no error in its log.
    assert!(
        !echo
            .log()
            .iter()
            .any(|l| l.contains("ERROR") || l.contains("failed") || l.contains("denied")),
        "{:?}",
        echo.log()
    );
    echo.signal(libc::SIGTERM);
    let mut echo = echo;
    let status = echo.child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        !std::path::Path::new(&socket).exists(),
        "{socket} left behind"
    );
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

#[test]
fn tcp_echo_run_as_nobody_keeps_only_net_admin_and_detaches_at_stop() {
    let net = TestNet::new();
    let mut cmd = steer_command(&["tcp-echo", "-i", &net.host, "-p", "7791", "--no-table"]);
    cmd.args(["--steer", "kernel-sockets", "--user", "nobody"]);
    let mut child = Spawned::start("steer tcp-echo", cmd);
    let line = child.next_line().unwrap_or_default();
    assert!(line.contains("ready"), "{line}");
    let pid = child.pid();
    assert_nobody(pid);
    // Exactly CAP_NET_ADMIN, in every thread: to detach at stop.
    assert_caps(pid, CAP_NET_ADMIN);
    assert!(net.link_show().contains("xdp"), "{}", net.link_show());
    child.signal(libc::SIGTERM);
    assert!(child.wait().success());
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}

#[test]
fn an_unknown_user_is_one_line_before_anything_is_attached() {
    let net = TestNet::new();
    for args in [
        &["echo", "-i", &net.host, "-p", "7777"][..],
        &[
            "tcp-echo",
            "-i",
            &net.host,
            "-p",
            "7792",
            "--steer",
            "kernel-sockets",
        ][..],
        &["rfs", "-i", &net.host, "-p", "7793"][..],
    ] {
        let mut args = args.to_vec();
        args.extend(["--user", "steer-no-such-user"]);
        let out = steer(&args);
        let line = running::one_line_error(args[0], &out);
        assert!(line.contains("no user \"steer-no-such-user\""), "{line}");
        assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
    }
}

#[test]
fn the_demo_drops_everything_and_runs_as_nobody_with_its_clients() {
    let _restore = RestoreRunDir::take();
    let net = TestNet::new();
    let mut cmd = steer_command(&["demo", "-i", &net.host, "--netns", &net.ns]);
    cmd.args(["--server", &net.host_v4.to_string(), "--seconds", "1"])
        .args(["--move-every", "0.5", "--user", "nobody"]);
    let mut child = Spawned::start("steer demo", cmd);
    // The clients (made in the namespace before the engine started) are
    // sending and the consumers reading by the first phase.
    child.expect("phase always");
    let pid = child.pid();
    assert_nobody(pid);
    assert_caps(pid, 0);
    let rest = child.rest();
    assert!(child.wait().success(), "{rest:?}");
    let clients = rest.iter().find(|l| l.starts_with("clients:")).unwrap();
    assert!(!clients.contains(" 0 answered"), "{clients}");
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}
