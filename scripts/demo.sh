#!/usr/bin/env bash
# The steer demo, as root on a fresh machine: installs what is missing,
# creates a network namespace and a 2-queue veth pair, starts the AF_XDP
# echo server (`steer echo`) on the host end, drives it from the
# namespace with several sockperf clients (several flows), shows the
# server's live per-CPU table, prints a summary, and removes everything it
# created, also when interrupted.
#
#   ./scripts/demo.sh [-t SECONDS] [-c CLIENTS] [--policy llc|always] [--fast-path on|off] [--quick]
#
# --quick: a short smoke run (2 clients for 2 s, 1 s of ping-pong) with the
# debug build, as CI runs it. STEER=/path/to/steer uses that binary instead
# of building one. Exits non-zero when no traffic reached the server or its
# frame accounting does not balance.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=8
clients=4
pp_secs=3
profile=release
policy=llc
fast_path=on
port=11111
while [[ $# -gt 0 ]]; do
    case "$1" in
        -t) secs="$2"; shift 2 ;;
        -c) clients="$2"; shift 2 ;;
        --policy) policy="$2"; shift 2 ;;
        --fast-path) fast_path="$2"; shift 2 ;;
        --quick) secs=2; clients=2; pp_secs=1; profile=debug; shift ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "demo: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [[ $(id -u) -ne 0 ]]; then
    echo "demo: run as root (it creates a network namespace, a veth pair and attaches XDP)" >&2
    exit 1
fi

bash scripts/setup.sh
if [[ -n "${STEER:-}" ]]; then
    steer_bin="$STEER"
else
    echo "demo: building the echo server ($profile)..."
    target_dir="${CARGO_TARGET_DIR:-target}"
    if [[ $profile == release ]]; then
        cargo build --release --quiet -p steer-cli
    else
        cargo build --quiet -p steer-cli
    fi
    steer_bin="$target_dir/$profile/steer"
fi

# shellcheck source=scripts/netns.sh
. scripts/netns.sh
name=$(netns_default_name)
work=$(mktemp -d /tmp/steer-demo.XXXXXX)
server_pid=""
client_pids=()

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for p in "${client_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -INT "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    netns_down "$name"
    rm -rf "$work"
    if ip netns list | grep -qw "$name"; then
        echo "demo: namespace $name still present" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

netns_up "$name"
echo "demo: namespace $NETNS_NAME, veth $NETNS_HOST_IF ($NETNS_HOST_V4) <-> $NETNS_NS_IF ($NETNS_NS_V4), 2 queues"

"$steer_bin" echo --interface "$NETNS_HOST_IF" --port "$port" --sockperf \
    --policy "$policy" --fast-path "$fast_path" \
    --stats-json "$work/server.json" >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
for _ in $(seq 100); do
    grep -q ready "$work/server.out" 2>/dev/null && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "demo: the echo server did not start:" >&2
        cat "$work/server.err" >&2
        exit 1
    fi
    sleep 0.1
done
grep ready "$work/server.out"
# The live table, as the server prints it once a second.
tail -n +2 -f "$work/server.out" &
tail_pid=$!
client_pids+=("$tail_pid")

echo "demo: $clients sockperf clients (one flow each) for ${secs}s: under-load at 20k msg/s each"
for i in $(seq "$clients"); do
    # A client stuck on a lost warm-up reply would wait a minute: bound it.
    timeout $((secs + 10)) ip netns exec "$NETNS_NAME" sockperf under-load -i "$NETNS_HOST_V4" -p "$port" \
        --client_port $((20000 + i)) -t "$secs" --mps 20000 >"$work/ul-$i.txt" 2>&1 &
    client_pids+=("$!")
done
for p in "${client_pids[@]:1}"; do wait "$p" || true; done
echo "demo: ping-pong latency, 1 client, ${pp_secs}s"
timeout $((pp_secs + 10)) ip netns exec "$NETNS_NAME" sockperf ping-pong -i "$NETNS_HOST_V4" -p "$port" \
    --client_port 20100 -t "$pp_secs" >"$work/pp.txt" 2>&1 || true
sleep 1
kill "$tail_pid" 2>/dev/null || true
kill -INT "$server_pid"
wait "$server_pid" || true
server_pid=""

strip() { sed 's/\x1b\[[0-9;]*m//g'; }
echo
echo "==================== summary ===================="
for i in $(seq "$clients"); do
    sent=$(strip <"$work/ul-$i.txt" | sed -n 's/.*\[Valid Duration\].*SentMessages=\([0-9]*\).*/\1/p' | head -1)
    lost=$(strip <"$work/ul-$i.txt" | sed -n 's/.*# dropped messages = \([0-9]*\); # duplicated messages = \([0-9]*\); # out-of-order messages = \([0-9]*\).*/dropped \1, duplicated \2, out-of-order \3/p' | head -1)
    printf 'client %d (port %d): sent %s messages; sampled replies: %s\n' "$i" $((20000 + i)) "${sent:-?}" "${lost:-no result}"
done
p50=$(strip <"$work/pp.txt" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' | head -1)
p99=$(strip <"$work/pp.txt" | sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' | head -1)
echo "ping-pong one-way latency: p50 ${p50:-?} us, p99 ${p99:-?} us"
grep "steer echo: stopped\|steer echo: frames" "$work/server.out" || true
python3 - "$work/server.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
t = d["total"]
print(f"per CPU: " + ", ".join(
    f"cpu{r['cpu']} rx {r['rx']} handled {r['processed']} (fast path {r['fast_path']}, steered in {r['steered_in']})"
    for r in d["per_cpu"]))
print(f"policy {d['policy']}: steering updates {d['steering_updates']}, desired-table writes "
      f"{d['desired_table']['updates']} (suppressed {d['desired_table']['suppressed']})")
f = d["frames"]
print(f"frame accounting: {f['check']}, {f['total']} frames, held {f['held']}, balanced {f['balanced']}")
if t["rx"] == 0 or t["tx"] == 0:
    sys.exit("demo: no traffic went through the echo server")
if not f["balanced"]:
    sys.exit("demo: the frame accounting does not balance")
EOF
echo "demo: done; removing namespace $NETNS_NAME"
