#!/usr/bin/env bash
# shellcheck disable=SC2317 source-path=SCRIPTDIR source-path=SCRIPTDIR/../..
# Seed 000 for kernel TCP sockets: how many steering updates (writes of a
# flow's CPU into the XDP RFS program's map, one bpf(2) call each) a tokio
# TCP echo server makes under work-stealing, policy `always` (every change of
# a connection's reading CPU is written) against `llc` (only changes that
# cross a last-level cache, or are forced), and what one update costs.
#
# What it runs. `steer tcp-echo --steer kernel-sockets` (one tokio
# multi-thread runtime, a thread per CPU, unpinned: connections' tasks are
# stolen between threads and threads move between CPUs; every read records
# the reading thread's CPU) on the root-namespace end of a fresh 2-queue veth
# pair; `steer tcp-load` drives it from the namespace with CONNS connections
# (closed loop, 64-byte messages). Four configurations, each with a fresh
# server:
#   real     x always | llc   the machine's topology (here: 2 CPUs, ONE LLC)
#   override x always | llc   --topology "pack:2 l3:1 core:1 pu:1": CPU 0 and
#                             CPU 1 in different LLCs for the LLC rule
#
# Columns. msg/s: echo round trips per second (client); writes: desired-table
# writes the rule made (first records of each connection included); coll:
# writes beyond one new_or_other_flow per connection, i.e. connections that
# share a slot of the desired-CPU table overwriting each other (neither
# policy suppresses those; the flow hash is keyed per process, so which
# connections collide changes from run to run); supp: records the LLC rule
# suppressed; updates: map writes (one per connection
# to place it, then one per move; a table write naming the CPU already in
# the map costs none); moves, mv/s: updates beyond the first placements, and
# per second; ns/update: mean, p50 and p99 of one map write as the hook timed
# it (the bpf(2) BPF_MAP_UPDATE_ELEM call); landed: frames each CPU's cpumap
# program saw.
#
# Goal: on the real topology llc makes at least 90% fewer moves than always;
# on the override every cross-LLC move is still written (llc = always).
#
# Usage (as root):
#   benches/seeds/seed000-kernel-sockets.sh [-t SECS] [--quick] [--conns N]
#       [--override SPEC] [--json FILE] [--keep-logs DIR] [--require-goal]
#
#   -t SECS          seconds of load per configuration (default 10)
#   --quick          2 s per configuration (CI smoke)
#   --conns N        connections (default 64)
#   --override SPEC  the 2-LLC topology (default "pack:2 l3:1 core:1 pu:1")
#   --json FILE      also write every number as JSON
#   --keep-logs DIR  keep the servers' and clients' output
#   --require-goal   exit 3 unless the goal is met
#
# Binary: $STEER, else $CARGO_TARGET_DIR (default $STEER_SRC/target)
# /release/steer, built when missing. Needs jq, flock, iproute2, ethtool.
# Takes the seeds lock; removes the namespace, veth pair and processes on
# exit, Ctrl-C and SIGTERM.

set -euo pipefail

SEEDS_NAME=seed000-kernel-sockets
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

SECS=10
CONNS=64
OVERRIDE="pack:2 l3:1 core:1 pu:1"
JSON_OUT=
REQUIRE_GOAL=
PORT=7500

while [ $# -gt 0 ]; do
	case "$1" in
	-t) SECS=$2; shift 2 ;;
	--quick) SECS=2; shift ;;
	--conns) CONNS=$2; shift 2 ;;
	--override) OVERRIDE=$2; shift 2 ;;
	--json) JSON_OUT=$2; shift 2 ;;
	--keep-logs) SEEDS_KEEP_LOGS=$2; shift 2 ;;
	--require-goal) REQUIRE_GOAL=1; shift ;;
	-h | --help) sed -n '3,46p' "$0"; exit 0 ;;
	*) seeds_die "unknown option $1 (see --help)" ;;
	esac
done

seeds_require_root
seeds_require_tools jq flock ip ethtool
STEER_BIN=$(seeds_steer)
seeds_lock
seeds_setup_traps
seeds_netns_up
# Full checksums from the client: a frame redirected through a cpumap loses
# the partial-checksum mark a local sender leaves, and the stack would drop it.
ip netns exec "$SEEDS_NS" ethtool -K "$NETNS_NS_IF" tx off >/dev/null

results=()
for topo in real override; do
	for policy in always llc; do
		tag=$topo-$policy
		srv_json=$SEEDS_WORK/$tag-server.json
		cli_json=$SEEDS_WORK/$tag-client.json
		args=(tcp-echo -i "$NETNS_HOST_IF" -p "$PORT" --policy "$policy" --no-table
			--duration "$((SECS + 2))" --stats-json "$srv_json")
		[ "$topo" = override ] && args+=(--topology "$OVERRIDE")
		seeds_start "$SEEDS_WORK/$tag-server.log" "$STEER_BIN" "${args[@]}"
		spid=$SEEDS_LAST_PID
		seeds_wait_ready "$SEEDS_WORK/$tag-server.log" "$spid" 10 ||
			seeds_die "$tag: the server did not start: $(tail -n 3 "$SEEDS_WORK/$tag-server.log")"
		seeds_log "$tag: $CONNS connections for ${SECS}s"
		ip netns exec "$SEEDS_NS" "$STEER_BIN" tcp-load --connect "$NETNS_HOST_V4:$PORT" \
			--connections "$CONNS" --threads 2 --duration "$SECS" >"$cli_json" ||
			seeds_die "$tag: the client failed"
		seeds_wait_exit "$spid" 15 || seeds_die "$tag: the server failed: $(tail -n 3 "$SEEDS_WORK/$tag-server.log")"
		[ -s "$srv_json" ] || { seeds_log "$tag: no server report"; exit 2; }
		results+=("$(jq -c --arg topo "$topo" --arg policy "$policy" --slurpfile c "$cli_json" '{
			topology: $topo, policy: $policy,
			msg_per_s: $c[0].messages_per_s,
			writes: .records.written,
			collisions: (.records.written_by_reason.new_or_other_flow - .connections),
			moves: (.map_updates - .connections),
			moves_per_s: ((.map_updates - .connections) / .elapsed_s),
			cross_llc: .records.written_by_reason.cross_llc,
			suppressed: .records.suppressed,
			map_updates: .map_updates,
			update_ns: .map_update_ns,
			landed_per_cpu: .landed_per_cpu,
			program: .program,
			server: .
		}' "$srv_json")")
	done
done

all=$(printf '%s\n' "${results[@]}" | jq -s '.')
printf '\n%-9s %-7s %9s %7s %6s %8s %8s %7s %7s %22s %s\n' topology policy msg/s writes coll supp updates moves mv/s "ns/update mean/p50/p99" landed
jq -r '.[] | [.topology, .policy, (.msg_per_s | floor), .writes, .collisions, .suppressed, .map_updates, .moves,
	(.moves_per_s * 10 | floor / 10), "\(.update_ns.mean)/\(.update_ns.p50)/\(.update_ns.p99)",
	(.landed_per_cpu | tostring)] | @tsv' <<<"$all" |
	while IFS=$'\t' read -r t p m w c s u mv mvs ns l; do
		printf '%-9s %-7s %9s %7s %6s %8s %8s %7s %7s %22s %s\n' "$t" "$p" "$m" "$w" "$c" "$s" "$u" "$mv" "$mvs" "$ns" "$l"
	done

moves() { jq -r --arg t "$1" --arg p "$2" '.[] | select(.topology == $t and .policy == $p) | .moves' <<<"$all"; }
ra=$(moves real always) rl=$(moves real llc) oa=$(moves override always) ol=$(moves override llc)
saving=$(jq -n --argjson a "$ra" --argjson l "$rl" 'if $a > 0 then (1 - $l / $a) * 100 else 0 end')
printf '\nreal topology: llc makes %.1f%% fewer moves than always (%s vs %s)\n' "$saving" "$rl" "$ra"
printf 'override (2 LLCs): llc %s moves, always %s (cross-LLC moves followed)\n' "$ol" "$oa"

goal=met
jq -ne --argjson s "$saving" --argjson ra "$ra" '$ra > 0 and $s >= 90' >/dev/null || goal="not met"
jq -ne --argjson ol "$ol" '$ol > 0' >/dev/null || goal="not met"
echo "goal (>= 90% fewer on the real topology, cross-LLC moves followed on the override): $goal"

if [ -n "$JSON_OUT" ]; then
	jq -n --argjson runs "$all" --argjson saving "$saving" --arg goal "$goal" --arg conns "$CONNS" \
		--arg secs "$SECS" --arg override "$OVERRIDE" \
		'{seed: "000-kernel-sockets", connections: ($conns | tonumber), seconds: ($secs | tonumber),
		  override: $override, saving_percent: $saving, goal: $goal, runs: $runs}' >"$JSON_OUT"
fi
if [ -n "$REQUIRE_GOAL" ] && [ "$goal" != met ]; then
	exit 3
fi
