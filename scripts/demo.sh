#!/usr/bin/env bash
# Installs what is needed and runs the demo, as root.
# For now: the topology report of this machine and of the seed machine model
# (2 sockets x 128 cores, 8 cores per L3). The AF_XDP echo demo in a network
# namespace replaces this once the engine lands.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cargo build --release --quiet --example topology
echo "This machine:"
target/release/examples/topology
echo "The seed machine model (pack:2 l3:16 core:8 pu:1):"
target/release/examples/topology --synthetic "pack:2 l3:16 core:8 pu:1"
