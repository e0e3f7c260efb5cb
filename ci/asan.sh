#!/usr/bin/env bash
# AddressSanitizer over the code that uses `unsafe` on memory: steer-core's
# ring (its lib tests under ring::, the model tests against a plain queue
# included) and steer-xdp's UMEM and socket code (its unit tests and its
# integration tests; those build veth pairs in network namespaces of their
# own, so run as root, as CI does).
#
# -Zsanitizer needs nightly: skipped, with the reason printed, where
# `cargo +nightly` is absent. What works here: there is no rust-src
# component, so no -Zbuild-std, and the standard library is the prebuilt,
# uninstrumented one. Our own crates (and their Rust dependencies) are
# instrumented, so every access they make is checked, raw-pointer reads and
# writes of ring slots and UMEM frames included. Not checked: loads and
# stores inside std, inside libxdp/libbpf (C, built by their own build
# scripts; their calls to memcpy, strlen and the like are checked by ASan's
# interceptors, and their heap by LeakSanitizer) and by the kernel (writes
# into the UMEM). `--target` is given so that build
# scripts and proc macros, which run on the host, are built without the
# sanitizer. The build goes to its own target dir (target/asan) so the
# nightly flags do not invalidate the stable build.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "asan: skipped: no nightly toolchain (rustup toolchain install nightly)"
  exit 0
fi
host=$(rustc +nightly -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Zsanitizer=address ${RUSTFLAGS:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/asan"
# Suppressed, each with its reason in the file: one over-read inside
# libxdp's C code (asan.supp), the leaks of a test that leaks a port on
# purpose (lsan.supp).
export ASAN_OPTIONS="suppressions=$PWD/ci/asan.supp${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$PWD/ci/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

cargo +nightly test --target "$host" -p flowsteer-core --lib -- ring::
cargo +nightly test --target "$host" -p flowsteer-xdp --lib --tests
