//! Every subcommand over a table of bad values: each run must fail with a
//! non-zero exit and exactly one line on stderr that names the command, and
//! never panic. Nothing here attaches a program: the values are refused
//! before, or the interface does not exist.

use std::process::Command;

/// `steer echo` on an interface that does not exist.
const ECHO: &[&str] = &["echo", "-i", "nosuchif0", "-p", "9"];
/// `steer echo` on loopback (which has no ntuple filters).
const ECHO_LO: &[&str] = &["echo", "-i", "lo", "-p", "9"];
/// `steer proxy` on an interface that does not exist, before its backend.
const PROXY: &[&str] = &["proxy", "-i", "nosuchif0", "-p", "9", "--backend"];
/// `steer tcp-echo` on port 9 with no steering.
const TCP_ECHO: &[&str] = &["tcp-echo", "-p", "9", "--steer", "none"];
/// `steer tcp-load` against a port nothing serves.
const TCP_LOAD: &[&str] = &["tcp-load", "--connect", "127.0.0.1:9"];
/// Nothing before the arguments.
const NONE: &[&str] = &[];

/// Arguments that must be refused: a prefix above, then the rest.
const BAD: &[(&[&str], &[&str])] = &[
    // Numbers that are no time.
    (TCP_LOAD, &["--duration", "inf"]),
    (TCP_LOAD, &["--duration", "-1"]),
    (TCP_LOAD, &["--duration", "NaN"]),
    (TCP_LOAD, &["--connections", "0"]),
    (TCP_ECHO, &["--duration", "inf"]),
    (ECHO, &["--duration", "1e300"]),
    (PROXY, &["127.0.0.1:9", "--idle-timeout", "inf"]),
    (NONE, &["demo", "--move-every=-1"]),
    (NONE, &["demo", "--move-every", "0"]),
    (NONE, &["demo", "--rate", "inf"]),
    (NONE, &["demo", "--seconds", "nan"]),
    (NONE, &["stats", "--timeout", "nan"]),
    (NONE, &["top", "--interval", "0"]),
    // CPU lists.
    (ECHO, &["--cpus", ""]),
    (ECHO, &["--cpus", "3-1"]),
    (ECHO, &["--cpus", "99999"]),
    (
        NONE,
        &["tcp-echo", "-i", "nosuchif0", "-p", "9", "--cpus", " , "],
    ),
    (NONE, &["demo", "--cpus", ""]),
    (NONE, &["replay", "--cpus", "", "/dev/null"]),
    // Ports, addresses, names.
    (NONE, &["echo", "-i", "nosuchif0", "-p", "0"]),
    (NONE, &["echo", "-i", "nosuchif0", "-p", "65536"]),
    (NONE, &["tcp-echo", "-i", "nosuchif0", "-p", "0"]),
    (PROXY, &["nothere"]),
    (PROXY, &["127.0.0.1:9", "--max-flows", "0"]),
    (ECHO, NONE),
    (NONE, &["tcp-echo", "-i", "nosuchif0", "-p", "9"]),
    (ECHO, &["--topology", "garbage"]),
    (ECHO, &["--rss-key", "zz"]),
    (NONE, &["topology", "--synthetic", "garbage"]),
    // Files.
    (NONE, &["replay", "/nonexistent/trace.txt"]),
    (NONE, &["plot", "/nonexistent/results.json"]),
    // Flags that do not exist.
    (NONE, &["echo", "--nope"]),
    (NONE, &["no-such-command"]),
    (NONE, &["balance-sim", "--workers", "0"]),
    // The ntuple hook on a device without ntuple filters (lo), before
    // anything is attached; a zero rule budget.
    (ECHO_LO, &["--steer-hook", "ntuple"]),
    (ECHO_LO, &["--ntuple-rules", "0"]),
    // Least privilege: an empty or unknown user or group, a group without
    // a user, a seccomp mode that does not exist.
    (ECHO, &["--user", ""]),
    (ECHO_LO, &["--user", "steer-no-such-user"]),
    (
        ECHO_LO,
        &["--user", "nobody", "--group", "steer-no-such-group"],
    ),
    (ECHO_LO, &["--group", "nogroup"]),
    (ECHO_LO, &["--seccomp", "maybe"]),
    (TCP_ECHO, &["--user", "steer-no-such-user"]),
    (NONE, &["rfs", "-i", "lo", "-p", "9", "--user", ""]),
    // steer rfs: no port, port 0, an unknown interface.
    (NONE, &["rfs", "-i", "lo"]),
    (NONE, &["rfs", "-i", "lo", "-p", "0"]),
    (
        NONE,
        &["rfs", "-i", "nosuchif0", "-p", "9", "--duration", "1"],
    ),
];

#[test]
fn every_bad_value_gets_one_line_and_a_failing_exit() {
    let mut problems = Vec::new();
    for (prefix, rest) in BAD {
        let args = [*prefix, *rest].concat();
        let out = Command::new(env!("CARGO_BIN_EXE_steer"))
            .args(&args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let ok = !out.status.success()
            && lines.len() == 1
            && lines[0].starts_with("steer")
            && !stderr.contains("panicked");
        if !ok {
            problems.push(format!("{args:?}: {} {stderr:?}", out.status));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
