#!/usr/bin/env bash
# The LLC rule with real readers on a machine with two LLCs, in a VM: run
# inside a 4-vCPU guest whose topology has two sockets of two cores (hwloc
# then reports the LLCs {0,1} and {2,3}). An unmodified dnsmasq, not pinned
# (the guest's scheduler moves it), answers dnsperf's 4 senders from a
# namespace; `steer rfs -u` records each sender's flow on the CPU dnsmasq
# reads it on, under `always` and `llc` in turn. Each run prints the
# recorder's updates and suppressions and how often dnsmasq migrated.
#
# From the repository root, as root, with the release build done:
#   apt-get install qemu-system-x86 linux-image-amd64 busybox-static dnsmasq-base dnsperf
#   pip install virtme-ng
#   vng --run /boot/vmlinuz-* --disable-kvm --cpus 4 --memory 2G --rwdir /tmp \
#       --qemu-opts="-smp 4,sockets=2,cores=2,threads=1" \
#       --exec "bash benches/vm/llc-updates.sh [RUNS]"
# (benches/README.md, "The LLC rule with real readers on two LLCs").
set -euo pipefail
cd "$(dirname "$0")/../.."
steer=target/release/steer
runs=${1:-4}
out=$(mktemp -d)
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
mkdir -p /run/netns
ip netns add llc-client
ip link add llc0 type veth peer name llc1
ip link set llc1 netns llc-client
ip addr add 10.77.0.1/24 dev llc0
ip link set llc0 up
ip netns exec llc-client ip addr add 10.77.0.2/24 dev llc1
ip netns exec llc-client ip link set llc1 up
ip netns exec llc-client ip link set lo up
printf 'a.steer.test A\nb.steer.test A\n' > "$out/queries"
"$steer" topology
for i in $(seq "$runs"); do
  for policy in always llc; do
    "$steer" rfs -i llc0 -u 5353 --policy "$policy" --duration 16 \
      --stats-json "$out/$policy-$i.json" > "$out/rfs.log" 2>&1 &
    rfs=$!
    sleep 3
    dnsmasq -k --conf-file=/dev/null --pid-file= --port=5353 --listen-address=10.77.0.1 \
      --bind-interfaces --no-resolv --no-hosts --user=root --group=root --cache-size=0 \
      --address=/steer.test/10.9.9.9 > /dev/null 2>&1 &
    dns=$!
    sleep 1
    ip netns exec llc-client dnsperf -s 10.77.0.1 -p 5353 -d "$out/queries" -c 4 -l 10 -Q 300 \
      > "$out/dnsperf.txt" 2>&1
    migrations=$(awk '/nr_migrations/ {print $3}' "/proc/$dns/sched")
    kill "$dns"
    wait "$rfs"
    recorder=$(python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["recorder"]))' "$out/$policy-$i.json")
    echo "$policy run $i: dnsmasq migrations $migrations, recorder $recorder"
  done
done
