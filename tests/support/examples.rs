//! The example binaries the end-to-end tests run, as a user would.
//!
//! `cargo test --workspace` builds every example next to the test binaries'
//! `deps/` directory; a run of a single test target (`cargo test --test
//! engine`) does not, so a missing example is built here first, with the
//! same cargo and profile as the test.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// Serialises on-demand builds between the tests of one binary.
static BUILD: Mutex<()> = Mutex::new(());

/// The path of example `name`, built if it is not there yet.
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary in target/<profile>/deps");
    let path = profile_dir.join("examples").join(name);
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !path.exists() {
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--quiet", "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("running cargo to build an example");
        assert!(status.success(), "cargo build --example {name} failed");
    }
    assert!(path.exists(), "{} not built", path.display());
    path
}
