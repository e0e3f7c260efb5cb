//! `steer plot` on the committed results: seed 000's three JSON files
//! (benches/seeds/results) and a steer-bench report (tests/fixtures) become
//! SVG documents that parse as XML, with the series and the numbers of the
//! input in them; bad input is one line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `steer ARGS`.
fn steer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_steer"))
        .args(args)
        .output()
        .unwrap()
}

/// The one error line of a failed `steer <command>`.
fn one_line_error(command: &str, out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected: {stderr}");
    assert!(
        lines[0].starts_with(&format!("steer {command}:")),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    lines[0].to_owned()
}

/// A directory of this test's own.
fn out_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("steer-plot-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn repo(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
        .to_string_lossy()
        .into_owned()
}

/// The texts of an SVG document, which must parse, with `<svg>` at its root.
fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_owned())
        .collect()
}

#[test]
fn seed000_results_become_one_line_per_topology_and_policy() {
    let out = out_dir("seed");
    let files: Vec<String> = (1..=3)
        .map(|i| {
            repo(&format!(
                "benches/seeds/results/seed000-llc-steering-{i}.json"
            ))
        })
        .collect();
    let mut args = vec!["plot", "--out", out.to_str().unwrap()];
    args.extend(files.iter().map(String::as_str));
    let run = steer(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let svg = out.join("seed000-updates.svg");
    assert_eq!(
        String::from_utf8_lossy(&run.stdout).trim(),
        svg.to_str().unwrap()
    );
    let texts = svg_texts(&svg);
    for series in [
        "machine's topology (1 LLC), always",
        "machine's topology (1 LLC), llc",
        "model: CPUs in 2 LLCs, always",
        "model: CPUs in 2 LLCs, llc",
    ] {
        assert!(texts.iter().any(|t| t == series), "{series} in {texts:?}");
    }
    // The hook calls/s of run 1 (1994.2, 0) and run 2 (machine, always: 2609).
    for value in ["1994", "0", "2609", "run 1", "run 3"] {
        assert!(texts.iter().any(|t| t == value), "{value} in {texts:?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_steer_bench_report_becomes_bar_panels() {
    let out = out_dir("bench");
    let file = repo("crates/steer-cli/tests/fixtures/steer-bench-quick.json");
    let run = steer(&["plot", &file, "-o", out.to_str().unwrap()]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let texts = svg_texts(&out.join("bench-steer-bench-quick.svg"));
    for t in [
        "steer",
        "kernel-echo",
        "sockperf",
        "capacity, replies/s (higher is better)",
        "p99 latency, us (lower is better)",
        "own CPU us per reply at 50k replies/s (lower is better)",
        // steer's capacity 15232/s and own cost at 200k/s 68.84 us.
        "15k",
        "68.84",
    ] {
        assert!(texts.iter().any(|x| x == t), "{t} in {texts:?}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_input_is_one_line() {
    let dir = out_dir("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let not_json = dir.join("x.json");
    std::fs::write(&not_json, "{ nope").unwrap();
    let other = dir.join("other.json");
    std::fs::write(&other, r#"{"tool": "benches/seeds/seed003-fast-path.sh"}"#).unwrap();
    for (file, want) in [
        (not_json.to_str().unwrap(), "not JSON"),
        (other.to_str().unwrap(), "not a report steer plot reads"),
        ("/nonexistent/steer.json", "No such file"),
    ] {
        let line = one_line_error("plot", &steer(&["plot", file, "-o", dir.to_str().unwrap()]));
        assert!(line.contains(want) && line.contains(file), "{line}");
    }
    assert!(!dir.join("seed000-updates.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
