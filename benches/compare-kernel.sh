#!/usr/bin/env bash
# Functions run from traps look unreachable to shellcheck:
# shellcheck disable=SC2317 source-path=SCRIPTDIR/..
# Kernel UDP path (RPS/RFS) against steer's AF_XDP echo server, in one run, on
# the same veth pair and the same CPUs (issue #6).
#
# For each mode (sockperf under-load, ping-pong): start the server on the
# root-namespace end of a fresh veth pair, drive it from a network namespace
# with N concurrent sockperf clients (each its own source port, so its own
# flow), parse each client's report, stop the server. First `sockperf server`
# (the kernel path, RPS/RFS configured on the veth's rx queues), then steer's
# `steer echo --sockperf`. Everything (servers and clients) is pinned with
# taskset to the same CPU set. Prints one table and optionally a JSON summary,
# both made by steer-bench (`steer-bench sockperf compare`, crates/steer-bench/
# src/sockperf.rs): this script only starts namespaces and processes.
#
# Usage (as root):
#   benches/compare-kernel.sh [-t SECS] [-c CLIENTS] [--quick] [--cpus LIST]
#       [--mode under-load|ping-pong|both] [--kernel-only|--steer-only]
#       [--port PORT] [--client-port BASE] [-m MSG_SIZE] [--mps N|max]
#       [--json FILE] [--keep-logs DIR] [--require-goal] [--slice-us N]
#       [-- EXTRA steer echo ARGS...]
#   benches/compare-kernel.sh --self-test     (steer-bench's parser on benches/fixtures)
#   benches/compare-kernel.sh --parse FILE    (print what the parser extracts)
#
#   -t SECS          sockperf -t per client and mode (default 10)
#   -c CLIENTS       concurrent sockperf clients (default 4)
#   --quick          2 s per run (CI)
#   --cpus LIST      CPU list for servers and clients (default: all online)
#   --mode M         under-load, ping-pong or both (default both)
#   --mps N|max      under-load send rate per client (default max)
#   --json FILE      also write the numbers as JSON
#   --keep-logs DIR  keep every server/client log in DIR
#   --require-goal   exit 3 unless steer reaches the goal in every mode
#   --slice-us N     scheduling slice for both servers' threads (default
#                    100, what steer's workers ask for; 0: kernel default).
#                    sockperf server gets it through benches/set-slice.py,
#                    the echo server through --worker-slice-us, so both
#                    are scheduled alike
#   -- ARGS          extra arguments for steer echo (e.g. --busy-poll)
#
# The steer server: `$STEER echo`, STEER defaulting to
# ${CARGO_TARGET_DIR:-target}/release/steer, built with `cargo build
# --release -p steer-cli` when missing. STEER_SERVER_CMD overrides the whole command
# (words split on spaces; it gets the steer echo arguments appended);
# STEER_SERVER_CMD=standin uses a stand-in built from `sockperf server`, to
# exercise this script's steer half without the binary.
#
# Numbers (computed by steer-bench; $STEER_BENCH, else target/{release,debug}/
# steer-bench, built when missing). sockperf's latency is one-way (RTT/2), in usec. msg/s:
#   ping-pong:  replies received per second ([Valid Duration] ReceivedMessages
#               / RunTime), summed over the clients;
#   under-load: messages sent per second ([Valid Duration] SentMessages /
#               RunTime) times the fraction of the sampled replies (one per
#               --reply-every 100 messages) that came back, summed: the rate
#               the server demonstrably handled. sent/s is printed too.
# p50/p99: the median over the clients of each client's percentile. dropped,
# duplicated, out-of-order: sums of sockperf's counts (sampled replies).
# Goal (issue #6): steer msg/s >= 3x kernel, steer p99 <= kernel p99, 0
# out-of-order.
#
# Network: scripts/netns.sh (namespace steer-<pid>, veth steer-<pid>-h/-p, 2
# queues, static neighbours; addresses from 198.19.0.0/16, see there). RPS/RFS
# on the host end: every rx-*/rps_cpus = the CPU set's mask, rps_flow_cnt =
# 16384, net.core.rps_sock_flow_entries = 32768; previous values restored on
# exit. Everything is removed on exit, Ctrl-C and SIGTERM (a script started
# with `&` from a non-interactive shell ignores SIGINT: stop it with SIGTERM).
# Runs take a lock (/run/lock/steer-compare-kernel.lock): a second run waits.
# sockperf exits 0 even when it fails (bind errors, no replies): success is
# judged from its output only.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
FIXTURES=$SCRIPT_DIR/fixtures

RPS_FLOW_CNT=16384
RPS_SOCK_FLOW_ENTRIES=32768

log() { echo "compare-kernel: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# ---------------------------------------------------------------------------
# The numbers: sockperf's reports are parsed, aggregated and compared by
# steer-bench (crates/steer-bench, `steer-bench sockperf ...`); this script
# only starts namespaces and processes and leaves the reports in $WORK.

# steer_bench ARGS...: runs $STEER_BENCH, else target/{release,debug}/
# steer-bench, building the debug binary when neither exists.
steer_bench() {
	local t=${CARGO_TARGET_DIR:-$REPO/target} bin=${STEER_BENCH:-}
	if [ -z "$bin" ]; then
		if [ -x "$t/release/steer-bench" ]; then
			bin=$t/release/steer-bench
		elif [ -x "$t/debug/steer-bench" ]; then
			bin=$t/debug/steer-bench
		else
			log "steer-bench missing: cargo build -p steer-bench"
			(cd "$REPO" && cargo build -q -p steer-bench) || die "could not build steer-bench (cargo build -p steer-bench)"
			bin=$t/debug/steer-bench
		fi
	fi
	"$bin" "$@"
}

# ---------------------------------------------------------------------------
# CPU sets and RPS/RFS.

# "0-2,5" -> "0 1 2 5"
cpulist_expand() {
	local part a b out=()
	local IFS=,
	for part in $1; do
		if [[ $part =~ ^([0-9]+)-([0-9]+)$ ]]; then
			a=${BASH_REMATCH[1]}
			b=${BASH_REMATCH[2]}
			for ((; a <= b; a++)); do out+=("$a"); done
		elif [[ $part =~ ^[0-9]+$ ]]; then
			out+=("$part")
		else
			return 1
		fi
	done
	IFS=' '
	echo "${out[*]}"
}

# "0-1" -> "3" (hex mask, comma-separated 32-bit words as sysfs wants)
cpulist_mask() {
	local cpus c words=() w i max=0
	cpus=$(cpulist_expand "$1") || return 1
	for c in $cpus; do ((c > max)) && max=$c; done
	for ((i = 0; i <= max / 32; i++)); do words[i]=0; done
	for c in $cpus; do
		i=$((c / 32))
		words[i]=$((words[i] | (1 << (c % 32))))
	done
	w=$(printf '%x' "${words[${#words[@]} - 1]}")
	for ((i = ${#words[@]} - 2; i >= 0; i--)); do w+=$(printf ',%08x' "${words[i]}"); done
	echo "$w"
}

RPS_SAVED=()
RPS_SOCK_SAVED=

rps_configure() {
	local ifname=$1 mask=$2 q
	RPS_SOCK_SAVED=$(cat /proc/sys/net/core/rps_sock_flow_entries)
	for q in /sys/class/net/"$ifname"/queues/rx-*; do
		RPS_SAVED+=("$q" "$(cat "$q/rps_cpus")" "$(cat "$q/rps_flow_cnt")")
		echo "$mask" >"$q/rps_cpus"
		echo "$RPS_FLOW_CNT" >"$q/rps_flow_cnt"
	done
	echo "$RPS_SOCK_FLOW_ENTRIES" >/proc/sys/net/core/rps_sock_flow_entries
}

rps_restore() {
	local i
	for ((i = 0; i + 2 < ${#RPS_SAVED[@]}; i += 3)); do
		if [ -d "${RPS_SAVED[i]}" ]; then
			echo "${RPS_SAVED[i + 1]}" >"${RPS_SAVED[i]}/rps_cpus" 2>/dev/null || true
			echo "${RPS_SAVED[i + 2]}" >"${RPS_SAVED[i]}/rps_flow_cnt" 2>/dev/null || true
		fi
	done
	RPS_SAVED=()
	if [ -n "$RPS_SOCK_SAVED" ]; then
		echo "$RPS_SOCK_SAVED" >/proc/sys/net/core/rps_sock_flow_entries || true
		RPS_SOCK_SAVED=
	fi
}

# ---------------------------------------------------------------------------
# Processes.

PIDS=()

# stop_pid PID [SECS]: SIGINT, then SIGTERM, then SIGKILL; returns its status.
stop_pid() {
	local pid=$1 secs=${2:-10} i rc=0
	kill -INT "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "pid $pid ignored SIGINT for ${secs}s: SIGTERM"
		kill -TERM "$pid" 2>/dev/null || true
		sleep 2
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null || rc=$?
	forget_pid "$pid"
	return "$rc"
}

forget_pid() {
	local p keep=()
	for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

# wait_udp_port IP PORT PID SECS: until a UDP socket is bound to exactly
# IP:PORT in the root namespace (ss -lun), while PID lives. (A wildcard
# socket of someone else's on PORT does not count: ours binds IP.)
wait_udp_port() {
	local ip=$1 port=$2 pid=$3 secs=$4 i
	for ((i = 0; i < secs * 20; i++)); do
		if ss -Hlun "sport = :$port" 2>/dev/null | awk '{print $4}' | grep -qxF "$ip:$port"; then
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# wait_ready LOG PID SECS: until LOG has a line with the word "ready".
wait_ready() {
	local logf=$1 pid=$2 secs=$3 i
	for ((i = 0; i < secs * 20; i++)); do
		grep -qw ready "$logf" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# A stand-in for steer echo (STEER_SERVER_CMD=standin): takes the same
# arguments, serves with `sockperf server` on the interface's IPv4 address,
# prints "ready", stops on SIGINT/SIGTERM, writes a small --stats-json. For
# testing this script only: its numbers are the kernel's.
standin_steer_echo() {
	local ifname="" port="" cpus="" stats=""
	while [ $# -gt 0 ]; do
		case $1 in
		--interface | -i) ifname=$2; shift 2 ;;
		--port | -p) port=$2; shift 2 ;;
		--cpus) cpus=$2; shift 2 ;;
		--stats-json) stats=$2; shift 2 ;;
		--policy | --fast-path | --duration | --queues | --worker-slice-us) shift 2 ;;
		*) shift ;;
		esac
	done
	local ip spid stop=0
	ip=$(ip -4 -o addr show dev "$ifname" | awk '{sub(/\/.*/, "", $4); print $4; exit}')
	trap 'stop=1' INT TERM
	taskset -c "${cpus:-0}" sockperf server -i "$ip" -p "$port" &
	spid=$!
	if ! wait_udp_port "$ip" "$port" "$spid" 10; then
		echo "stand-in: sockperf server did not start" >&2
		kill "$spid" 2>/dev/null
		exit 1
	fi
	echo "steer echo (stand-in: sockperf server): ready on $ifname udp port $port"
	while [ "$stop" = 0 ] && kill -0 "$spid" 2>/dev/null; do sleep 0.1; done
	kill -INT "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	[ -n "$stats" ] && echo '{"standin": true}' >"$stats"
	echo "steer echo (stand-in): stopped"
	exit 0
}

# ---------------------------------------------------------------------------
# One measurement: clients against whatever server listens.

# run_clients MODE TAG: runs the clients in the namespace, parses their
# reports into $WORK/TAG-client<i>.kv, aggregates into $WORK/TAG.kv.
run_clients() {
	local mode=$1 tag=$2 i pids=() cport rc failed=0
	local args=(-i "$NETNS_HOST_V4" -p "$PORT" -t "$SECS" -m "$MSG_SIZE")
	[ "$mode" = under-load ] && args+=("--mps=$MPS")
	for ((i = 0; i < CLIENTS; i++)); do
		cport=$((CLIENT_PORT + i))
		ip netns exec "$NETNS_NAME" timeout -s INT -k 5 $((SECS + 30)) \
			taskset -c "$CPUS" sockperf "$mode" "${args[@]}" --client_port "$cport" \
			>"$WORK/$tag-client$i.log" 2>&1 &
		pids+=($!)
		PIDS+=($!)
	done
	for ((i = 0; i < CLIENTS; i++)); do
		rc=0
		wait "${pids[i]}" || rc=$?
		forget_pid "${pids[i]}"
		if [ "$rc" -ne 0 ]; then
			log "$tag client $i (port $((CLIENT_PORT + i))) exited with $rc: $(tail -n 3 "$WORK/$tag-client$i.log" | tr '\n' ' ')"
			failed=1
		fi
	done
	return "$failed"
}

run_kernel() {
	local mode=$1 pid
	local tag="kernel-$mode"
	log "$mode: kernel (sockperf server, RPS/RFS) with $CLIENTS clients, ${SECS}s"
	taskset -c "$CPUS" sockperf server -i "$NETNS_HOST_V4" -p "$PORT" >"$WORK/$tag-server.log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	if ! wait_udp_port "$NETNS_HOST_V4" "$PORT" "$pid" 10; then
		tail -n 20 "$WORK/$tag-server.log" >&2
		stop_pid "$pid" 2 || true
		die "sockperf server did not bind $NETNS_HOST_V4:$PORT"
	fi
	if [ "$SLICE_US" -gt 0 ]; then
		python3 "$REPO/benches/set-slice.py" "$pid" "$SLICE_US" >"$WORK/$tag-slice.log" 2>&1 ||
			die "could not set sockperf server's scheduling slice: $(cat "$WORK/$tag-slice.log")"
	fi
	run_clients "$mode" "$tag" || true
	stop_pid "$pid" 5 || true
}

run_steer() {
	local mode=$1 pid rc=0
	local tag="steer-$mode"
	log "$mode: steer (${STEER_CMD[*]}) with $CLIENTS clients, ${SECS}s"
	local sargs=(--interface "$NETNS_HOST_IF" --port "$PORT" --cpus "$CPUS" --sockperf
		--stats-json "$WORK/$tag-stats.json" --no-table --worker-slice-us "$SLICE_US" "${STEER_EXTRA[@]}")
	if [ "${STEER_CMD[0]}" = standin ]; then
		standin_steer_echo "${sargs[@]}" >"$WORK/$tag-server.log" 2>&1 &
	else
		taskset -c "$CPUS" "${STEER_CMD[@]}" "${sargs[@]}" >"$WORK/$tag-server.log" 2>&1 &
	fi
	pid=$!
	PIDS+=("$pid")
	if ! wait_ready "$WORK/$tag-server.log" "$pid" 60; then
		tail -n 20 "$WORK/$tag-server.log" >&2
		stop_pid "$pid" 2 || true
		die "the steer echo server did not print 'ready' (log above)"
	fi
	run_clients "$mode" "$tag" || true
	stop_pid "$pid" 10 || rc=$?
	if [ "$rc" -ne 0 ]; then
		log "steer echo server exited with $rc: $(tail -n 3 "$WORK/$tag-server.log" | tr '\n' ' ')"
	fi
	if ip -d link show dev "$NETNS_HOST_IF" 2>/dev/null | grep -q 'prog/xdp'; then
		log "warning: an XDP program is still attached to $NETNS_HOST_IF after the echo server stopped"
	fi
	echo "$rc" >"$WORK/$tag-exit"
}

# ---------------------------------------------------------------------------

usage() {
	sed -n '4,/^$/{s/^# \{0,1\}//;p}' "$0"
}

SECS=10
CLIENTS=4
CPUS=
PORT=11111
CLIENT_PORT=20000
MSG_SIZE=14
MPS=max
MODE_ARG=both
JSON_OUT=
KEEP_LOGS=
RUN_KERNEL=1
RUN_STEER=1
REQUIRE_GOAL=0
SLICE_US=100
STEER_EXTRA=()
STEER_CMD=()

while [ $# -gt 0 ]; do
	case $1 in
	--self-test)
		steer_bench sockperf check-fixtures "$FIXTURES"
		exit $?
		;;
	--parse)
		steer_bench sockperf parse "${2:?--parse FILE}"
		exit $?
		;;
	-t | --time) SECS=${2:?}; shift 2 ;;
	-c | --clients) CLIENTS=${2:?}; shift 2 ;;
	--quick) SECS=2; shift ;;
	--cpus) CPUS=${2:?}; shift 2 ;;
	--port) PORT=${2:?}; shift 2 ;;
	--client-port) CLIENT_PORT=${2:?}; shift 2 ;;
	-m | --msg-size) MSG_SIZE=${2:?}; shift 2 ;;
	--mps) MPS=${2:?}; shift 2 ;;
	--mode) MODE_ARG=${2:?}; shift 2 ;;
	--json) JSON_OUT=${2:?}; shift 2 ;;
	--keep-logs) KEEP_LOGS=${2:?}; shift 2 ;;
	--kernel-only) RUN_STEER=0; shift ;;
	--steer-only) RUN_KERNEL=0; shift ;;
	--require-goal) REQUIRE_GOAL=1; shift ;;
	--slice-us) SLICE_US=${2:?}; shift 2 ;;
	-h | --help)
		usage
		exit 0
		;;
	--)
		shift
		STEER_EXTRA=("$@")
		break
		;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

if ! [[ $SECS =~ ^[1-9][0-9]*$ ]]; then die "-t wants whole seconds >= 1"; fi
if ! [[ $CLIENTS =~ ^[1-9][0-9]*$ ]]; then die "-c wants a count >= 1"; fi
[[ $MPS =~ ^([0-9]+|max)$ ]] || die "--mps wants a number or max"
[[ $SLICE_US =~ ^[0-9]+$ ]] || die "--slice-us wants whole microseconds (0: kernel default)"
case $MODE_ARG in
under-load | ul) MODES=(under-load) ;;
ping-pong | pp) MODES=(ping-pong) ;;
both) MODES=(under-load ping-pong) ;;
*) die "--mode wants under-load, ping-pong or both" ;;
esac

[ "$(id -u)" -eq 0 ] || die "run as root (network namespaces, veth, RPS sysctls, XDP): sudo $0"
for tool in sockperf taskset ss ip timeout awk sed flock; do
	command -v "$tool" >/dev/null || die "$tool not found (scripts/setup.sh installs what is needed)"
done
[ -n "$CPUS" ] || CPUS=$(cat /sys/devices/system/cpu/online)
cpulist_expand "$CPUS" >/dev/null || die "--cpus '$CPUS' is not a CPU list"
RPS_MASK=$(cpulist_mask "$CPUS")

if [ "$RUN_STEER" = 1 ]; then
	if [ -n "${STEER_SERVER_CMD:-}" ]; then
		read -r -a STEER_CMD <<<"$STEER_SERVER_CMD"
	else
		bin=${STEER:-${CARGO_TARGET_DIR:-$REPO/target}/release/steer}
		if [ ! -x "$bin" ]; then
			log "$bin missing: cargo build --release -p steer-cli"
			if ! (cd "$REPO" && cargo build --release -p steer-cli); then
				die "could not build the steer command (cargo build --release -p steer-cli failed, output above); run with --kernel-only to measure the kernel alone"
			fi
			[ -x "$bin" ] || die "built, but $bin is still missing (CARGO_TARGET_DIR?)"
		fi
		STEER_CMD=("$bin" echo)
	fi
fi

# shellcheck source=scripts/netns.sh
. "$REPO/scripts/netns.sh"
NS=$(netns_default_name)
WORK=$(mktemp -d /tmp/steer-compare.XXXXXX)

cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do
		for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rps_restore
	netns_down "$NS"
	if [ -n "$KEEP_LOGS" ]; then
		mkdir -p "$KEEP_LOGS" && cp -r "$WORK"/. "$KEEP_LOGS"/ && log "logs kept in $KEEP_LOGS"
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT
trap 'log terminated; exit 143' TERM

# One measurement at a time: runs sharing the CPUs would measure each other,
# and net.core.rps_sock_flow_entries is global (save/restore must not
# interleave). The lock goes with the process.
LOCK=/run/lock/steer-compare-kernel.lock
exec {lock_fd}>"$LOCK"
if ! flock -n "$lock_fd"; then
	log "another compare-kernel run holds $LOCK: waiting (up to 15 min)"
	flock -w 900 "$lock_fd" || die "gave up waiting for $LOCK"
fi

netns_up "$NS" || die "could not set up the namespace and veth pair"
rps_configure "$NETNS_HOST_IF" "$RPS_MASK"
log "netns $NETNS_NAME, $NETNS_HOST_IF $NETNS_HOST_V4 <-> $NETNS_NS_IF $NETNS_NS_V4, CPUs $CPUS (RPS mask $RPS_MASK)"
if ss -Hlun "sport = :$PORT" | grep -q .; then
	log "warning: something already listens on UDP port $PORT (ss -lun): $(ss -Hlun "sport = :$PORT" | head -n 1)"
fi

for mode in "${MODES[@]}"; do
	if [ "$RUN_KERNEL" = 1 ]; then run_kernel "$mode"; fi
	if [ "$RUN_STEER" = 1 ]; then run_steer "$mode"; fi
done

report_args=(sockperf compare --work "$WORK" --clients "$CLIENTS"
	--modes "$(IFS=,; echo "${MODES[*]}")"
	--set "seconds=$SECS" --set "clients=$CLIENTS" --set "cpus=$CPUS" --set "port=$PORT"
	--set "client_port_base=$CLIENT_PORT" --set "msg_size=$MSG_SIZE" --set "mps=$MPS"
	--set "interface=$NETNS_HOST_IF" --set "namespace=$NETNS_NAME" --set "server_ip=$NETNS_HOST_V4"
	--set "sockperf=$(sockperf --version 2>&1 | head -n 1)" --set "steer_cmd=${STEER_CMD[*]:-}"
	--set "rps_cpus=$RPS_MASK" --set "rps_flow_cnt=$RPS_FLOW_CNT"
	--set "rps_sock_flow_entries=$RPS_SOCK_FLOW_ENTRIES" --set "server_slice_us=$SLICE_US")
[ -n "$JSON_OUT" ] && report_args+=(--json "$JSON_OUT")
[ "$REQUIRE_GOAL" = 1 ] && report_args+=(--require-goal)
status=0
steer_bench "${report_args[@]}" || status=$?
exit "$status"
