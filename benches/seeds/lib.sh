# shellcheck shell=bash source-path=SCRIPTDIR/../..
# Shared helpers of the seed reproductions (benches/seeds/seed*.sh). Sourced,
# never run: it only defines functions and variables. Each script sets
# SEEDS_NAME (its log prefix) before sourcing it.
#
#   seeds_require_root / seeds_require_tools TOOL...   clear errors up front
#   seeds_steer             path of the release `steer` command, built when missing
#   seeds_lock              one seed measurement at a time (flock)
#   seeds_setup_traps       cleanup on EXIT, INT, TERM (processes, netns, files)
#   seeds_netns_up          namespace + 2-queue veth pair (scripts/netns.sh)
#   seeds_start LOG CMD...  start a tracked background process
#   seeds_stop PID [SECS]   SIGINT, then SIGTERM, then SIGKILL
#   seeds_wait_ready LOG PID SECS    wait for a line containing "ready"
#   seeds_cpu_ticks PID     utime+stime of a process (all threads), in ticks
#   seeds_control_open / seeds_control CMD    stdin commands of steer proxy
#
# Environment:
#   STEER_SRC        the source tree cargo builds and benches run in (default:
#                    this repository). Point it at a clean checkout (e.g.
#                    `git archive HEAD | tar -x -C DIR`) when the working tree
#                    is being edited by others.
#   CARGO_TARGET_DIR where release examples and criterion results live
#                    (default: $STEER_SRC/target).
#   STEER                    explicit path of the `steer` command.

SEEDS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SEEDS_REPO=$(cd "$SEEDS_DIR/../.." && pwd)
STEER_SRC=${STEER_SRC:-$SEEDS_REPO}
SEEDS_TARGET=${CARGO_TARGET_DIR:-$STEER_SRC/target}
SEEDS_LOCK=${SEEDS_LOCK:-/run/lock/steer-seeds.lock}
SEEDS_PIDS=()
SEEDS_WORK=
SEEDS_NS=
SEEDS_KEEP_LOGS=
SEEDS_CTL_FD=
SEEDS_LAST_PID=

seeds_log() { echo "${SEEDS_NAME:-seeds} [+${SECONDS}s]: $*" >&2; }
seeds_die() {
	seeds_log "$*"
	exit 1
}

seeds_require_root() {
	[ "$(id -u)" -eq 0 ] || seeds_die "run as root (network namespaces, veth pairs, XDP programs, AF_XDP sockets): sudo $0"
}

seeds_require_tools() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 ||
			seeds_die "'$t' not found (apt-get install: sockperf jq util-linux iproute2 python3; scripts/setup.sh installs what the repo needs)"
	done
}

# seeds_steer: prints the path of the release `steer` command, building it
# (cargo build --release -p steer-cli in $STEER_SRC) when missing; $STEER
# names another binary.
seeds_steer() {
	local bin=${STEER:-$SEEDS_TARGET/release/steer}
	if [ ! -x "$bin" ]; then
		[ -z "${STEER:-}" ] || seeds_die "STEER=$bin is not an executable file"
		seeds_log "$bin missing: cargo build --release -p steer-cli (in $STEER_SRC)"
		command -v cargo >/dev/null 2>&1 || seeds_die "cargo not found: build the steer command first (cargo build --release -p steer-cli)"
		(cd "$STEER_SRC" && CARGO_TARGET_DIR=$SEEDS_TARGET cargo build --release -p steer-cli >&2) ||
			seeds_die "could not build steer (output above); set STEER_SRC to a tree that builds, or STEER to a binary"
		[ -x "$bin" ] || seeds_die "built, but $bin is still missing (CARGO_TARGET_DIR?)"
	fi
	echo "$bin"
}

# seeds_lock: one seed measurement at a time (runs sharing the 2 CPUs would
# measure each other). The lock is released when the script exits.
seeds_lock() {
	local fd
	exec {fd}>"$SEEDS_LOCK" || seeds_die "cannot open the lock file $SEEDS_LOCK"
	if ! flock -n "$fd"; then
		seeds_log "another seed run holds $SEEDS_LOCK: waiting (up to 10 min)"
		flock -w 600 "$fd" || seeds_die "gave up waiting for $SEEDS_LOCK"
	fi
}

seeds_forget() {
	local p keep=()
	for p in "${SEEDS_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	SEEDS_PIDS=("${keep[@]}")
}

# seeds_start LOG CMD...: runs CMD in the background (stdout+stderr to LOG),
# tracked for cleanup; sets SEEDS_LAST_PID.
seeds_start() {
	local logf=$1
	shift
	"$@" >"$logf" 2>&1 &
	SEEDS_LAST_PID=$!
	SEEDS_PIDS+=("$SEEDS_LAST_PID")
}

# seeds_stop PID [SECS]: SIGINT, SIGTERM after SECS, SIGKILL 2 s later;
# returns the process's exit status.
seeds_stop() {
	local pid=$1 secs=${2:-10} i rc=0
	kill -INT "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		seeds_log "pid $pid ignored SIGINT for ${secs}s: SIGTERM"
		kill -TERM "$pid" 2>/dev/null || true
		sleep 2
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null || rc=$?
	seeds_forget "$pid"
	return "$rc"
}

# seeds_wait_exit PID SECS: waits for PID to exit by itself (then returns its
# status), stopping it after SECS.
seeds_wait_exit() {
	local pid=$1 secs=$2 i rc=0
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		seeds_log "pid $pid still running after ${secs}s: stopping it"
		seeds_stop "$pid" 5 || rc=$?
		return "$rc"
	fi
	wait "$pid" 2>/dev/null || rc=$?
	seeds_forget "$pid"
	return "$rc"
}

# seeds_wait_ready LOG PID SECS: a line with the word "ready" in LOG.
seeds_wait_ready() {
	local logf=$1 pid=$2 secs=$3 i
	for ((i = 0; i < secs * 20; i++)); do
		grep -qw ready "$logf" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# seeds_cpu_ticks PID: utime + stime (clock ticks, all threads) from
# /proc/PID/stat; the command name may hold spaces, so fields are counted
# after its closing parenthesis.
seeds_cpu_ticks() {
	local stat rest
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || {
		echo 0
		return 1
	}
	rest=${stat##*) }
	# rest: state(3) ppid(4) ... utime(14) stime(15): fields 12 and 13 here.
	awk '{ print $12 + $13 }' <<<"$rest"
}

# shellcheck disable=SC2034 # used by the seed scripts
SEEDS_CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

seeds_now() { date +%s.%N; }

# seeds_udp_bound PORT: something in the root namespace has UDP PORT bound.
seeds_udp_bound() {
	ss -Hlun "sport = :$1" 2>/dev/null | grep -q .
}

# seeds_free_udp_port BASE: the first port >= BASE nothing has bound.
seeds_free_udp_port() {
	local p=$1
	while seeds_udp_bound "$p"; do p=$((p + 1)); done
	echo "$p"
}

# seeds_wait_udp PORT PID SECS: wait until PORT is bound (by PID).
seeds_wait_udp() {
	local port=$1 pid=$2 secs=$3 i
	for ((i = 0; i < secs * 20; i++)); do
		seeds_udp_bound "$port" && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# Control of a process reading commands on stdin (steer proxy: `stats`,
# `quit`): start it with stdin from "$SEEDS_WORK/ctl.fifo" (seeds_control_fifo
# creates it), then seeds_control_open, then seeds_control CMD.
seeds_control_fifo() {
	rm -f "$SEEDS_WORK/ctl.fifo"
	mkfifo "$SEEDS_WORK/ctl.fifo"
	echo "$SEEDS_WORK/ctl.fifo"
}

seeds_control_open() {
	local fd
	# Blocks until the reader (the started process) has opened it; the
	# reader opens it at once, so this returns at once.
	exec {fd}>"$SEEDS_WORK/ctl.fifo"
	SEEDS_CTL_FD=$fd
}

seeds_control_close() {
	if [ -n "$SEEDS_CTL_FD" ]; then
		exec {SEEDS_CTL_FD}>&-
		SEEDS_CTL_FD=
	fi
}

# seeds_control CMD: writes one command line (never blocks for long: the
# fifo's reader is alive or the write fails).
seeds_control() {
	[ -n "$SEEDS_CTL_FD" ] || return 1
	# In a subshell ignoring SIGPIPE: a reader that died makes the write
	# fail (EPIPE) instead of killing the script.
	(
		trap '' PIPE
		echo "$*" >&"$SEEDS_CTL_FD"
	) 2>/dev/null
}

# seeds_proxy_stats LOG OUT: asks steer proxy (stdin `stats`) for its counters
# and writes the per-CPU snapshot from the line it prints to OUT ({"per_cpu":
# [...],"total":{...}}). Fails after 5 s.
seeds_proxy_stats() {
	local logf=$1 out=$2 before i
	# steer proxy answers `stats` with one line:
	# {"desired_table":{...},"stats":{"per_cpu":[...],"total":{...}}}
	before=$(grep -c '^{"desired_table"' "$logf" || true)
	seeds_control stats || return 1
	for ((i = 0; i < 100; i++)); do
		if [ "$(grep -c '^{"desired_table"' "$logf" || true)" -gt "$before" ]; then
			grep '^{"desired_table"' "$logf" | tail -n 1 | jq -c '.stats' >"$out"
			return 0
		fi
		sleep 0.05
	done
	return 1
}

seeds_netns_up() {
	# shellcheck source=scripts/netns.sh
	. "$SEEDS_REPO/scripts/netns.sh"
	SEEDS_NS=$(netns_default_name)
	netns_up "$SEEDS_NS" || seeds_die "could not set up the namespace and veth pair (scripts/netns.sh)"
}

seeds_cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	seeds_control_close 2>/dev/null || true
	for p in "${SEEDS_PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	for p in "${SEEDS_PIDS[@]}"; do
		for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	SEEDS_PIDS=()
	if [ -n "$SEEDS_NS" ]; then
		netns_down "$SEEDS_NS"
		if ip link show dev "$(netns_host_if "$SEEDS_NS")" >/dev/null 2>&1 || ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$SEEDS_NS"; then
			seeds_log "warning: $SEEDS_NS is still there after netns_down"
		fi
	fi
	if [ -n "$SEEDS_WORK" ] && [ -d "$SEEDS_WORK" ]; then
		if [ -n "$SEEDS_KEEP_LOGS" ]; then
			mkdir -p "$SEEDS_KEEP_LOGS" && cp -r "$SEEDS_WORK"/. "$SEEDS_KEEP_LOGS"/ && seeds_log "logs kept in $SEEDS_KEEP_LOGS"
		fi
		rm -rf "$SEEDS_WORK"
	fi
	exit "$rc"
}

# seeds_setup_traps: a work directory and cleanup on every exit path. (A
# script started with `&` from a non-interactive shell ignores SIGINT: stop
# it with SIGTERM.)
seeds_setup_traps() {
	SEEDS_WORK=$(mktemp -d "/tmp/steer-${SEEDS_NAME:-seeds}.XXXXXX")
	trap seeds_cleanup EXIT
	trap 'seeds_log interrupted; exit 130' INT
	trap 'seeds_log terminated; exit 143' TERM
}

# seeds_usage SCRIPT: the header comment of SCRIPT from line 3 up to the
# first blank line.
seeds_usage() {
	sed -n '3,/^$/{s/^# \{0,1\}//;p}' "$1"
}

# fmt helpers: a number with N decimals, "-" when empty or not a number.
seeds_fmt() {
	awk -v v="$1" -v d="${2:-0}" 'BEGIN { if (v !~ /^[-+]?[0-9.]+([eE][-+]?[0-9]+)?$/) print "-"; else printf "%.*f\n", d, v }'
}

# seeds_div A B [D]: A/B with D decimals, "-" if not computable.
seeds_div() {
	awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.*f\n", d, a / b }'
}

# seeds_kv FILE KEY: the value of KEY in a key=value file ("" if absent).
seeds_kv() {
	awk -F= -v k="$2" '$1 == k { sub(/^[^=]*=/, ""); print; exit }' "$1" 2>/dev/null
}

# seeds_num V: V if it is a number, else null (for JSON).
seeds_num() {
	awk -v v="$1" 'BEGIN { if (v ~ /^[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) print v + 0; else print "null" }'
}

# ---------------------------------------------------------------------------
# criterion benches (run in $STEER_SRC, results under $SEEDS_TARGET/criterion)

# seeds_criterion_build BENCH...: compiles the benches (no run), so the
# timed part does not include a build.
seeds_criterion_build() {
	local b args=()
	for b in "$@"; do args+=(--bench "$b"); done
	command -v cargo >/dev/null 2>&1 || seeds_die "cargo not found (the criterion benches need the Rust toolchain)"
	seeds_log "building the criterion benches ($*) in $STEER_SRC (the first build takes a few minutes)"
	(cd "$STEER_SRC" && CARGO_TARGET_DIR=$SEEDS_TARGET cargo bench --no-default-features "${args[@]}" --no-run) >"$SEEDS_WORK/cargo-build.log" 2>&1 || {
		tail -n 20 "$SEEDS_WORK/cargo-build.log" >&2
		seeds_die "cargo bench --no-run failed (output above); set STEER_SRC to a tree that builds"
	}
}

# seeds_criterion BENCH LOG QUICK FILTER: runs one criterion bench binary with
# a regex filter; QUICK=1 shortens warm-up and measurement (1 s / 2 s).
seeds_criterion() {
	local bench=$1 logf=$2 quick=$3 filter=$4 extra=()
	[ "$quick" = 1 ] && extra=(--warm-up-time 1 --measurement-time 2)
	(cd "$STEER_SRC" && CARGO_TARGET_DIR=$SEEDS_TARGET cargo bench --no-default-features --bench "$bench" -- "${extra[@]}" "$filter") >"$logf" 2>&1
}

# seeds_criterion_estimate FULL_ID NEWER_THAN: "median lower upper elements"
# (ns per iteration; elements per iteration from the throughput, 1 if none)
# of the criterion result FULL_ID (e.g. steer/flow_table/false_sharing/split),
# only if written after the file NEWER_THAN.
seeds_criterion_estimate() {
	local id=$1 marker=$2 f dir
	while IFS= read -r f; do
		[ "$(jq -r .full_id "$f" 2>/dev/null)" = "$id" ] || continue
		dir=$(dirname "$f")
		[ -s "$dir/estimates.json" ] || continue
		jq -r --slurpfile b "$f" '[.median.point_estimate, .median.confidence_interval.lower_bound,
			.median.confidence_interval.upper_bound, ($b[0].throughput.Elements // 1)] | map(tostring) | join(" ")' \
			"$dir/estimates.json"
		return 0
	done < <(find "$SEEDS_TARGET/criterion" -path '*/new/benchmark.json' -newer "$marker" 2>/dev/null)
	return 1
}

# seeds_host_json: the machine and its load when the run ended, as JSON
# (other work on a 2-CPU machine moves every number here).
seeds_host_json() {
	local commit
	if commit=$(git -C "$STEER_SRC" rev-parse HEAD 2>/dev/null); then
		git -C "$STEER_SRC" diff --quiet HEAD -- 2>/dev/null || commit="$commit+dirty"
	else
		commit=$(cat "$STEER_SRC/.commit" 2>/dev/null || true)
	fi
	jq -n --arg kernel "$(uname -r)" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
		--argjson cpus "$(nproc)" --arg commit "$commit" \
		--arg src "$STEER_SRC" \
		'{kernel: $kernel, cpus: $cpus, loadavg_1_5_15: $load, steer_src: $src, steer_commit: $commit}'
}
