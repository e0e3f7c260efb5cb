//! Every subcommand over a table of bad values: each run must fail with a
//! non-zero exit and exactly one line on stderr that names the command, and
//! never panic. Nothing here attaches a program: the values are refused
//! before, or the interface does not exist.

use std::process::Command;

/// Arguments that must be refused.
const BAD: &[&[&str]] = &[
    // Numbers that are no time.
    &["tcp-load", "--connect", "127.0.0.1:9", "--duration", "inf"],
    &["tcp-load", "--connect", "127.0.0.1:9", "--duration", "-1"],
    &["tcp-load", "--connect", "127.0.0.1:9", "--duration", "NaN"],
    &["tcp-load", "--connect", "127.0.0.1:9", "--connections", "0"],
    &[
        "tcp-echo",
        "-p",
        "9",
        "--steer",
        "none",
        "--duration",
        "inf",
    ],
    &["echo", "-i", "nosuchif0", "-p", "9", "--duration", "1e300"],
    &[
        "proxy",
        "-i",
        "nosuchif0",
        "-p",
        "9",
        "--backend",
        "127.0.0.1:9",
        "--idle-timeout",
        "inf",
    ],
    &["demo", "--move-every=-1"],
    &["demo", "--move-every", "0"],
    &["demo", "--rate", "inf"],
    &["demo", "--seconds", "nan"],
    &["stats", "--timeout", "nan"],
    &["top", "--interval", "0"],
    // CPU lists.
    &["echo", "-i", "nosuchif0", "-p", "9", "--cpus", ""],
    &["echo", "-i", "nosuchif0", "-p", "9", "--cpus", "3-1"],
    &["echo", "-i", "nosuchif0", "-p", "9", "--cpus", "99999"],
    &["tcp-echo", "-i", "nosuchif0", "-p", "9", "--cpus", " , "],
    &["demo", "--cpus", ""],
    &["replay", "--cpus", "", "/dev/null"],
    // Ports, addresses, names.
    &["echo", "-i", "nosuchif0", "-p", "0"],
    &["echo", "-i", "nosuchif0", "-p", "65536"],
    &["tcp-echo", "-i", "nosuchif0", "-p", "0"],
    &[
        "proxy",
        "-i",
        "nosuchif0",
        "-p",
        "9",
        "--backend",
        "nothere",
    ],
    &[
        "proxy",
        "-i",
        "nosuchif0",
        "-p",
        "9",
        "--backend",
        "127.0.0.1:9",
        "--max-flows",
        "0",
    ],
    &["echo", "-i", "nosuchif0", "-p", "9"],
    &["tcp-echo", "-i", "nosuchif0", "-p", "9"],
    &[
        "echo",
        "-i",
        "nosuchif0",
        "-p",
        "9",
        "--topology",
        "garbage",
    ],
    &["echo", "-i", "nosuchif0", "-p", "9", "--rss-key", "zz"],
    &["topology", "--synthetic", "garbage"],
    // Files.
    &["replay", "/nonexistent/trace.txt"],
    &["plot", "/nonexistent/results.json"],
    // Flags that do not exist.
    &["echo", "--nope"],
    &["no-such-command"],
    &["balance-sim", "--workers", "0"],
    // The ntuple hook on a device without ntuple filters (lo), before
    // anything is attached; a zero rule budget.
    &["echo", "-i", "lo", "-p", "9", "--steer-hook", "ntuple"],
    &["echo", "-i", "lo", "-p", "9", "--ntuple-rules", "0"],
    // Least privilege: an empty or unknown user or group, a group without
    // a user, a seccomp mode that does not exist.
    &["echo", "-i", "nosuchif0", "-p", "9", "--user", ""],
    &[
        "echo",
        "-i",
        "lo",
        "-p",
        "9",
        "--user",
        "steer-no-such-user",
    ],
    &[
        "echo",
        "-i",
        "lo",
        "-p",
        "9",
        "--user",
        "nobody",
        "--group",
        "steer-no-such-group",
    ],
    &["echo", "-i", "lo", "-p", "9", "--group", "nogroup"],
    &["echo", "-i", "lo", "-p", "9", "--seccomp", "maybe"],
    &[
        "tcp-echo",
        "-p",
        "9",
        "--steer",
        "none",
        "--user",
        "steer-no-such-user",
    ],
    &["rfs", "-i", "lo", "-p", "9", "--user", ""],
    // steer rfs: no port, port 0, an unknown interface.
    &["rfs", "-i", "lo"],
    &["rfs", "-i", "lo", "-p", "0"],
    &["rfs", "-i", "nosuchif0", "-p", "9", "--duration", "1"],
];

#[test]
fn every_bad_value_gets_one_line_and_a_failing_exit() {
    let mut problems = Vec::new();
    for args in BAD {
        let out = Command::new(env!("CARGO_BIN_EXE_steer"))
            .args(*args)
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
