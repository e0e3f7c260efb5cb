#!/usr/bin/env bash
# Timed runs of every cargo-fuzz target (one crate for the workspace, fuzz/),
# one per reader of untrusted input, each asserting properties, not only
# "no panic":
#
#   parse     steer-core's frame parser and flow key: offsets inside the
#             frame; the flow key's and the classifier's fast paths agree
#             with the full parser; symmetric hashes are symmetric
#   echo      the in-place UDP echo: replies inside the frame and addressed
#             back, refused frames untouched
#   cpu_list  the CPU-list parser: what it accepts prints back to the set
#   pcap      steer-replay's pcap/pcapng reader: no frame longer than its
#             stated capture length, the frames fit in the input, times
#             never go backwards, every frame counted once, one-line errors
#   trace     steer-replay's trace lines: an event prints to a line that
#             parses to the same event; engine counts bounded
#   stats     the stats socket's request parser and reply: one line of
#             JSON, the snapshot only for `stats`, small errors; a control
#             line (`steer ctl`) prints back to itself, and is refused to a
#             client that may not control
#   metrics   the /metrics request parser and response: well-formed HTTP,
#             Content-Length its body's, 200 only for GET/HEAD /metrics
#
# libFuzzer needs nightly (sanitizer coverage, -Zsanitizer=address, which
# cargo-fuzz turns on by default): the run is skipped, with the reason
# printed, where `cargo +nightly` is absent. cargo-fuzz is installed from
# crates.io when missing. The fuzz crate is a workspace of its own; its
# lock starts as a copy of the workspace's (fuzz/Cargo.lock, not checked
# in), so it builds the same dependency versions. All targets are built
# first, once, into their own target dir (target/fuzz) so the nightly flags
# do not invalidate the stable build. New inputs go to a scratch corpus per
# target, target/fuzz/corpus/TARGET (kept between runs), seeded from the
# checked-in fuzz/seeds/TARGET (echo starts from parse's frames), which
# stays unchanged. A crash fails the run; cargo-fuzz prints the input and
# saves it under fuzz/artifacts/TARGET (keep it as a unit test beside the
# reader once fixed).
#
# FUZZ_SECONDS sets the fuzzing time in all (default 90), split by weight:
# parse and pcap 2 shares each, the others 1 (of 9; at least 1 s each). The
# build comes on top (a few minutes from scratch, seconds after).
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
total="${FUZZ_SECONDS:-90}"
specs=("parse 2" "echo 1" "cpu_list 1" "pcap 2" "trace 1" "stats 1" "metrics 1")
shares=0
for spec in "${specs[@]}"; do
  read -r _ share <<<"$spec"
  shares=$((shares + share))
done

[ -f fuzz/Cargo.lock ] || cp Cargo.lock fuzz/Cargo.lock
start=$SECONDS
cargo +nightly fuzz build --target-dir "$target_dir"
echo "fuzz: built every target in $((SECONDS - start)) s"

for spec in "${specs[@]}"; do
  read -r target share <<<"$spec"
  corpus="$target_dir/corpus/$target"
  mkdir -p "$corpus"
  # The echo starts from the parser's frames.
  seed_dir="fuzz/seeds/$target"
  [ "$target" = echo ] && seed_dir=fuzz/seeds/parse
  seeds=()
  [ -d "$seed_dir" ] && seeds=("$seed_dir")
  secs=$((total * share / shares))
  [ "$secs" -ge 1 ] || secs=1
  echo "fuzz: $target for ${secs} s"
  cargo +nightly fuzz run --target-dir "$target_dir" "$target" "$corpus" "${seeds[@]}" \
    -- -max_total_time="$secs" -timeout=10
done
echo "fuzz: every target passed; $((SECONDS - start)) s in all"
