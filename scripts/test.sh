#!/usr/bin/env bash
# Installs what is needed and runs every check, as root (the AF_XDP tests
# build veth pairs in network namespaces of their own). This is what .ci/run
# calls. Each check is its own script under ci/, run with `bash` (so a lost
# execute bit cannot skip one) in this order; the first failure stops the run.
# Each prints how long it took.
#
#   ci/fmt.sh          cargo fmt --check (workspace and fuzz targets)
#   ci/clippy.sh       clippy on all targets, warnings denied
#   ci/msrv.sh         every target checked with the declared rust-version
#   ci/doc.sh          cargo doc with RUSTDOCFLAGS=-D warnings
#   ci/package.sh      the published crates packaged and each built from its .crate
#   ci/test.sh         unit, integration and doc tests; each bench once
#   ci/bench-smoke.sh  the benchmark scripts, quick end-to-end runs
#   ci/loom.sh         loom model checks of the ring
#   ci/fuzz.sh         every cargo-fuzz target (parsers, pcap, trace, stats, metrics), 90 s in all (nightly)
#   ci/asan.sh         AddressSanitizer over the ring and the UMEM/socket tests (nightly)
#
# Run one check alone with `bash ci/<name>.sh`; `scripts/test.sh NAME...`
# runs only the named ones (after setup).
#
# Each check has a time limit (below, a few times its usual length on a
# slow, fresh machine, where the first build of a check and installing
# cargo-fuzz come on top): a check that hangs (a test waiting on a wedged kernel,
# say) is killed and fails with its output so far, rather than running the
# whole CI into its own deadline with nothing on record.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

all=(fmt clippy msrv doc package test bench-smoke loom fuzz asan)
checks=("${all[@]}")
if [ $# -gt 0 ]; then
  checks=("$@")
fi
for c in "${checks[@]}"; do
  if [ ! -f "ci/$c.sh" ]; then
    echo "test.sh: no check ci/$c.sh (the checks: ${all[*]})" >&2
    exit 2
  fi
done

# Seconds each check may take.
limit() {
  case "$1" in
    fmt) echo 300 ;;
    clippy | doc) echo 1800 ;;
    test) echo 2700 ;;
    bench-smoke | fuzz | asan) echo 2400 ;;
    *) echo 1200 ;;
  esac
}

total=$SECONDS
for c in "${checks[@]}"; do
  printf '\n=== ci/%s.sh\n' "$c"
  start=$SECONDS
  rc=0
  timeout --kill-after=30 "$(limit "$c")" bash "ci/$c.sh" || rc=$?
  if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      printf '=== ci/%s.sh: TIMED OUT after %d s (limit %s s)\n' "$c" $((SECONDS - start)) "$(limit "$c")"
    else
      printf '=== ci/%s.sh: FAILED (exit %d) after %d s\n' "$c" "$rc" $((SECONDS - start))
    fi
    exit 1
  fi
  printf '=== ci/%s.sh: ok in %d s\n' "$c" $((SECONDS - start))
done
echo
echo "all checks passed in $((SECONDS - total)) s"
