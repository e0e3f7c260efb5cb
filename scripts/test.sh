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

step "cargo test (unit, integration, doc tests; builds the examples the tests run)"
cargo test --workspace

step "cargo test --benches (each bench once, so they keep working)"
cargo test --workspace --benches

step "bench scripts: sockperf output parser self-test (steer-bench), shell syntax"
cargo build -p steer-bench
export STEER_BENCH="${CARGO_TARGET_DIR:-$PWD/target}/debug/steer-bench"
bash benches/compare-kernel.sh --self-test
for f in scripts/*.sh benches/*.sh benches/seeds/*.sh; do
  [ -e "$f" ] && bash -n "$f"
done

step "bench scripts: quick smoke runs (kernel comparison, seed reproductions)"
# A 2 s window is too short for the goals; these runs check that each script
# still drives its binaries end to end and finds every number it reports
# (exit 2 otherwise). They run the debug examples `cargo test` just built
# (numbers are not checked here; a release build would double CI's time);
# the criterion parts need the bench profile.
examples="${CARGO_TARGET_DIR:-$PWD/target}/debug/examples"
export ECHO_SERVER="$examples/echo_server" UDP_PROXY="$examples/udp_proxy"
cargo bench --no-default-features --bench table --bench dispatch --no-run
bash benches/compare-kernel.sh --quick
# steer-bench: every server (XDP_TX reflector, raw AF_XDP turnaround, steer,
# kernel echo, sockperf server) through every phase, 1 s windows; exits 2
# unless it finds every number.
"$STEER_BENCH" run --quick --steer-cmd "$examples/echo_server"
for f in benches/seeds/seed*.sh; do
  bash "$f" --quick
done

if [ -x scripts/loom.sh ]; then
  step "loom model checks of the lock-free ring"
  scripts/loom.sh
fi
echo
echo "all checks passed"
