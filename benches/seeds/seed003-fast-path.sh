#!/usr/bin/env bash
# shellcheck disable=SC2317 source-path=SCRIPTDIR source-path=SCRIPTDIR/../..
# Seed 003 ("rps: process the skb directly if rps cpu not changed"): ring
# enqueues per packet with steer's same-CPU fast path on and off when flows
# are local (their target CPU is the CPU that received them). The seed
# measured 50% fewer NET_RX softirqs on a 2-CPU QEMU guest; steer's analog
# of the backlog enqueue is the dispatcher-to-worker ring enqueue
# (steered_out + queued_local), which the fast path replaces by an inline
# call when the flow's CPU is the dispatcher's own and nothing of the flow
# is still queued (RFS's last_qtail rule).
#
# What it runs.
# 1. End to end: steer's steer echo (--sockperf) on the root-namespace end
#    of a fresh 2-queue veth pair, --fast-path on | off, in two layouts where
#    every flow is local:
#      1cpu   --cpus 0: one worker, every flow's CPU is CPU 0; the load
#             generator is pinned to CPU 1
#      2cpu   --cpus 0,1 (rps auto = local: a flow stays on its rx queue's
#             CPU); the generator is not pinned
#    udp_flows.py in the namespace: FLOWS flows, closed loop, WINDOW
#    sockperf pong requests in flight per flow. From the stats JSON: ring
#    enqueues per packet = (steered_out + queued_local) / rx, fast-path
#    share = fast_path / rx; echo replies per second (the generator's
#    receive rate) and steer echo CPU microseconds per packet
#    (/proc/PID/stat over the traffic).
# 2. criterion (benches/dispatch.rs): steer/dispatch/fast_path/{on,off},
#    the dispatcher alone, 64-packet batches of 256 flows desired on the
#    dispatcher's CPU: median ns per packet, and the ring enqueues per packet
#    the bench prints.
#
# Goal (issue #7): with the fast path on, at least 50% fewer ring enqueues
# per packet than off, for local flows (end to end and in the bench).
#
# Usage (as root for the end-to-end part):
#   benches/seeds/seed003-fast-path.sh [-t SECS] [--quick] [--flows N]
#       [--window N] [--layouts 1cpu,2cpu] [--e2e-only | --criterion-only]
#       [--json FILE] [--keep-logs DIR] [--require-goal]
#
#   -t SECS            traffic per end-to-end configuration (default 10)
#   --quick            3 s per configuration, criterion 1 s warm-up / 2 s
#                      measurement (CI smoke; ~30 s once built)
#   --flows N          flows (default 16); --window N: in flight per flow (8)
#   --layouts LIST     end-to-end layouts (default 1cpu,2cpu)
#   --e2e-only         skip criterion; --criterion-only: skip the end-to-end
#                      part (needs no root)
#   --json FILE        also write the numbers (and final counters) as JSON
#   --keep-logs DIR    keep every log
#   --require-goal     exit 3 unless the goal is met
#
# Binary: $STEER, else $CARGO_TARGET_DIR (default $STEER_SRC/target)
# /release/steer, built when missing; the criterion bench is
# built in $STEER_SRC (see lib.sh). Needs python3, jq, taskset, flock,
# iproute2. Takes the seeds lock; removes the namespace, veth pair and
# processes on every exit path. Exit status: 0 ok, 1 setup error, 2 missing
# numbers, 3 goal not met with --require-goal.

set -euo pipefail

SEEDS_NAME=seed003
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

SECS=10
QUICK=0
FLOWS=16
WINDOW=8
SIZE=64
LAYOUTS=1cpu,2cpu
RUN_E2E=1
RUN_CRITERION=1
JSON_OUT=
REQUIRE_GOAL=0
GOAL_PCT=50

while [ $# -gt 0 ]; do
	case $1 in
	-t | --time) SECS=${2:?}; shift 2 ;;
	--quick) SECS=3; QUICK=1; shift ;;
	--flows) FLOWS=${2:?}; shift 2 ;;
	--window) WINDOW=${2:?}; shift 2 ;;
	--layouts) LAYOUTS=${2:?}; shift 2 ;;
	--e2e-only) RUN_CRITERION=0; shift ;;
	--criterion-only) RUN_E2E=0; shift ;;
	--json) JSON_OUT=${2:?}; shift 2 ;;
	--keep-logs) SEEDS_KEEP_LOGS=${2:?}; shift 2 ;;
	--require-goal) REQUIRE_GOAL=1; shift ;;
	-h | --help)
		seeds_usage "$0"
		exit 0
		;;
	*) seeds_die "unknown argument '$1' (see --help)" ;;
	esac
done

[[ $SECS =~ ^[1-9][0-9]*$ ]] || seeds_die "-t wants whole seconds >= 1"
if ! [[ $FLOWS =~ ^[1-9][0-9]*$ ]] || [ "$FLOWS" -gt 1000 ]; then seeds_die "--flows wants 1..1000"; fi
[[ $WINDOW =~ ^[1-9][0-9]*$ ]] || seeds_die "--window wants a count >= 1"
[ "$RUN_E2E" = 1 ] || [ "$RUN_CRITERION" = 1 ] || seeds_die "--e2e-only and --criterion-only exclude each other"
IFS=, read -r -a LAYOUT_LIST <<<"$LAYOUTS"
for l in "${LAYOUT_LIST[@]}"; do
	case $l in 1cpu | 2cpu) ;; *) seeds_die "--layouts: '$l' is not 1cpu or 2cpu" ;; esac
done

seeds_require_tools jq flock awk find taskset
taskset -c 0,1 true 2>/dev/null || seeds_die "needs CPUs 0 and 1 online"
if [ "$RUN_E2E" = 1 ]; then
	seeds_require_root
	seeds_require_tools python3 ip ss getconf
	STEER=$(seeds_steer)
	GEN=$SEEDS_DIR/udp_flows.py
	[ -r "$GEN" ] || seeds_die "$GEN missing"
fi

seeds_lock
seeds_setup_traps
W=$SEEDS_WORK
FAILED=0

# --- criterion -------------------------------------------------------------

if [ "$RUN_CRITERION" = 1 ]; then
	seeds_criterion_build dispatch
	touch "$W/criterion.marker"
	sleep 1
	seeds_log "criterion: steer/dispatch/fast_path$([ "$QUICK" = 1 ] && echo ' (quick)')"
	if ! seeds_criterion dispatch "$W/criterion-dispatch.log" "$QUICK" 'steer/dispatch/fast_path'; then
		tail -n 20 "$W/criterion-dispatch.log" >&2
		seeds_log "cargo bench --bench dispatch failed (output above)"
		FAILED=1
	fi
	for fp in on off; do
		est=$(seeds_criterion_estimate "steer/dispatch/fast_path/$fp" "$W/criterion.marker") || {
			seeds_log "no criterion result for steer/dispatch/fast_path/$fp"
			FAILED=1
			continue
		}
		read -r med lo hi elems <<<"$est"
		enq=$(sed -n "s|^steer/dispatch/fast_path/$fp: ring enqueues per packet \([0-9.]*\).*|\1|p" "$W/criterion-dispatch.log" | tail -n 1)
		jq -n --arg fp "$fp" --argjson med "$med" --argjson lo "$lo" --argjson hi "$hi" --argjson n "$elems" \
			--argjson enq "$(seeds_num "$enq")" \
			'{fast_path: $fp, median_ns: $med, ci_lower_ns: $lo, ci_upper_ns: $hi, packets: $n,
			  ns_per_packet: ($med / $n), ring_enqueues_per_packet: $enq}' >"$W/crit-$fp.json"
	done
fi

# --- end to end ------------------------------------------------------------

run_e2e() {
	local layout=$1 fp=$2 tag=$1-$2 pid gpid rc=0 cpus gen_pin=()
	local log=$W/$tag-echo.log
	if [ "$layout" = 1cpu ]; then
		cpus=0
		gen_pin=(taskset -c 1)
	else
		cpus=0,1
	fi
	seeds_log "$tag: steer echo --cpus $cpus --fast-path $fp, $FLOWS flows x $WINDOW, ${SECS}s"
	seeds_start "$log" "$STEER" echo --interface "$NETNS_HOST_IF" --port "$PORT" --cpus "$cpus" \
		--fast-path "$fp" --sockperf --no-table --stats-json "$W/$tag-final.json"
	pid=$SEEDS_LAST_PID
	if ! seeds_wait_ready "$log" "$pid" 60; then
		grep -v '^libbpf\|^libxdp' "$log" | tail -n 10 >&2
		seeds_die "$tag: steer echo did not print 'ready' (log above)"
	fi
	local c0 c1
	c0=$(seeds_cpu_ticks "$pid")
	seeds_start "$W/$tag-gen.kv" ip netns exec "$NETNS_NAME" "${gen_pin[@]}" python3 "$GEN" \
		--dst "$NETNS_HOST_V4" --port "$PORT" --flows "$FLOWS" --window "$WINDOW" --size "$SIZE" --seconds "$SECS"
	gpid=$SEEDS_LAST_PID
	seeds_wait_exit "$gpid" $((SECS + 20)) || seeds_log "$tag: the generator exited with an error: $(tail -n 2 "$W/$tag-gen.kv" | tr '\n' ' ')"
	c1=$(seeds_cpu_ticks "$pid")
	seeds_stop "$pid" 15 || rc=$?
	[ "$rc" = 0 ] || seeds_log "$tag: steer echo exited with $rc: $(grep -v '^libbpf\|^libxdp' "$log" | tail -n 2 | tr '\n' ' ')"
	if [ ! -s "$W/$tag-final.json" ] || [ -z "$(seeds_kv "$W/$tag-gen.kv" received)" ]; then
		seeds_log "$tag: missing numbers (see --keep-logs)"
		FAILED=1
		return 0
	fi
	jq -n --slurpfile fin "$W/$tag-final.json" --arg layout "$layout" --arg fp "$fp" --arg cpus "$cpus" \
		--argjson cpu_s "$(awk -v a="$c0" -v b="$c1" -v t="$SEEDS_CLK_TCK" 'BEGIN { print (b - a) / t }')" \
		--argjson gen_elapsed "$(seeds_num "$(seeds_kv "$W/$tag-gen.kv" elapsed_s)")" \
		--argjson gen_sent "$(seeds_num "$(seeds_kv "$W/$tag-gen.kv" sent)")" \
		--argjson gen_received "$(seeds_num "$(seeds_kv "$W/$tag-gen.kv" received)")" \
		--argjson echo_exit "$rc" '
		$fin[0] as $f | $f.total as $t | ($t.steered_out + $t.queued_local) as $enq |
		{layout: $layout, fast_path: $fp, cpus: $cpus, rx: $t.rx, tx: $t.tx,
		 fast_path_packets: $t.fast_path, steered_out: $t.steered_out, queued_local: $t.queued_local,
		 ring_enqueues: $enq,
		 ring_enqueues_per_packet: (if $t.rx > 0 then $enq / $t.rx else null end),
		 fast_path_share: (if $t.rx > 0 then $t.fast_path / $t.rx else null end),
		 drops: $t.drops, steering_updates: $f.steering_updates,
		 traffic_s: $gen_elapsed, generator_sent: $gen_sent, generator_received: $gen_received,
		 replies_per_s: (if $gen_elapsed then $gen_received / $gen_elapsed else null end),
		 echo_cpu_s: $cpu_s,
		 echo_cpu_us_per_packet: (if $t.rx > 0 then $cpu_s * 1e6 / $t.rx else null end),
		 echo_exit: $echo_exit, final_stats: $f}' >"$W/$tag.result.json"
}

if [ "$RUN_E2E" = 1 ]; then
	seeds_netns_up
	PORT=$(seeds_free_udp_port 7000)
	seeds_log "netns $NETNS_NAME: $FLOWS flows from $NETNS_NS_V4 -> $NETNS_HOST_IF $NETNS_HOST_V4:$PORT"
	for layout in "${LAYOUT_LIST[@]}"; do
		for fp in on off; do
			run_e2e "$layout" "$fp"
		done
	done
fi

# --- report ----------------------------------------------------------------

r() { jq -r "$2 // empty" "$W/$1.json" 2>/dev/null; }

# reduction ON OFF: percent fewer ring enqueues per packet with the fast path.
reduction() {
	awk -v on="$1" -v off="$2" 'BEGIN { if (on == "" || off == "" || off + 0 == 0) print ""; else printf "%.1f\n", 100 * (1 - on / off) }'
}

goal_met() {
	local red ok=1 layout
	if [ "$RUN_E2E" = 1 ]; then
		for layout in "${LAYOUT_LIST[@]}"; do
			red=$(reduction "$(r "$layout-on.result" .ring_enqueues_per_packet)" "$(r "$layout-off.result" .ring_enqueues_per_packet)")
			[ -n "$red" ] && awk -v x="$red" -v g="$GOAL_PCT" 'BEGIN { exit !(x >= g) }' || ok=0
		done
	fi
	if [ "$RUN_CRITERION" = 1 ]; then
		red=$(reduction "$(r crit-on .ring_enqueues_per_packet)" "$(r crit-off .ring_enqueues_per_packet)")
		[ -n "$red" ] && awk -v x="$red" -v g="$GOAL_PCT" 'BEGIN { exit !(x >= g) }' || ok=0
	fi
	[ "$ok" = 1 ]
}

print_table() {
	local tag
	echo
	if [ "$RUN_E2E" = 1 ]; then
		echo "seed 003 (end to end): steer echo --sockperf, $FLOWS local flows x $WINDOW in flight, ${SECS}s per run"
		local fmt="%-6s %-5s %10s %9s %9s %10s %10s %9s %8s\n"
		# shellcheck disable=SC2059
		printf "$fmt" layout fast rx "enq/pkt" "fast %" "ring enq" "replies/s" "cpu us/p" drops
		for layout in "${LAYOUT_LIST[@]}"; do
			for fp in on off; do
				tag=$layout-$fp.result
				if [ ! -s "$W/$tag.json" ]; then
					# shellcheck disable=SC2059
					printf "$fmt" "$layout" "$fp" - - - - - - "-  (no numbers)"
					continue
				fi
				# shellcheck disable=SC2059
				printf "$fmt" "$layout" "$fp" "$(r "$tag" .rx)" "$(seeds_fmt "$(r "$tag" .ring_enqueues_per_packet)" 3)" \
					"$(seeds_fmt "$(awk -v v="$(r "$tag" .fast_path_share)" 'BEGIN { if (v != "") print 100 * v }')" 1)" \
					"$(r "$tag" .ring_enqueues)" "$(seeds_fmt "$(r "$tag" .replies_per_s)")" \
					"$(seeds_fmt "$(r "$tag" .echo_cpu_us_per_packet)" 2)" "$(r "$tag" .drops)"
			done
			echo "$layout: fast path on: $(reduction "$(r "$layout-on.result" .ring_enqueues_per_packet)" "$(r "$layout-off.result" .ring_enqueues_per_packet)")% fewer ring enqueues per packet; replies/s $(seeds_div "$(r "$layout-on.result" .replies_per_s)" "$(r "$layout-off.result" .replies_per_s)")x; CPU us/packet $(seeds_fmt "$(r "$layout-off.result" .echo_cpu_us_per_packet)" 2) -> $(seeds_fmt "$(r "$layout-on.result" .echo_cpu_us_per_packet)" 2)"
		done
	fi
	if [ "$RUN_CRITERION" = 1 ]; then
		echo
		echo "seed 003 (criterion, benches/dispatch.rs): steer/dispatch/fast_path, batches of 64 packets, flows on the dispatcher's CPU"
		local f2="%-28s %10s %20s %9s %9s\n"
		# shellcheck disable=SC2059
		printf "$f2" bench "ns/packet" "95% CI (ns/batch)" "enq/pkt" "Mpkt/s"
		for fp in on off; do
			# shellcheck disable=SC2059
			printf "$f2" "steer/dispatch/fast_path/$fp" "$(seeds_fmt "$(r "crit-$fp" .ns_per_packet)" 2)" \
				"[$(seeds_fmt "$(r "crit-$fp" .ci_lower_ns)" 0) $(seeds_fmt "$(r "crit-$fp" .ci_upper_ns)" 0)]" \
				"$(seeds_fmt "$(r "crit-$fp" .ring_enqueues_per_packet)" 3)" \
				"$(awk -v v="$(r "crit-$fp" .ns_per_packet)" 'BEGIN { if (v == "" || v + 0 == 0) print "-"; else printf "%.1f\n", 1e3 / v }')"
		done
		echo "criterion: fast path on: $(reduction "$(r crit-on .ring_enqueues_per_packet)" "$(r crit-off .ring_enqueues_per_packet)")% fewer ring enqueues per packet, $(seeds_div "$(r crit-off .ns_per_packet)" "$(r crit-on .ns_per_packet)")x faster per packet"
	fi
	if goal_met; then echo "goal: met (>= ${GOAL_PCT}% fewer ring enqueues per packet with the fast path on)"; else echo "goal: NOT met (>= ${GOAL_PCT}% fewer ring enqueues per packet with the fast path on)"; fi
	echo
}

print_table

if [ -n "$JSON_OUT" ]; then
	shopt -s nullglob
	results=("$W"/*.result.json)
	crits=("$W"/crit-*.json)
	jq -n --argjson host "$(seeds_host_json)" --slurpfile runs <(cat "${results[@]}" /dev/null) --slurpfile criterion <(cat "${crits[@]}" /dev/null) \
		--argjson secs "$SECS" --argjson flows "$FLOWS" --argjson window "$WINDOW" --argjson quick "$QUICK" \
		--argjson goal "$(goal_met && echo true || echo false)" \
		'{tool: "benches/seeds/seed003-fast-path.sh", format: 1, host: $host,
		  config: {seconds: $secs, flows: $flows, window: $window, quick: ($quick == 1)},
		  end_to_end: $runs, criterion: $criterion, goal_50pct_fewer_enqueues: $goal}' >"$JSON_OUT"
	seeds_log "JSON in $JSON_OUT"
fi

status=0
[ "$FAILED" = 0 ] || status=2
if [ "$REQUIRE_GOAL" = 1 ] && ! goal_met; then status=3; fi
exit "$status"
