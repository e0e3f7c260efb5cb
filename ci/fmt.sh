#!/usr/bin/env bash
# Formatting, check only: the workspace, and the fuzz targets (their crate
# is a workspace of its own, so `cargo fmt --all` does not reach them).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
rustfmt --check --edition 2021 fuzz/fuzz_targets/*.rs
