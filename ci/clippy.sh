#!/usr/bin/env bash
# Lints: clippy on every target of every workspace crate, warnings denied
# (the workspace's [workspace.lints] table sets the extra ones, such as
# undocumented_unsafe_blocks).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo clippy --workspace --all-targets -- -D warnings
