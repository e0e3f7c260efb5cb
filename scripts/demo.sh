#!/usr/bin/env bash
# The steer demo, as root on a fresh machine: installs what is missing,
# creates a network namespace and a 2-queue veth pair, and runs `steer demo`
# on the host end: clients in the namespace send flows, each flow is
# consumed by a thread the demo moves between CPUs, first under the `always`
# rule (flows steered to their consumers' CPUs and moved with them), then
# under `llc` with a 2-LLC topology model (the same moves kept in place).
# `steer top` shows it live beside the demo (a tmux split when tmux and a
# terminal are there; otherwise the demo prints `steer top --once` screens).
# Prints the summary and removes everything it created, also when
# interrupted. The logic is in `steer demo` (crates/steer-cli/src/demo);
# this script makes the namespace and starts the processes.
#
#   ./scripts/demo.sh [-t SECONDS_PER_PHASE] [-f FLOWS] [--no-tmux] [--quick] [--check]
#
# STEER=path/to/steer uses that binary instead of building a release one.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=6
flows=8
tmux_ok=1
check=()
move_every=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        -t) secs="$2"; shift 2 ;;
        -f) flows="$2"; shift 2 ;;
        --no-tmux) tmux_ok=0; shift ;;
        --quick) secs=2; move_every=0.5; tmux_ok=0; shift ;;
        --check) check=(--check); shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
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
    echo "demo: building the steer command (release)..."
    cargo build --release --quiet -p flowsteer-cli
    steer_bin="${CARGO_TARGET_DIR:-target}/release/steer"
fi

# shellcheck source=scripts/netns.sh
. scripts/netns.sh
name=$(netns_default_name)
work=$(mktemp -d /tmp/steer-demo.XXXXXX)
session="steer-demo-$$"
demo_pid=""

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    tmux kill-session -t "$session" 2>/dev/null || true
    if [[ -n "$demo_pid" ]] && kill -0 "$demo_pid" 2>/dev/null; then
        kill -INT "$demo_pid" 2>/dev/null || true
        wait "$demo_pid" 2>/dev/null || true
    fi
    netns_down "$name"
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

netns_up "$name"
echo "demo: namespace $NETNS_NAME, veth $NETNS_HOST_IF ($NETNS_HOST_V4) <-> $NETNS_NS_IF ($NETNS_NS_V4), 2 queues"

demo=("$steer_bin" demo --interface "$NETNS_HOST_IF" --netns "$NETNS_NAME" --server "$NETNS_HOST_V4"
      --flows "$flows" --seconds "$secs" --move-every "$move_every" --json "$work/summary.json" "${check[@]}")

if [[ $tmux_ok -eq 1 && -t 0 && -t 1 ]] && command -v tmux >/dev/null; then
    # The demo on the left, `steer top` on the right; the session ends when
    # the demo does, and its output (with the summary) is printed below.
    tmux new-session -d -s "$session" -x "$(tput cols)" -y "$(tput lines)" \
        "${demo[*]@Q} 2>&1 | tee $work/demo.out; echo \${PIPESTATUS[0]} >$work/demo.rc; sleep 4; tmux kill-session -t $session"
    tmux split-window -h -t "$session" "sleep 1; $steer_bin top $NETNS_HOST_IF --interval 0.5"
    tmux select-pane -t "$session:0.0"
    tmux attach -t "$session" || true
    sed -n '/=== summary ===/,$p' "$work/demo.out"
    rc=$(cat "$work/demo.rc" 2>/dev/null || echo 1)
else
    "${demo[@]}" --snapshots &
    demo_pid=$!
    rc=0
    wait "$demo_pid" || rc=$?
    demo_pid=""
fi
echo "demo: done; removing namespace $NETNS_NAME"
exit "$rc"
