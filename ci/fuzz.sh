#!/usr/bin/env bash
# Timed runs of steer-core's cargo-fuzz targets (crates/steer-core/fuzz):
# `parse` (no input may panic the frame parser, and the flow key's and the
# classifier's fast paths must agree with it on every input), `echo` (the
# in-place UDP echo: no panic, replies inside the frame and addressed back,
# refused frames untouched) and `cpu_list` (the CPU-list parser: no panic,
# what it accepts prints back to the same set).
#
# libFuzzer needs nightly (sanitizer coverage, -Zsanitizer=address, which
# cargo-fuzz turns on by default): the run is skipped, with the reason
# printed, where `cargo +nightly` is absent. cargo-fuzz is installed from
# crates.io when missing. The build goes to its own target dir (target/fuzz)
# so the nightly flags do not invalidate the stable build. New inputs go to
# a scratch corpus per target, target/fuzz/corpus/TARGET (kept between
# runs), seeded from the checked-in fuzz/seeds/TARGET where there is one
# (echo starts from parse's frames), which stays unchanged. A crash fails the run; cargo-fuzz prints the input
# and saves it under crates/steer-core/fuzz/artifacts/TARGET.
#
# FUZZ_SECONDS sets the fuzzing time in all (default 60, split as 30 for
# parse and 15 each for the others; the build comes on top).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: skipped: no nightly toolchain (rustup toolchain install nightly)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz from crates.io"
  cargo install cargo-fuzz --locked
fi

target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
total="${FUZZ_SECONDS:-60}"
cd crates/steer-core
for spec in "parse 2" "echo 4" "cpu_list 4"; do
  read -r target share <<<"$spec"
  corpus="$target_dir/corpus/$target"
  mkdir -p "$corpus"
  # The echo starts from the parser's frames.
  seed_dir="fuzz/seeds/$target"
  [ "$target" = echo ] && seed_dir=fuzz/seeds/parse
  seeds=()
  [ -d "$seed_dir" ] && seeds=("$seed_dir")
  secs=$(( total / share > 1 ? total / share : 1 ))
  echo "fuzz: $target for ${secs} s"
  cargo +nightly fuzz run --target-dir "$target_dir" "$target" "$corpus" "${seeds[@]}" \
    -- -max_total_time="$secs"
done
