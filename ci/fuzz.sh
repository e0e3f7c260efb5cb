#!/usr/bin/env bash
# A timed run of the packet parser's cargo-fuzz target (crates/steer-core/fuzz,
# target `parse`): no input may panic, and the flow key's and the
# classifier's fast paths must agree with the full parser on every input.
#
# libFuzzer needs nightly (sanitizer coverage, -Zsanitizer=address, which
# cargo-fuzz turns on by default): the run is skipped, with the reason
# printed, where `cargo +nightly` is absent. cargo-fuzz is installed from
# crates.io when missing. The build goes to its own target dir (target/fuzz)
# so the nightly flags do not invalidate the stable build. New inputs go to
# a scratch corpus, target/fuzz/corpus/parse (kept between runs), seeded
# from the checked-in fuzz/seeds/parse, which stays unchanged. A crash
# fails the run; cargo-fuzz prints the input and saves it under
# crates/steer-core/fuzz/artifacts/parse.
#
# FUZZ_SECONDS sets the fuzzing time (default 60; the build comes on top).
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
corpus="$target_dir/corpus/parse"
mkdir -p "$corpus"
cd crates/steer-core
cargo +nightly fuzz run --target-dir "$target_dir" parse "$corpus" fuzz/seeds/parse \
  -- -max_total_time="${FUZZ_SECONDS:-60}"
