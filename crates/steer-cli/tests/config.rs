//! `steer echo --config FILE` as an operator runs it: the server's options
//! from a TOML file, the command line overriding it, and a bad file
//! refused in one line before anything is attached. Needs root, as CI
//! runs it.

mod support;

use std::process::{Command, Stdio};

use steer_testbed::TestNet;
use support::{drive_flows, PORT};

#[test]
fn echo_serves_with_its_options_from_a_file() {
    let net = TestNet::new();
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let file = dir.path().join("echo.toml");
    // The port in the file is wrong on purpose: the command line's wins.
    let text = format!(
        "interface = \"{}\"\nport = [9]\ncpus = \"0\"\nno-table = true\nduration = 3\nstats_json = \"{}\"\n",
        net.host,
        stats.display()
    );
    std::fs::write(&file, text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_steer"))
        .args(["echo", "--config", file.to_str().unwrap()])
        .args(["--port", &PORT.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert!(line.contains("ready"), "{line}");
    let got = drive_flows(&net, 4, 20, 5);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (i, flow) in got.iter().enumerate() {
        assert_eq!(*flow, (0..20).collect::<Vec<u32>>(), "flow {i}");
    }
    // The file's stats path, duration and worker CPU were used.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let text = report.to_string();
    assert!(text.contains("\"cpu\":0"), "{text}");
    assert!(!text.contains("\"cpu\":1"), "one worker, on CPU 0: {text}");
}

#[test]
fn a_bad_config_file_is_one_line_and_nothing_starts() {
    let net = TestNet::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("echo.toml");
    let cases = [
        ("wokers = 2\n", "unknown key 'wokers'"),
        ("cpus = \"banana\"\n", "(set in "),
        ("port = \"x\"\n", "(set in "),
    ];
    for (body, want) in cases {
        std::fs::write(&file, format!("interface = \"{}\"\n{body}", net.host)).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_steer"))
            .args([
                "echo",
                "--config",
                file.to_str().unwrap(),
                "--duration",
                "3",
            ])
            .args(if body.starts_with("port") {
                vec![]
            } else {
                vec!["-p", "7"]
            })
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("steer echo:"))
            .collect();
        assert_eq!(lines.len(), 1, "{body}: {stderr}");
        assert!(lines[0].contains(want), "{body}: {}", lines[0]);
        assert_eq!(out.status.code(), Some(2), "{body}: {stderr}");
        assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
    }
}
