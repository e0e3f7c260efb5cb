#!/usr/bin/env bash
# loom model checks of steer-core's lock-free ring (crates/steer-core/src/ring).
# Builds steer-core with `--cfg loom` (the ring's `sync` shim then uses loom's
# atomics and UnsafeCell) into its own target dir (target/loom, or
# LOOM_TARGET_DIR), so the normal build is not invalidated, and runs only the
# ring's loom tests. About a minute on 2 cores, mostly the build (the models
# themselves run in ~5 s).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-${CARGO_TARGET_DIR:-target}/loom}"
exec cargo test -p flowsteer-core --release --lib -- ring::loom_tests "$@"
