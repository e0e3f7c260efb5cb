#!/usr/bin/env bash
# AF_XDP rates on a veth pair (rx-drop, rx-tx) against the kernel-only XDP
# drop ceiling measured in the same run, printed as ratios. Needs root: it
# builds its own network namespace and veth pair and removes them afterwards.
# Usage: scripts/bench-xdp.sh [seconds-per-phase]   (default 3)
#        scripts/bench-xdp.sh --quick   (CI's smoke run: debug build, 1 s
#                                        phases, without xdp-tools' run)
# Exits non-zero when a phase moved no packet or the frames do not balance.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "bench-xdp: run as root (namespaces, veth, XDP): sudo $0" >&2
  exit 1
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
if [ "${1:-}" = "--quick" ]; then
  cargo build -q -p flowsteer-xdp --example xdp_bench
  XDP_BENCH_NO_TOOLS=1 "$CARGO_TARGET_DIR/debug/examples/xdp_bench" 1 \
    2> >(grep -v '^libbpf\|^libxdp' >&2)
  exit
fi
cargo build --release -q -p flowsteer-xdp --example xdp_bench
"$CARGO_TARGET_DIR/release/examples/xdp_bench" "${1:-3}" 2> >(grep -v '^libbpf\|^libxdp' >&2)
