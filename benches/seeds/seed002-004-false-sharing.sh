#!/usr/bin/env bash
# shellcheck disable=SC2317 source-path=SCRIPTDIR source-path=SCRIPTDIR/../..
# Seeds 002 ("bridge: improve cache utilization": write-heavy fdb members
# moved to their own cache line, HitM 100% -> 0%) and 004 ("net: dst: Prevent
# false sharing vs. dst_entry::__refcnt": +20..120%): throughput of
# flow-table lookups and of the counters written next to them, with the
# counters split onto their own padded cache line (steer's DesiredCpuTable
# layout) against packed into the header's line, under two threads.
#
# What it runs (no network, no root needed; 2 CPUs to pin to):
# 1. criterion, steer's own bench (benches/table.rs): `cargo bench
#    --no-default-features --bench table` filtered to
#      steer/flow_table/false_sharing/split     lookups while a second thread,
#      steer/flow_table/false_sharing/packed    pinned to the other CPU, bumps
#                                               the record counters
#      steer/flow_table/false_sharing/desired_table_llc_churn
#                                               the real DesiredCpuTable while
#                                               the other thread records
#                                               suppressed intra-LLC churn
#      steer/flow_table/lookup/hit              lookups, no second thread
#    Medians are read from $CARGO_TARGET_DIR/criterion/**/new/estimates.json
#    (ns per batch of 1024 lookups) and turned into lookups per second.
# 2. false_sharing.rs (next to this script, built with `rustc -O` into
#    $CARGO_TARGET_DIR/seeds/): a std-only replica of the bench's packed and
#    split layouts that measures BOTH threads over a fixed time: the reader's
#    lookups/s and the writer's counter increments/s, each also alone.
#
# Columns. criterion: median ns per 1024 lookups [95% CI], M lookups/s,
# x packed (speed-up against packed). replica: M lookups/s and M counter
# increments/s with both threads running, and with each thread alone.
#
# Goal (issue #7 states no number): the split layout should beat the packed
# one under two threads, for the reader and for the writer (the seeds report
# +20..120% and HitM going to 0). On this VM both vCPUs share one L3 (and may
# be SMT siblings on the host), so absolute numbers are the VM's.
#
# Usage:
#   benches/seeds/seed002-004-false-sharing.sh [--quick] [-t SECS]
#       [--criterion-only | --replica-only] [--json FILE] [--keep-logs DIR]
#
#   --quick           criterion warm-up 1 s / measurement 2 s, replica 1 s
#                     per case (CI smoke; ~30 s once built)
#   -t SECS           replica seconds per case (default 3); criterion uses
#                     its defaults (3 s warm-up, 5 s measurement) unless --quick
#   --criterion-only  skip the replica; --replica-only: skip criterion
#   --json FILE       also write the numbers as JSON
#   --keep-logs DIR   keep cargo's and the replica's output
#
# Builds: the criterion bench in $STEER_SRC (default: this repository; see
# lib.sh) with CARGO_TARGET_DIR (default $STEER_SRC/target); the first build
# takes minutes and is not part of the run time. Takes the seeds lock (one
# seed measurement at a time). Exit status: 0 ok, 1 setup error, 2 missing
# numbers.

set -euo pipefail

SEEDS_NAME=seed002-004
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

QUICK=0
SECS=3
RUN_CRITERION=1
RUN_REPLICA=1
JSON_OUT=

while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1; SECS=1; shift ;;
	-t | --time) SECS=${2:?}; shift 2 ;;
	--criterion-only) RUN_REPLICA=0; shift ;;
	--replica-only) RUN_CRITERION=0; shift ;;
	--json) JSON_OUT=${2:?}; shift 2 ;;
	--keep-logs) SEEDS_KEEP_LOGS=${2:?}; shift 2 ;;
	-h | --help)
		seeds_usage "$0"
		exit 0
		;;
	*) seeds_die "unknown argument '$1' (see --help)" ;;
	esac
done
[[ $SECS =~ ^[0-9]+(\.[0-9]+)?$ ]] || seeds_die "-t wants seconds"
[ "$RUN_CRITERION" = 1 ] || [ "$RUN_REPLICA" = 1 ] || seeds_die "--criterion-only and --replica-only exclude each other"
seeds_require_tools jq flock awk find taskset
taskset -c 0,1 true 2>/dev/null || seeds_die "needs CPUs 0 and 1 (the two threads are pinned to them)"

seeds_lock
seeds_setup_traps
W=$SEEDS_WORK
FAILED=0

CRIT_IDS=(steer/flow_table/false_sharing/split steer/flow_table/false_sharing/packed
	steer/flow_table/false_sharing/desired_table_llc_churn steer/flow_table/lookup/hit)

if [ "$RUN_CRITERION" = 1 ]; then
	seeds_criterion_build table
	touch "$W/criterion.marker"
	sleep 1 # mtime granularity: results must be strictly newer
	seeds_log "criterion: steer/flow_table/(false_sharing|lookup/hit)$([ "$QUICK" = 1 ] && echo ' (quick)')"
	if ! seeds_criterion table "$W/criterion-table.log" "$QUICK" 'steer/flow_table/(false_sharing|lookup/hit)'; then
		tail -n 20 "$W/criterion-table.log" >&2
		seeds_log "cargo bench --bench table failed (output above)"
		FAILED=1
	fi
	for id in "${CRIT_IDS[@]}"; do
		est=$(seeds_criterion_estimate "$id" "$W/criterion.marker") || {
			seeds_log "no criterion result for $id"
			FAILED=1
			continue
		}
		read -r med lo hi elems <<<"$est"
		jq -n --arg id "$id" --argjson med "$med" --argjson lo "$lo" --argjson hi "$hi" --argjson n "$elems" \
			'{id: $id, median_ns: $med, ci_lower_ns: $lo, ci_upper_ns: $hi, elements: $n,
			  lookups_per_s: ($n * 1e9 / $med)}' >"$W/crit-$(basename "$id").json"
	done
	grep -E '^false_sharing/.*batches timed' "$W/criterion-table.log" >"$W/criterion-batches.txt" || true
fi

if [ "$RUN_REPLICA" = 1 ]; then
	command -v rustc >/dev/null 2>&1 || seeds_die "rustc not found (needed to build false_sharing.rs)"
	REPLICA=$SEEDS_TARGET/seeds/false_sharing
	if [ ! -x "$REPLICA" ] || [ "$SEEDS_DIR/false_sharing.rs" -nt "$REPLICA" ]; then
		mkdir -p "$(dirname "$REPLICA")"
		rustc -O --edition 2021 -o "$REPLICA" "$SEEDS_DIR/false_sharing.rs" >"$W/rustc.log" 2>&1 || {
			cat "$W/rustc.log" >&2
			seeds_die "rustc could not build false_sharing.rs"
		}
	fi
	seeds_log "replica: $REPLICA, ${SECS}s per case, reader on CPU 0, writer on CPU 1"
	if ! "$REPLICA" "$SECS" 0 1 >"$W/replica.txt" 2>"$W/replica.err"; then
		cat "$W/replica.err" >&2
		seeds_log "the replica failed"
		FAILED=1
	fi
fi

crit() { jq -r "$2 // empty" "$W/crit-$1.json" 2>/dev/null; }
# rep CASE LAYOUT KEY
rep() {
	awk -v c="$1" -v l="$2" -v k="$3" '
	{ delete v; for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
	v["case"] == c && v["layout"] == l { print v[k]; exit }' "$W/replica.txt" 2>/dev/null
}
mega() { awk -v v="$1" 'BEGIN { if (v == "") print "-"; else printf "%.1f\n", v / 1e6 }'; }

print_table() {
	echo
	if [ "$RUN_CRITERION" = 1 ]; then
		echo "seeds 002/004 (criterion, benches/table.rs): lookups of 1024 flows per batch, second thread pinned to the other CPU"
		local fmt="%-55s %10s %14s %9s %9s\n" name med packed
		# shellcheck disable=SC2059
		printf "$fmt" bench "median ns" "95% CI" "M look/s" "x packed"
		packed=$(crit packed .median_ns)
		for name in split packed desired_table_llc_churn hit; do
			med=$(crit "$name" .median_ns)
			# shellcheck disable=SC2059
			printf "$fmt" "$(jq -r '.id // empty' "$W/crit-$name.json" 2>/dev/null || echo "$name")" \
				"$(seeds_fmt "$med" 0)" \
				"[$(seeds_fmt "$(crit "$name" .ci_lower_ns)" 0) $(seeds_fmt "$(crit "$name" .ci_upper_ns)" 0)]" \
				"$(mega "$(crit "$name" .lookups_per_s)")" "$(seeds_div "$packed" "$med" 2)"
		done
		echo "(lookup/hit: no second thread, the uncontended reference)"
	fi
	if [ "$RUN_REPLICA" = 1 ]; then
		echo
		echo "seeds 002/004 (false_sharing.rs replica, ${SECS}s per case): reader lookups and writer counter increments per second"
		local f2="%-8s %14s %14s %16s %16s\n" layout
		# shellcheck disable=SC2059
		printf "$f2" layout "M look/s both" "M incr/s both" "M look/s alone" "M incr/s alone"
		for layout in split packed; do
			# shellcheck disable=SC2059
			printf "$f2" "$layout" "$(mega "$(rep both "$layout" lookups_per_s)")" "$(mega "$(rep both "$layout" increments_per_s)")" \
				"$(mega "$(rep reader_alone "$layout" lookups_per_s)")" "$(mega "$(rep writer_alone "$layout" increments_per_s)")"
		done
		echo "split/packed under two threads: lookups $(seeds_div "$(rep both split lookups_per_s)" "$(rep both packed lookups_per_s)")x, increments $(seeds_div "$(rep both split increments_per_s)" "$(rep both packed increments_per_s)")x"
	fi
	if goal_met; then echo "goal: met (split beats packed under two threads$([ "$RUN_REPLICA" = 1 ] && echo ', reader and writer'))"; else echo "goal: NOT met (split must beat packed under two threads)"; fi
	echo
}

goal_met() {
	local ok=1
	if [ "$RUN_CRITERION" = 1 ]; then
		awk -v s="$(crit split .median_ns)" -v p="$(crit packed .median_ns)" 'BEGIN { exit !(s != "" && p != "" && s < p) }' || ok=0
	fi
	if [ "$RUN_REPLICA" = 1 ]; then
		awk -v sl="$(rep both split lookups_per_s)" -v pl="$(rep both packed lookups_per_s)" \
			-v si="$(rep both split increments_per_s)" -v pi="$(rep both packed increments_per_s)" \
			'BEGIN { exit !(sl != "" && pl != "" && si != "" && pi != "" && sl > pl && si > pi) }' || ok=0
	fi
	[ "$ok" = 1 ]
}

print_table

if [ -n "$JSON_OUT" ]; then
	shopt -s nullglob
	crits=("$W"/crit-*.json)
	replica_json=$(awk '{ printf "%s{", (NR > 1 ? "," : ""); for (i = 1; i <= NF; i++) { split($i, kv, "="); printf "%s\"%s\": %s", (i > 1 ? ", " : ""), kv[1], (kv[2] ~ /^[0-9.]+$/ ? kv[2] : "\"" kv[2] "\"") } printf "}" }' "$W/replica.txt" 2>/dev/null || true)
	jq -n --argjson host "$(seeds_host_json)" --slurpfile criterion <(cat "${crits[@]}" /dev/null) --argjson replica "[${replica_json}]" \
		--argjson quick "$QUICK" --argjson secs "$SECS" --argjson goal "$(goal_met && echo true || echo false)" \
		--arg batches "$(cat "$W/criterion-batches.txt" 2>/dev/null || true)" \
		'{tool: "benches/seeds/seed002-004-false-sharing.sh", format: 1, host: $host,
		  config: {quick: ($quick == 1), replica_seconds_per_case: $secs, reader_cpu: 0, writer_cpu: 1},
		  criterion: $criterion, criterion_batches: ($batches | split("\n") | map(select(. != ""))),
		  replica: $replica, goal_split_beats_packed: $goal}' >"$JSON_OUT"
	seeds_log "JSON in $JSON_OUT"
fi

[ "$FAILED" = 0 ] || exit 2
exit 0
