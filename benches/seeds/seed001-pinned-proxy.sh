#!/usr/bin/env bash
# shellcheck disable=SC2317 source-path=SCRIPTDIR source-path=SCRIPTDIR/../..
# Seed 001 ("sockmap: CPU affinity for the backlog workqueue"): send rate
# against receive rate of a proxy whose sending client is pinned to the same
# CPU as one of the proxy's workers. In the seed a local client saturating
# its CPU starved the proxy work that ran on that same CPU (send 1.3 GB/s,
# receive 0.05 GB/s); running that work on another CPU brought receive up to
# send.
#
# What it runs. steer's steer proxy example on the root-namespace end of a
# fresh 2-queue veth pair, forwarding to a kernel `sockperf server` on
# 127.0.0.1; CLIENTS `sockperf under-load --mps max --reply-every 1` clients
# (every message asks for a reply) in the namespace, all pinned with taskset
# to CLIENT_CPU. XPS on the namespace's veth end decides which rx queue, and
# so which proxy worker, gets the client's traffic. Per task layout
# (`--runtime per-core`: the flow's task on the receiving worker's CPU;
# `multi`: one tokio work-stealing runtime), three placements:
#   same      workers pinned (the default); the traffic arrives on the queue
#             of the worker pinned to CLIENT_CPU (the seed's "without
#             cpu-affinity": the work shares the sender's CPU)
#   unpinned  steer proxy --no-pin, same queue: the scheduler places the
#             workers (note: steer proxy pins its per-core runtime threads
#             regardless of --no-pin, so per-core/unpinned only frees the
#             engine workers)
#   other     workers pinned; the traffic arrives on the queue of the worker
#             on the other CPU (the seed's fix, "with cpu-affinity")
# The veth's receive softirq (XDP redirect into AF_XDP) runs on the sender's
# CPU in every case.
#
# Columns (rates per second of client run time, sockperf [Total Run]):
# sent/s: datagrams the clients sent; rx/s: datagrams steer received over
# AF_XDP; fwd/s: datagrams the proxy forwarded to the backend (read by the
# application); reply/s: backend replies the proxy sent back; recv/s:
# replies the clients got; fwd%: fwd/sent; reply%: recv/sent; xsk drop: the
# kernel's AF_XDP drops (fill ring empty, rx ring full); app drop: datagrams
# steer received but could not deliver (full flow queue or ring); rx cpu:
# the worker CPU whose counters show the traffic; cpu: proxy CPU s/s.
#
# Goal (issue #7): none numeric; the question is whether pinning the
# proxy's workers hurts when the sender shares a worker's CPU, and whether
# moving the flow to the other CPU (the seed's fix) restores the receive
# rate.
#
# Usage (as root):
#   benches/seeds/seed001-pinned-proxy.sh [-t SECS] [--quick] [-c CLIENTS]
#       [--client-cpu N] [--mps N|max] [-m SIZE] [--layouts LIST]
#       [--json FILE] [--keep-logs DIR]
#
#   -t SECS          sockperf run time per configuration (default 8)
#   --quick          2 s per configuration (CI smoke; ~30 s in all)
#   -c CLIENTS       concurrent sockperf clients, one flow each (default 2)
#   --client-cpu N   the CPU the clients are pinned to (default 0)
#   --mps N|max      send rate per client (default max)
#   -m SIZE          message size (default 64)
#   --layouts LIST   comma-separated: per-core,multi (default both)
#   --json FILE      also write every number (and the final counters) as JSON
#   --keep-logs DIR  keep every log
#
# Binary: $STEER, else $CARGO_TARGET_DIR (default $STEER_SRC/target)
# /release/steer, built when missing (see lib.sh). Needs
# sockperf, jq, taskset, flock, iproute2, and 2 online CPUs. Takes the seeds
# lock; removes the namespace, veth pair and processes on every exit path.
# Exit status: 0 ok, 1 setup error, 2 a run produced no numbers.

set -euo pipefail

SEEDS_NAME=seed001
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

SECS=8
CLIENTS=2
CLIENT_CPU=0
MPS=max
SIZE=64
LAYOUTS=per-core,multi
JSON_OUT=

while [ $# -gt 0 ]; do
	case $1 in
	-t | --time) SECS=${2:?}; shift 2 ;;
	--quick) SECS=2; shift ;;
	-c | --clients) CLIENTS=${2:?}; shift 2 ;;
	--client-cpu) CLIENT_CPU=${2:?}; shift 2 ;;
	--mps) MPS=${2:?}; shift 2 ;;
	-m | --msg-size) SIZE=${2:?}; shift 2 ;;
	--layouts) LAYOUTS=${2:?}; shift 2 ;;
	--json) JSON_OUT=${2:?}; shift 2 ;;
	--keep-logs) SEEDS_KEEP_LOGS=${2:?}; shift 2 ;;
	-h | --help)
		seeds_usage "$0"
		exit 0
		;;
	*) seeds_die "unknown argument '$1' (see --help)" ;;
	esac
done

[[ $SECS =~ ^[1-9][0-9]*$ ]] || seeds_die "-t wants whole seconds >= 1"
[[ $CLIENTS =~ ^[1-9][0-9]*$ ]] || seeds_die "-c wants a count >= 1"
[[ $MPS =~ ^([1-9][0-9]*|max)$ ]] || seeds_die "--mps wants a number or max"
if ! [[ $SIZE =~ ^[0-9]+$ ]] || [ "$SIZE" -lt 14 ]; then seeds_die "-m wants a size >= 14 (sockperf's header)"; fi
IFS=, read -r -a LAYOUT_LIST <<<"$LAYOUTS"
for l in "${LAYOUT_LIST[@]}"; do
	case $l in per-core | multi) ;; *) seeds_die "--layouts: '$l' is not per-core or multi" ;; esac
done
PLACEMENTS=(same unpinned other)

seeds_require_root
seeds_require_tools sockperf jq taskset flock ip ss awk sed
STEER=$(seeds_steer)
ONLINE=$(cat /sys/devices/system/cpu/online)
[[ $CLIENT_CPU =~ ^[0-1]$ ]] || seeds_die "--client-cpu wants 0 or 1 (the 2-queue veth pair maps queue q to worker CPU q)"
taskset -c 0,1 true 2>/dev/null || seeds_die "needs CPUs 0 and 1 online (online: $ONLINE)"
OTHER_CPU=$((1 - CLIENT_CPU))

seeds_lock
seeds_setup_traps
seeds_netns_up
W=$SEEDS_WORK
PORT=$(seeds_free_udp_port 7000)
BPORT=$(seeds_free_udp_port 17000)
CPORT=21000

seeds_start "$W/backend.log" sockperf server -i 127.0.0.1 -p "$BPORT"
seeds_wait_udp "$BPORT" "$SEEDS_LAST_PID" 10 || {
	tail -n 5 "$W/backend.log" >&2
	seeds_die "the sockperf backend did not bind 127.0.0.1:$BPORT"
}
seeds_log "netns $NETNS_NAME: $CLIENTS sockperf clients on CPU $CLIENT_CPU -> $NETNS_HOST_IF $NETNS_HOST_V4:$PORT -> backend 127.0.0.1:$BPORT"

# xps QUEUE_OF_CLIENT_CPU: the client CPU's transmits go to tx queue q of the
# namespace's veth end, hence to rx queue q of the host end; the other CPU's
# to the other queue.
xps() {
	local q=$1 mc mo
	mc=$(printf '%x' $((1 << CLIENT_CPU)))
	mo=$(printf '%x' $((1 << OTHER_CPU)))
	ip netns exec "$NETNS_NAME" sh -c "
		echo $([ "$q" = 0 ] && echo "$mc" || echo "$mo") >/sys/class/net/$NETNS_NS_IF/queues/tx-0/xps_cpus &&
		echo $([ "$q" = 1 ] && echo "$mc" || echo "$mo") >/sys/class/net/$NETNS_NS_IF/queues/tx-1/xps_cpus" ||
		seeds_die "could not set XPS on $NETNS_NS_IF"
}

# sockperf_totals LOG: key=value lines from one client's report.
sockperf_totals() {
	sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '
	function after(line, key,    i, s) {
		i = index(line, key); if (i == 0) return ""
		s = substr(line, i + length(key)); sub(/^[ \t=]+/, "", s)
		if (match(s, /^[0-9]+(\.[0-9]+)?/)) return substr(s, RSTART, RLENGTH); return ""
	}
	/\[Total Run\]/ { print "runtime=" after($0, "RunTime="); print "sent=" after($0, "SentMessages="); print "received=" after($0, "ReceivedMessages=") }
	/# dropped messages/ { print "dropped=" after($0, "dropped messages") }'
}

FAILED=0

# run_config LAYOUT PLACEMENT
run_config() {
	local layout=$1 place=$2 tag=$1-$2 pid rc=0 i
	local log=$W/$tag-proxy.log
	local args=(--interface "$NETNS_HOST_IF" --port "$PORT" --backend "127.0.0.1:$BPORT"
		--runtime "$layout" --stats-json "$W/$tag-final.json")
	[ "$place" != unpinned ] || args+=(--no-pin)
	if [ "$place" = other ]; then xps "$OTHER_CPU"; else xps "$CLIENT_CPU"; fi
	seeds_log "$tag: steer proxy --runtime $layout$([ "$place" = unpinned ] && echo ' --no-pin'), traffic on the queue of worker CPU $([ "$place" = other ] && echo "$OTHER_CPU" || echo "$CLIENT_CPU"), ${SECS}s"
	seeds_start "$log" "$STEER" proxy "${args[@]}"
	pid=$SEEDS_LAST_PID
	if ! seeds_wait_ready "$log" "$pid" 60; then
		grep -v '^libbpf\|^libxdp' "$log" | tail -n 10 >&2
		seeds_die "$tag: steer proxy did not print 'ready' (log above)"
	fi
	local c0 c1 t0 t1 cpids=()
	c0=$(seeds_cpu_ticks "$pid")
	t0=$(seeds_now)
	for ((i = 0; i < CLIENTS; i++)); do
		seeds_start "$W/$tag-client$i.log" ip netns exec "$NETNS_NAME" timeout -s INT -k 5 $((SECS + 20)) \
			taskset -c "$CLIENT_CPU" sockperf under-load -i "$NETNS_HOST_V4" -p "$PORT" -t "$SECS" \
			"--mps=$MPS" --reply-every 1 -m "$SIZE" --client_port $((CPORT + i))
		cpids+=("$SEEDS_LAST_PID")
	done
	for i in "${!cpids[@]}"; do
		seeds_wait_exit "${cpids[i]}" $((SECS + 30)) || seeds_log "$tag: client $i exited with an error: $(tail -n 2 "$W/$tag-client$i.log" | tr '\n' ' ')"
		sockperf_totals "$W/$tag-client$i.log" >"$W/$tag-client$i.kv"
	done
	c1=$(seeds_cpu_ticks "$pid")
	t1=$(seeds_now)
	seeds_stop "$pid" 15 || rc=$?
	[ "$rc" = 0 ] || seeds_log "$tag: steer proxy exited with $rc: $(grep -v '^libbpf\|^libxdp' "$log" | tail -n 2 | tr '\n' ' ')"
	if [ ! -s "$W/$tag-final.json" ]; then
		seeds_log "$tag: no final counters from steer proxy"
		FAILED=1
		return 0
	fi
	# Sum the clients; the run time is the longest client's.
	local sent=0 recv=0 rt=0 ok=0 k
	for ((i = 0; i < CLIENTS; i++)); do
		k=$W/$tag-client$i.kv
		[ -n "$(seeds_kv "$k" sent)" ] || {
			seeds_log "$tag: client $i has no results: $(grep -a -i 'error' "$W/$tag-client$i.log" | head -n 1)"
			continue
		}
		ok=$((ok + 1))
		sent=$((sent + $(seeds_kv "$k" sent)))
		recv=$((recv + $(seeds_kv "$k" received)))
		rt=$(awk -v a="$rt" -v b="$(seeds_kv "$k" runtime)" 'BEGIN { print (b > a) ? b : a }')
	done
	if [ "$ok" = 0 ] || [ "$rt" = 0 ]; then
		seeds_log "$tag: no client results"
		FAILED=1
		return 0
	fi
	jq -n --slurpfile fin "$W/$tag-final.json" --arg layout "$layout" --arg place "$place" \
		--argjson sent "$sent" --argjson recv "$recv" --argjson rt "$rt" --argjson ok "$ok" \
		--argjson clients "$CLIENTS" --argjson cpu_s "$(awk -v a="$c0" -v b="$c1" -v t="$SEEDS_CLK_TCK" 'BEGIN { print (b - a) / t }')" \
		--argjson wall "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" --argjson proxy_exit "$rc" '
		$fin[0] as $f | $f.total as $t | ($f.kernel_xsk // {}) as $k |
		{layout: $layout, placement: $place, pinned: ($place != "unpinned"),
		 clients: $clients, clients_ok: $ok, runtime_s: $rt,
		 sent: $sent, rx: $t.rx, forwarded: $f.proxy.to_backend, replied: $f.proxy.to_client, received: $recv,
		 sent_per_s: ($sent / $rt), rx_per_s: ($t.rx / $rt), forwarded_per_s: ($f.proxy.to_backend / $rt),
		 replied_per_s: ($f.proxy.to_client / $rt), received_per_s: ($recv / $rt),
		 forwarded_pct: (if $sent > 0 then 100 * $f.proxy.to_backend / $sent else null end),
		 received_pct: (if $sent > 0 then 100 * $recv / $sent else null end),
		 xsk_drops: (($k.rx_dropped // 0) + ($k.rx_ring_full // 0)),
		 steer_drops: $t.drops, app_dropped: $t.app_dropped, ring_dropped: $t.dropped,
		 send_errors: $f.proxy.send_errors,
		 rx_cpu: ([$f.per_cpu[] | {cpu, rx}] | max_by(.rx) | .cpu),
		 rx_by_cpu: [$f.per_cpu[] | {cpu, rx}],
		 proxy_cpu_s_per_s: ($cpu_s / $wall), proxy_exit: $proxy_exit,
		 final_stats: $f}' >"$W/$tag.result.json"
}

for layout in "${LAYOUT_LIST[@]}"; do
	for place in "${PLACEMENTS[@]}"; do
		run_config "$layout" "$place"
	done
done

r() { jq -r "$2 // empty" "$W/$1.result.json" 2>/dev/null; }

print_table() {
	local fmt="%-9s %-9s %6s %9s %9s %9s %9s %9s %6s %6s %8s %9s %5s\n" tag
	echo
	echo "seed 001: steer proxy, $CLIENTS sockperf under-load clients (--mps $MPS, reply every message, ${SIZE} B) pinned to CPU $CLIENT_CPU, ${SECS}s per run"
	echo "same = workers pinned, traffic on CPU $CLIENT_CPU's worker; unpinned = --no-pin; other = pinned, traffic on CPU $OTHER_CPU's worker"
	# shellcheck disable=SC2059
	printf "$fmt" layout placement rx_cpu sent/s rx/s fwd/s reply/s recv/s fwd% recv% "xsk drop" "app drop" cpu
	for layout in "${LAYOUT_LIST[@]}"; do
		for place in "${PLACEMENTS[@]}"; do
			tag=$layout-$place
			if [ ! -s "$W/$tag.result.json" ]; then
				# shellcheck disable=SC2059
				printf "$fmt" "$layout" "$place" - - - - - - - - - - "-  (no numbers)"
				continue
			fi
			# shellcheck disable=SC2059
			printf "$fmt" "$layout" "$place" "$(r "$tag" .rx_cpu)" \
				"$(seeds_fmt "$(r "$tag" .sent_per_s)")" "$(seeds_fmt "$(r "$tag" .rx_per_s)")" \
				"$(seeds_fmt "$(r "$tag" .forwarded_per_s)")" "$(seeds_fmt "$(r "$tag" .replied_per_s)")" \
				"$(seeds_fmt "$(r "$tag" .received_per_s)")" \
				"$(seeds_fmt "$(r "$tag" .forwarded_pct)" 1)" "$(seeds_fmt "$(r "$tag" .received_pct)" 1)" \
				"$(r "$tag" .xsk_drops)" "$(r "$tag" .steer_drops)" "$(seeds_fmt "$(r "$tag" .proxy_cpu_s_per_s)" 2)"
		done
	done
	for layout in "${LAYOUT_LIST[@]}"; do
		echo "$layout: forwarded/s same $(seeds_fmt "$(r "$layout-same" .forwarded_per_s)"), unpinned $(seeds_fmt "$(r "$layout-unpinned" .forwarded_per_s)") ($(seeds_div "$(r "$layout-unpinned" .forwarded_per_s)" "$(r "$layout-same" .forwarded_per_s)")x), other $(seeds_fmt "$(r "$layout-other" .forwarded_per_s)") ($(seeds_div "$(r "$layout-other" .forwarded_per_s)" "$(r "$layout-same" .forwarded_per_s)")x)"
	done
	echo
}

print_table

if [ -n "$JSON_OUT" ]; then
	shopt -s nullglob
	results=("$W"/*.result.json)
	jq -n --argjson host "$(seeds_host_json)" --slurpfile runs <(cat "${results[@]}" /dev/null) \
		--argjson secs "$SECS" --argjson clients "$CLIENTS" --argjson client_cpu "$CLIENT_CPU" \
		--arg mps "$MPS" --argjson size "$SIZE" --arg sockperf "$(sockperf --version 2>&1 | head -n 1)" \
		'{tool: "benches/seeds/seed001-pinned-proxy.sh", format: 1, host: $host,
		  config: {seconds: $secs, clients: $clients, client_cpu: $client_cpu, mps: $mps, msg_size: $size,
		    reply_every: 1, sockperf: $sockperf},
		  runs: $runs}' >"$JSON_OUT"
	seeds_log "JSON in $JSON_OUT"
fi

[ "$FAILED" = 0 ] || exit 2
exit 0
