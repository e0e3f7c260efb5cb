//! `steer topology` as a user runs it: one JSON object on stdout, or a
//! one-line error and a non-zero exit on bad input.

use std::process::Command;

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_steer"))
        .arg("topology")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn seed_machine_report() {
    let (ok, stdout, _) = run(&["--synthetic", "pack:2 l3:16 core:8 pu:1"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["source"], "synthetic");
    assert_eq!(v["cpus"].as_array().unwrap().len(), 256);
    let llcs = v["llcs"].as_array().unwrap();
    assert_eq!(llcs.len(), 32);
    assert_eq!(llcs[31], serde_json::json!((248..256).collect::<Vec<_>>()));
    assert!(
        stdout.starts_with(r#"{"source":"synthetic","cpus":[0,1,"#),
        "{stdout}"
    );
}

#[test]
fn live_report_lists_the_online_cpus() {
    let (ok, stdout, _) = run(&[]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["source"], "hwloc");
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let want: steer_core::cpu::CpuSet = online.parse().unwrap();
    let got: Vec<usize> = serde_json::from_value(v["cpus"].clone()).unwrap();
    assert_eq!(got, want.iter().collect::<Vec<_>>());
}

#[test]
fn xml_report() {
    let xml = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../steer-topology/tests/fixtures/two-socket-numa.xml"
    );
    let (ok, stdout, _) = run(&["--xml", xml]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["source"], "xml");
    assert_eq!(v["llcs"].as_array().unwrap().len(), 4);
    assert_eq!(v["numa"].as_array().unwrap().len(), 2);
}

#[test]
fn bad_input_exits_non_zero_with_one_line_naming_it() {
    for (args, needle) in [
        (vec!["--synthetic", "pack:2 l3:x"], "pack:2 l3:x"),
        (vec!["--xml", "/nonexistent.xml"], "/nonexistent.xml"),
    ] {
        let (ok, stdout, stderr) = run(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(stdout.is_empty());
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
}
