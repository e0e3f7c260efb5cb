#!/usr/bin/env bash
# The library crates and the `steer` command package as they would be
# published: metadata present, every file a build needs inside its crate
# (the BPF sources, the READMEs), path dependencies versioned, and each
# package builds alone from its .crate file against the others (cargo
# verifies them through a local registry). steer-bench and steer-testbed
# are not published.
set -euo pipefail
cd "$(dirname "$0")/.."
# Cargo unpacks the local registry's crates under registry/src once per
# name and version and reuses what an earlier run unpacked: drop those
# copies of our own packages (no flowsteer crate comes from crates.io), so
# the sources verified are this tree's.
# Built packages are taken as immutable too (fingerprinted by name and
# version): the verification builds in a target directory of its own,
# whose dependencies are kept between runs and whose builds of our
# packages are forgotten before each.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/flowsteer-*
verify="${CARGO_TARGET_DIR:-target}/package-verify"
rm -rf "$verify"/package "$verify"/debug/.fingerprint/flowsteer-* "$verify"/debug/build/flowsteer-*
CARGO_TARGET_DIR="$verify" cargo package --workspace --exclude steer-bench --exclude steer-testbed --allow-dirty
