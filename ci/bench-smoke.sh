#!/usr/bin/env bash
# The benchmark scripts still work end to end: the sockperf output parser's
# self-test, shell syntax of every script, then quick runs of the kernel
# comparison, of each seed reproduction, of the demo and of the AF_XDP
# rate benchmark.
#
# A 2 s window is too short for the goals; the quick runs check that each
# script still drives its binaries and finds every number it reports (exit 2
# otherwise). They run the debug `steer` command (numbers are not checked here; a
# release build would double CI's time); the criterion parts need the bench
# profile. Run as root (namespaces, XDP).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build -p steer-bench -p steer-cli
export STEER_BENCH="${CARGO_TARGET_DIR:-$PWD/target}/debug/steer-bench"
bash benches/compare-kernel.sh --self-test
for f in ci/*.sh scripts/*.sh benches/*.sh benches/seeds/*.sh; do
  [ -e "$f" ] && bash -n "$f"
done

export STEER="${CARGO_TARGET_DIR:-$PWD/target}/debug/steer"
cargo bench --no-default-features --bench table --bench dispatch --no-run
bash benches/compare-kernel.sh --quick
# steer-bench: every server (XDP_TX reflector, raw AF_XDP turnaround, steer,
# kernel echo, sockperf server, the two proxies) through every phase, 1 s windows; exits 2
# unless it finds every number.
"$STEER_BENCH" run --quick --steer-cmd "$STEER echo"
for f in benches/seeds/seed*.sh; do
  bash "$f" --quick
done
# The demo (sockperf clients against `steer echo`, the summary) and the
# AF_XDP rates, each a few seconds on the debug builds; both exit non-zero
# when no traffic went through or the frames do not balance.
bash scripts/demo.sh --quick
bash scripts/bench-xdp.sh --quick
