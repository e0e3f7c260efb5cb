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
# taskset to the same CPU set. Prints one table and optionally a JSON summary.
#
# Usage (as root):
#   benches/compare-kernel.sh [-t SECS] [-c CLIENTS] [--quick] [--cpus LIST]
#       [--mode under-load|ping-pong|both] [--kernel-only|--steer-only]
#       [--port PORT] [--client-port BASE] [-m MSG_SIZE] [--mps N|max]
#       [--json FILE] [--keep-logs DIR] [--require-goal] [--slice-us N]
#       [-- EXTRA steer echo ARGS...]
#   benches/compare-kernel.sh --self-test     (parser check on benches/fixtures)
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
# Numbers. sockperf's latency is one-way (RTT/2), in usec. msg/s:
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
# Parsing sockperf 3.7 client reports.

# sockperf_parse FILE: prints key=value lines extracted from one sockperf
# client's output (stdout+stderr, ANSI colours and all):
#   total_runtime total_sent total_received skipped        [Total Run]
#   valid_runtime valid_sent valid_received                [Valid Duration]
#   avg_usec                     "Summary: Latency is X usec" (or avg-latency=)
#   observations                 "Total N observations"
#   min max p25 p50 p75 p90 p99 p99_9 p99_99 p99_999   "---> ... = X"
#   dropped duplicated ooo       "# dropped messages = ..."
#   msg_rate                     "Summary: Message Rate is N [msg/sec]" (throughput mode)
#   error                        why there are no results, if so
#   ok                           1 when latency results were found, else 0
sockperf_parse() {
	local file=$1
	[ -r "$file" ] || {
		echo "ok=0"
		echo "error=unreadable"
		return 1
	}
	sed 's/\x1b\[[0-9;]*m//g' "$file" | awk '
	# The number right after "key" (skipping blanks and "="), or "".
	function after(line, key,    i, s) {
		i = index(line, key)
		if (i == 0) return ""
		s = substr(line, i + length(key))
		sub(/^[ \t=]+/, "", s)
		if (match(s, /^[-+]?[0-9]+(\.[0-9]+)?/)) return substr(s, RSTART, RLENGTH)
		return ""
	}
	function put(k, v) { if (v != "") val[k] = v }
	/\[Total Run\]/ {
		put("total_runtime", after($0, "RunTime="))
		put("total_sent", after($0, "SentMessages="))
		put("total_received", after($0, "ReceivedMessages="))
		put("skipped", after($0, "SkippedMessages="))
		next
	}
	/\[Valid Duration\]/ {
		put("valid_runtime", after($0, "RunTime="))
		put("valid_sent", after($0, "SentMessages="))
		put("valid_received", after($0, "ReceivedMessages="))
		next
	}
	/====> avg-(latency|rtt)=/ {
		if (!("avg_usec" in val)) { s = $0; sub(/.*avg-(latency|rtt)/, "", s); put("avg_usec", after(s, "")) }
		next
	}
	/Summary: (Latency|Round trip)( of burst of [0-9]+ messages)? is / {
		s = $0; sub(/.* is /, "", s); put("avg_usec", after(s, ""))
		next
	}
	/Summary: Message Rate is / { put("msg_rate", after($0, "Message Rate is")); next }
	/# dropped messages/ {
		put("dropped", after($0, "dropped messages"))
		put("duplicated", after($0, "duplicated messages"))
		put("ooo", after($0, "out-of-order messages"))
		next
	}
	/Total [0-9]+ observations/ { put("observations", after($0, "Total")); next }
	/---> <MAX> observation/ { put("max", after($0, "observation")); next }
	/---> <MIN> observation/ { put("min", after($0, "observation")); next }
	/---> percentile / {
		p = after($0, "percentile")
		s = $0; sub(/.*percentile[ \t]+[0-9.]+/, "", s)
		v = after(s, "")
		if (p != "" && v != "") {
			sub(/0+$/, "", p); sub(/\.$/, "", p); gsub(/\./, "_", p)
			put("p" p, v)
		}
		next
	}
	/No messages were received from the server/ { err = "no replies from the server"; next }
	/No valid observations found/ { err = "no valid observations"; next }
	/(ERROR|error):/ && err == "" { s = $0; sub(/^sockperf: /, "", s); gsub(/[ \t]+/, " ", s); err = s; next }
	END {
		ok = ("valid_received" in val) && val["valid_received"] > 0 && ("p50" in val) && ("p99" in val)
		if (!ok && ("msg_rate" in val)) ok = 1
		n = split("total_runtime total_sent total_received skipped valid_runtime valid_sent valid_received avg_usec observations min max p25 p50 p75 p90 p99 p99_9 p99_99 p99_999 dropped duplicated ooo msg_rate", keys, " ")
		for (i = 1; i <= n; i++) if (keys[i] in val) print keys[i] "=" val[keys[i]]
		if (!ok && err == "") err = "no results in the output"
		if (err != "") print "error=" err
		print "ok=" (ok ? 1 : 0)
	}'
}

# kv_get FILE KEY: the value of KEY in a key=value file ("" if absent).
kv_get() {
	awk -F= -v k="$2" '$1 == k { sub(/^[^=]*=/, ""); print; exit }' "$1"
}

# sockperf_aggregate MODE PARSED... : key=value lines over the clients.
#   clients ok_clients ok sent_per_sec msg_per_sec p50 p99 avg_usec dropped
#   duplicated ooo valid_sent valid_received
# MODE under-load: msg/s = sent/s * (received+ooo)/(received+ooo+dropped)
# (the fraction of sampled replies that came back); ping-pong: received/s.
# p50/p99/avg: medians over the clients that have results.
sockperf_aggregate() {
	local mode=$1
	shift
	awk -v mode="$mode" '
	function median(a, n,    i, j, t) {
		if (n == 0) return ""
		for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	FNR == 1 { nfiles++ }
	{ k = $0; sub(/=.*/, "", k); v = $0; sub(/^[^=]*=/, "", v); d[nfiles, k] = v; has[nfiles, k] = 1 }
	END {
		for (f = 1; f <= nfiles; f++) {
			if (d[f, "ok"] != 1 || !has[f, "valid_runtime"] || d[f, "valid_runtime"] <= 0) { bad++; continue }
			good++
			rt = d[f, "valid_runtime"]; sent = d[f, "valid_sent"]; rcv = d[f, "valid_received"]
			drop = d[f, "dropped"] + 0; ooo = d[f, "ooo"] + 0
			sps = sent / rt
			if (mode == "under-load") {
				exp_ = rcv + ooo + drop
				mps = exp_ > 0 ? sps * (rcv + ooo) / exp_ : 0
			} else {
				mps = rcv / rt
			}
			sum_sps += sps; sum_mps += mps
			p50[good] = d[f, "p50"]; p99[good] = d[f, "p99"]; avg[good] = d[f, "avg_usec"]
			tdrop += drop; tdup += d[f, "duplicated"]; tooo += ooo
			tsent += sent; trcv += rcv
		}
		printf "clients=%d\nok_clients=%d\nok=%d\n", nfiles, good, (nfiles > 0 && bad == 0)
		if (good > 0) {
			printf "sent_per_sec=%.1f\nmsg_per_sec=%.1f\n", sum_sps, sum_mps
			printf "p50=%.3f\np99=%.3f\navg_usec=%.3f\n", median(p50, good), median(p99, good), median(avg, good)
			printf "dropped=%d\nduplicated=%d\nooo=%d\nvalid_sent=%d\nvalid_received=%d\n", tdrop, tdup, tooo, tsent, trcv
		}
	}' "$@"
}

# ---------------------------------------------------------------------------
# Self-test: parse the captured outputs in benches/fixtures and compare with
# the hand-written expectations (sockperf-*.expected, key=value; a key with
# an empty value must be absent).

self_test() {
	local fails=0 checks=0 f exp name key want got parsed
	parsed=$(mktemp)
	shopt -s nullglob
	local expected=("$FIXTURES"/sockperf-*.expected)
	[ ${#expected[@]} -gt 0 ] || die "self-test: no fixtures in $FIXTURES"
	for exp in "${expected[@]}"; do
		name=$(basename "$exp" .expected)
		f=$FIXTURES/$name.txt
		if [ ! -r "$f" ]; then
			echo "FAIL $name: $f missing"
			fails=$((fails + 1))
			continue
		fi
		sockperf_parse "$f" >"$parsed" || true
		while IFS='=' read -r key want; do
			case $key in '' | '#'*) continue ;; esac
			checks=$((checks + 1))
			if grep -q "^$key=" "$parsed"; then got=$(kv_get "$parsed" "$key"); else got="<absent>"; fi
			if [ -z "$want" ]; then
				[ "$got" = "<absent>" ] && continue
			elif [ "$got" != "<absent>" ] && { [ "$got" = "$want" ] || awk -v a="$got" -v b="$want" 'BEGIN { exit !(a ~ /^[-+0-9.]+$/ && b ~ /^[-+0-9.]+$/ && a + 0 == b + 0) }'; }; then
				continue
			fi
			echo "FAIL $name: $key: want '${want:-<absent>}', got '$got'"
			fails=$((fails + 1))
		done <"$exp"
	done
	# Aggregation over the four clients of one captured run per mode.
	local mode tag files agg
	for tag in ul pp; do
		files=("$FIXTURES"/sockperf-"$tag"-veth-client?.txt)
		[ ${#files[@]} -gt 0 ] || continue
		[ -r "$FIXTURES/aggregate-$tag-veth.expected" ] || continue
		mode=$([ "$tag" = ul ] && echo under-load || echo ping-pong)
		agg=$(mktemp)
		local pf=() i=0
		for f in "${files[@]}"; do
			pf+=("$agg.$i")
			sockperf_parse "$f" >"$agg.$i" || true
			i=$((i + 1))
		done
		sockperf_aggregate "$mode" "${pf[@]}" >"$agg"
		while IFS='=' read -r key want; do
			case $key in '' | '#'*) continue ;; esac
			checks=$((checks + 1))
			got=$(kv_get "$agg" "$key")
			# Rates are printed with one decimal: compare within 0.05.
			if awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.05) }'; then
				continue
			fi
			echo "FAIL aggregate-$tag-veth: $key: want '$want', got '$got'"
			fails=$((fails + 1))
		done <"$FIXTURES/aggregate-$tag-veth.expected"
		rm -f "$agg" "${pf[@]}"
	done
	rm -f "$parsed"
	if [ "$fails" -ne 0 ]; then
		echo "self-test: $fails of $checks checks FAILED"
		return 1
	fi
	echo "self-test: all $checks checks passed (${#expected[@]} sockperf outputs, aggregation)"
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
	local mode=$1 tag=$2 i pids=() kvs=() cport rc failed=0
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
		sockperf_parse "$WORK/$tag-client$i.log" >"$WORK/$tag-client$i.kv" || true
		if [ "$(kv_get "$WORK/$tag-client$i.kv" ok)" != 1 ]; then
			log "$tag client $i: no results: $(kv_get "$WORK/$tag-client$i.kv" error)"
		fi
		kvs+=("$WORK/$tag-client$i.kv")
	done
	sockperf_aggregate "$mode" "${kvs[@]}" >"$WORK/$tag.kv"
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
# Report.

# ratio A B: A/B with 2 decimals, "-" when not computable.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}

fmt_rate() { awk -v v="$1" 'BEGIN { if (v == "") print "-"; else printf "%.0f", v }'; }
fmt_usec() { awk -v v="$1" 'BEGIN { if (v == "") print "-"; else printf "%.1f", v }'; }

# goal_met MODE: steer msg/s >= 3x kernel, p99 <= kernel, 0 ooo.
goal_met() {
	local k=$WORK/kernel-$1.kv s=$WORK/steer-$1.kv
	[ -r "$k" ] && [ -r "$s" ] || return 1
	[ "$(kv_get "$k" ok)" = 1 ] && [ "$(kv_get "$s" ok)" = 1 ] || return 1
	awk -v km="$(kv_get "$k" msg_per_sec)" -v sm="$(kv_get "$s" msg_per_sec)" \
		-v kp="$(kv_get "$k" p99)" -v sp="$(kv_get "$s" p99)" -v so="$(kv_get "$s" ooo)" \
		'BEGIN { exit !(km > 0 && sm >= 3 * km && sp <= kp && so == 0) }'
}

print_table() {
	local mode side kv fmt="%-10s %-7s %7s %11s %11s %9s %9s %9s %6s %6s\n"
	echo
	echo "steer vs kernel: $CLIENTS sockperf clients from netns $NETNS_NAME to $NETNS_HOST_V4:$PORT ($NETNS_HOST_IF), CPUs $CPUS, ${SECS}s per run, ${MSG_SIZE}-byte messages, server slice $( [ "$SLICE_US" -gt 0 ] && echo "${SLICE_US} us" || echo "kernel default")"
	echo "latency: one-way (RTT/2) usec, median over clients; msg/s summed (under-load: sent/s x share of sampled replies back)"
	echo "ratio = steer/kernel (msg/s: higher is better; latency: lower is better)"
	# shellcheck disable=SC2059
	printf "$fmt" mode server clients sent/s msg/s p50 p99 dropped dup ooo
	for mode in "${MODES[@]}"; do
		for side in kernel steer; do
			kv=$WORK/$side-$mode.kv
			[ -r "$kv" ] || continue
			if [ "$(kv_get "$kv" ok_clients)" = 0 ]; then
				# shellcheck disable=SC2059
				printf "$fmt" "$mode" "$side" "0/$(kv_get "$kv" clients)" - - - - - - "-  (no results)"
				continue
			fi
			# shellcheck disable=SC2059
			printf "$fmt" "$mode" "$side" "$(kv_get "$kv" ok_clients)/$(kv_get "$kv" clients)" \
				"$(fmt_rate "$(kv_get "$kv" sent_per_sec)")" "$(fmt_rate "$(kv_get "$kv" msg_per_sec)")" \
				"$(fmt_usec "$(kv_get "$kv" p50)")" "$(fmt_usec "$(kv_get "$kv" p99)")" \
				"$(kv_get "$kv" dropped)" "$(kv_get "$kv" duplicated)" "$(kv_get "$kv" ooo)"
		done
		if [ -r "$WORK/kernel-$mode.kv" ] && [ -r "$WORK/steer-$mode.kv" ]; then
			local k=$WORK/kernel-$mode.kv s=$WORK/steer-$mode.kv
			# shellcheck disable=SC2059
			printf "$fmt" "$mode" ratio "" \
				"$(ratio "$(kv_get "$s" sent_per_sec)" "$(kv_get "$k" sent_per_sec)")" \
				"$(ratio "$(kv_get "$s" msg_per_sec)" "$(kv_get "$k" msg_per_sec)")" \
				"$(ratio "$(kv_get "$s" p50)" "$(kv_get "$k" p50)")" \
				"$(ratio "$(kv_get "$s" p99)" "$(kv_get "$k" p99)")" "" "" ""
			if goal_met "$mode"; then
				echo "$mode: goal met (steer msg/s >= 3x kernel, p99 <= kernel, 0 out-of-order)"
			else
				echo "$mode: goal NOT met (steer msg/s >= 3x kernel, p99 <= kernel, 0 out-of-order)"
			fi
		fi
	done
	echo
}

# JSON helpers: a number or null.
jnum() { awk -v v="$1" 'BEGIN { if (v ~ /^[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) print v + 0; else print "null" }'; }
jstr() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	printf '"%s"' "$s"
}

json_side() {
	local mode=$1 side=$2 kv=$WORK/$2-$1.kv i c first=1
	if [ ! -r "$kv" ]; then
		printf 'null'
		return
	fi
	printf '{"ok": %s, "clients": %s, "ok_clients": %s, "sent_per_sec": %s, "msg_per_sec": %s, "p50_usec": %s, "p99_usec": %s, "avg_usec": %s, "dropped": %s, "duplicated": %s, "out_of_order": %s' \
		"$([ "$(kv_get "$kv" ok)" = 1 ] && echo true || echo false)" \
		"$(jnum "$(kv_get "$kv" clients)")" "$(jnum "$(kv_get "$kv" ok_clients)")" \
		"$(jnum "$(kv_get "$kv" sent_per_sec)")" "$(jnum "$(kv_get "$kv" msg_per_sec)")" \
		"$(jnum "$(kv_get "$kv" p50)")" "$(jnum "$(kv_get "$kv" p99)")" "$(jnum "$(kv_get "$kv" avg_usec)")" \
		"$(jnum "$(kv_get "$kv" dropped)")" "$(jnum "$(kv_get "$kv" duplicated)")" "$(jnum "$(kv_get "$kv" ooo)")"
	if [ "$side" = steer ] && [ -r "$WORK/$side-$mode-exit" ]; then
		printf ', "server_exit": %s' "$(jnum "$(cat "$WORK/$side-$mode-exit")")"
		if [ -s "$WORK/$side-$mode-stats.json" ] && command -v jq >/dev/null && jq -e . "$WORK/$side-$mode-stats.json" >/dev/null 2>&1; then
			printf ', "server_stats": %s' "$(jq -c . "$WORK/$side-$mode-stats.json")"
		fi
	fi
	printf ', "per_client": ['
	for ((i = 0; i < CLIENTS; i++)); do
		c=$WORK/$side-$mode-client$i.kv
		[ -r "$c" ] || continue
		[ $first = 1 ] || printf ', '
		first=0
		printf '{"client_port": %s, "ok": %s, "error": %s, "valid_runtime_sec": %s, "valid_sent": %s, "valid_received": %s, "p50_usec": %s, "p99_usec": %s, "max_usec": %s, "avg_usec": %s, "dropped": %s, "duplicated": %s, "out_of_order": %s}' \
			$((CLIENT_PORT + i)) "$([ "$(kv_get "$c" ok)" = 1 ] && echo true || echo false)" \
			"$(if [ -n "$(kv_get "$c" error)" ]; then jstr "$(kv_get "$c" error)"; else echo null; fi)" \
			"$(jnum "$(kv_get "$c" valid_runtime)")" "$(jnum "$(kv_get "$c" valid_sent)")" "$(jnum "$(kv_get "$c" valid_received)")" \
			"$(jnum "$(kv_get "$c" p50)")" "$(jnum "$(kv_get "$c" p99)")" "$(jnum "$(kv_get "$c" max)")" "$(jnum "$(kv_get "$c" avg_usec)")" \
			"$(jnum "$(kv_get "$c" dropped)")" "$(jnum "$(kv_get "$c" duplicated)")" "$(jnum "$(kv_get "$c" ooo)")"
	done
	printf ']}'
}

write_json() {
	local json_file=$1 mode first=1 k s
	{
		printf '{"tool": "benches/compare-kernel.sh", "format": 1,\n'
		printf ' "config": {"seconds": %s, "clients": %s, "cpus": %s, "port": %s, "client_port_base": %s, "msg_size": %s, "mps": %s, "interface": %s, "namespace": %s, "server_ip": %s, "sockperf": %s, "steer_cmd": %s, "rps": {"rps_cpus": %s, "rps_flow_cnt": %s, "rps_sock_flow_entries": %s}, "server_slice_us": %s, "latency": "one-way usec (RTT/2), median over clients"},\n' \
			"$SECS" "$CLIENTS" "$(jstr "$CPUS")" "$PORT" "$CLIENT_PORT" "$MSG_SIZE" "$(jstr "$MPS")" \
			"$(jstr "$NETNS_HOST_IF")" "$(jstr "$NETNS_NAME")" "$(jstr "$NETNS_HOST_V4")" \
			"$(jstr "$(sockperf --version 2>&1 | head -n 1)")" "$(jstr "${STEER_CMD[*]:-}")" \
			"$(jstr "$RPS_MASK")" "$RPS_FLOW_CNT" "$RPS_SOCK_FLOW_ENTRIES" "$SLICE_US"
		printf ' "modes": {'
		for mode in "${MODES[@]}"; do
			[ $first = 1 ] || printf ','
			first=0
			k=$WORK/kernel-$mode.kv
			s=$WORK/steer-$mode.kv
			printf '\n  %s: {"kernel": %s,\n    "steer": %s,\n    "ratio": ' "$(jstr "$mode")" "$(json_side "$mode" kernel)" "$(json_side "$mode" steer)"
			if [ -r "$k" ] && [ -r "$s" ]; then
				printf '{"msg_per_sec": %s, "p50": %s, "p99": %s}, "goal_met": %s}' \
					"$(jnum "$(ratio "$(kv_get "$s" msg_per_sec)" "$(kv_get "$k" msg_per_sec)")")" \
					"$(jnum "$(ratio "$(kv_get "$s" p50)" "$(kv_get "$k" p50)")")" \
					"$(jnum "$(ratio "$(kv_get "$s" p99)" "$(kv_get "$k" p99)")")" \
					"$(goal_met "$mode" && echo true || echo false)"
			else
				printf 'null, "goal_met": null}'
			fi
		done
		printf '\n }\n}\n'
	} >"$json_file"
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
		self_test
		exit $?
		;;
	--parse)
		sockperf_parse "${2:?--parse FILE}"
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

print_table
if [ -n "$JSON_OUT" ]; then
	write_json "$JSON_OUT"
	log "JSON summary in $JSON_OUT"
fi

status=0
for mode in "${MODES[@]}"; do
	for side in kernel steer; do
		kv=$WORK/$side-$mode.kv
		if [ -r "$kv" ] && [ "$(kv_get "$kv" ok)" != 1 ]; then
			log "$side $mode: not every client has results"
			status=2
		fi
	done
	if [ "$REQUIRE_GOAL" = 1 ] && ! goal_met "$mode"; then
		status=3
	fi
done
exit "$status"
