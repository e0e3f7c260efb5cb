#!/usr/bin/env bash
# Unit, integration and doc tests of the workspace (the AF_XDP ones build
# veth pairs in network namespaces of their own: run as root), then each
# criterion bench once, so the benches keep working, then the hostile-traffic
# test against release builds. Builds the examples the
# tests and ci/bench-smoke.sh run.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
cargo test --workspace --benches
# The hostile-traffic bounds on latency need an optimized proxy (the debug
# run above checks survival and memory only).
cargo test --release -p flowsteer-cli --test hostile
