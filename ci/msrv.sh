#!/usr/bin/env bash
# The workspace builds with the Rust it declares as its minimum
# (`rust-version` in Cargo.toml): every crate and target checked with that
# toolchain. The toolchain is taken from rustup (installed if rustup can
# fetch it); a stable toolchain of exactly that version serves as well.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
case "$msrv" in
  *.*.*) full=$msrv ;;
  *) full=$msrv.0 ;;
esac
pick=""
if rustc "+$full" --version >/dev/null 2>&1; then
  pick=$full
elif rustup toolchain install --profile minimal "$full" >/dev/null 2>&1; then
  pick=$full
elif rustc +stable --version 2>/dev/null | grep -q "^rustc $full "; then
  pick=stable
fi
if [ -z "$pick" ]; then
  echo "msrv: Rust $full (rust-version in Cargo.toml) is not installed and rustup could not fetch it: run 'rustup toolchain install $full'" >&2
  exit 1
fi
echo "msrv: checking with $(rustc "+$pick" --version)"
cargo "+$pick" check --workspace --all-targets --locked
