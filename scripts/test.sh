#!/usr/bin/env bash
# Installs what is needed and runs the whole test suite, as root (the AF_XDP
# tests build veth pairs in network namespaces of their own). Fails on the
# first failing check. This is what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

step() { printf '\n=== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test (unit, integration, examples, benches in test mode)"
cargo test --workspace --all-targets

step "cargo test --doc"
cargo test --workspace --doc

if [ -x scripts/loom.sh ]; then
  step "loom model checks of the lock-free ring"
  scripts/loom.sh
fi
echo
echo "all checks passed"
