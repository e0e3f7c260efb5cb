#!/usr/bin/env bash
# Documentation builds without a warning: broken intra-doc links, links to
# private items, bad code-block attributes. Only the workspace's crates are
# documented (--no-deps); their doc tests run in ci/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTDOCFLAGS="-D warnings ${RUSTDOCFLAGS:-}" cargo doc --workspace --no-deps
