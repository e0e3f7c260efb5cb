//! What the steer-bench command tests share: running the binary and
//! reading the JSON it wrote.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs `steer-bench ARGS`.
pub fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_steer-bench"))
        .args(args)
        .output()
        .expect("running steer-bench")
}

/// The JSON document at `path`, parsed; the file is removed.
pub fn take_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let _ = std::fs::remove_file(path);
    serde_json::from_str(&text).unwrap()
}
