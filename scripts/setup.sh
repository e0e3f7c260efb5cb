#!/usr/bin/env bash
# Installs what steer needs on a Debian machine, as root. Idempotent: packages
# already present are left alone and apt is not touched at all when nothing is
# missing.
set -euo pipefail

PACKAGES=(
  # build: libxdp/libbpf (C, built by libxdp-sys), the XDP program (clang -target bpf), hwloc
  build-essential pkg-config m4 clang llvm libelf-dev zlib1g-dev libzstd-dev
  libhwloc-dev libudev-dev hwloc
  # tests and demos: namespaces and veth, ping, load generators, XDP tools
  iproute2 iputils-ping sockperf xdp-tools bpftool
  # unmodified servers for the in-kernel recorder (steer rfs) tests: TCP
  # (iperf3) and UDP (dnsmasq, driven by dnsperf)
  iperf3 dnsmasq-base dnsperf
  # ... and a connected-UDP server (a few lines of Python)
  python3
  # the kernel-socket tests' full-checksum senders (ethtool -K tx off)
  ethtool
  # the engine tests drop privileges with setpriv
  util-linux
  # metrics tests: promtool checks a scrape, a real Prometheus server scrapes
  # a running engine; `steer top` is driven in a terminal through tmux
  prometheus tmux
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: run as root (apt-get install, network namespaces and XDP need it): sudo $0" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Not installed here, as no test needs it: valgrind, for the instruction
# counts of docs/performance.md (`apt-get install valgrind`).

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install a stable Rust toolchain (rustup) and put ~/.cargo/bin on PATH" >&2
  exit 1
fi
echo "setup: ok ($(cargo --version))"
