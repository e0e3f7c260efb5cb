//! `steer-bench seed` through its command line: the medians of the
//! committed results are the README's tables, a quick replica-only run of
//! seeds 002/004 writes a result the medians read back (no root, no
//! network), and bad input gives one line and exit status 2 from clap.

mod common;

use std::path::{Path, PathBuf};

use common::{bench, take_json};

fn seeds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/seeds")
}

#[test]
fn medians_of_the_committed_results() {
    let results = seeds_dir().join("results");
    let files: Vec<String> = (1..=3)
        .map(|n| {
            results
                .join(format!("seed003-fast-path-{n}.json"))
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let mut args = vec!["seed", "medians"];
    args.extend(files.iter().map(String::as_str));
    let o = bench(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = std::fs::read_to_string(seeds_dir().join("fixtures/medians-seed003.md")).unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), want);
    // One seed at a time.
    let other = results.join("seed000-llc-steering-1.json");
    let o = bench(&["seed", "medians", &files[0], &other.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not from"));
}

#[test]
fn a_replica_run_writes_what_the_medians_read() {
    let json = std::env::temp_dir().join(format!("sb-seeds-{}.json", std::process::id()));
    let o = bench(&[
        "seed",
        "002-004",
        "--replica-only",
        "-t",
        "0.05",
        "--runs",
        "2",
        "--json",
        &json.to_string_lossy(),
    ]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    // Each run's table, then the medians of both.
    assert_eq!(
        out.matches("split/packed under two threads: lookups")
            .count(),
        2,
        "{out}"
    );
    assert!(
        out.contains("medians of 2 runs of steer-bench seed 002-004"),
        "{out}"
    );
    assert!(
        !out.contains("(criterion, benches/table.rs)"),
        "--replica-only: {out}"
    );
    for n in 1..=2 {
        let f = json.with_file_name(format!(
            "{}-{n}.json",
            json.file_stem().unwrap().to_string_lossy()
        ));
        let doc = take_json(&f);
        assert_eq!(doc["tool"], "steer-bench seed 002-004");
        assert_eq!(doc["format"], 1);
        assert_eq!(doc["replica"].as_array().unwrap().len(), 6);
        assert_eq!(doc["config"]["criterion"], false);
        assert!(doc["host"]["loadavg_1_5_15"].is_string());
    }
}

#[test]
fn bad_input_gives_one_line() {
    for (args, want) in [
        (&["seed", "005"][..], "unrecognized subcommand"),
        (&["seed", "000", "--flows", "0"][..], "--flows"),
        (&["seed", "000-tcp", "--conns", "0"][..], "--conns"),
        (&["seed", "003", "--layouts", "4cpu"][..], "4cpu"),
        (
            &["seed", "002-004", "--criterion-only", "--replica-only"][..],
            "cannot be used with",
        ),
        (&["seed", "medians"][..], "required"),
    ] {
        let o = bench(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
