#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Medians over several --json outputs of one seed script, as Markdown tables
# (the tables of benches/seeds/README.md were made with it).
#
# Usage:
#   benches/seeds/medians.sh FILE.json FILE.json ...
#
# Every FILE must come from the same script (its "tool" field). Each cell is
# the median over the files of that number (for an even count, the mean of
# the two middle values); ratios and reductions are computed per run first,
# then their median is taken. Needs jq.

set -euo pipefail

die() {
	echo "medians: $*" >&2
	exit 1
}
[ $# -ge 1 ] || die "usage: $0 FILE.json ... (outputs of one seed script's --json)"
command -v jq >/dev/null || die "jq not found"
for f in "$@"; do
	[ -r "$f" ] || die "$f: not readable"
	jq -e . "$f" >/dev/null 2>&1 || die "$f: not JSON"
done
tool=$(jq -r .tool "$1")
for f in "$@"; do
	[ "$(jq -r .tool "$f")" = "$tool" ] || die "$f comes from $(jq -r .tool "$f"), not $tool"
done

JQ_LIB='
def median: map(select(. != null)) | sort |
  if length == 0 then null
  elif length % 2 == 1 then .[(length - 1) / 2]
  else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def r(d): if . == null then "-" else (. * pow(10; d) | round) / pow(10; d) | tostring end;
def row: "| " + join(" | ") + " |";
'

echo "medians of $# runs of $tool"
echo
case $tool in
*seed000*)
	jq -rs "$JQ_LIB"'
	(["topology", "policy", "dgram/s", "hook calls/s", "hook calls (run)", "desired upd/s", "suppressed/s",
	  "cross_llc", "other-flow", "collision writes", "CPU s/s", "CPU ms/1k dgram"] | row),
	([range(12)] | map("---") | row),
	( [.[].runs[]] | group_by([.topology, .policy]) | sort_by(.[0].topology != "real", .[0].policy)[] as $g |
	  [$g[0].topology, $g[0].policy,
	   ($g | map(.window.rx_per_s) | median | r(0)),
	   ($g | map(.window.hook_calls_per_s) | median | r(1)),
	   ($g | map(.run.steering_updates) | median | r(0)),
	   ($g | map(.run.desired_updates_per_s) | median | r(1)),
	   ($g | map(.run.suppressed_per_s) | median | r(0)),
	   ($g | map(.run.by_reason.cross_llc) | median | r(0)),
	   ($g | map(.run.by_reason.new_or_other_flow) | median | r(0)),
	   ($g | map(.run.collision_writes) | median | r(0)),
	   ($g | map(.window.cpu_s_per_s) | median | r(2)),
	   ($g | map(.window.cpu_ms_per_1k) | median | r(2))] | row ),
	"",
	"llc vs always, % fewer hook calls/s (per run): real \(map(.reduction_pct.real | r(1)) | join(", ")) (median \(map(.reduction_pct.real) | median | r(1))); override \(map(.reduction_pct.override | r(1)) | join(", ")) (median \(map(.reduction_pct.override) | median | r(1)))",
	"goal met in: real \(map(select(.goal.real_95pct_fewer)) | length)/\(length) runs, override (cross-LLC followed) \(map(select(.goal.override_cross_llc_followed)) | length)/\(length) runs",
	"load average (1/5/15 min) at the end of each run: \(map(.host.loadavg_1_5_15) | join("; "))"' "$@"
	;;
*seed001*)
	jq -rs "$JQ_LIB"'
	(["layout", "placement", "rx CPU", "sent/s", "rx/s", "fwd/s", "reply/s", "recv/s", "fwd %", "recv %",
	  "xsk drops", "app drops", "proxy CPU s/s"] | row),
	([range(13)] | map("---") | row),
	( [.[].runs[]] | group_by([.layout, .placement]) |
	  sort_by(.[0].layout != "per-core", ({same: 0, unpinned: 1, other: 2}[.[0].placement]))[] as $g |
	  [$g[0].layout, $g[0].placement, ($g | map(.rx_cpu | tostring) | unique | join("/")),
	   ($g | map(.sent_per_s) | median | r(0)), ($g | map(.rx_per_s) | median | r(0)),
	   ($g | map(.forwarded_per_s) | median | r(0)), ($g | map(.replied_per_s) | median | r(0)),
	   ($g | map(.received_per_s) | median | r(0)), ($g | map(.forwarded_pct) | median | r(1)),
	   ($g | map(.received_pct) | median | r(1)), ($g | map(.xsk_drops) | median | r(0)),
	   ($g | map(.steer_drops) | median | r(0)), ($g | map(.proxy_cpu_s_per_s) | median | r(2))] | row ),
	"",
	( . as $all | [.[].runs[].layout] | unique[] as $l |
	  "\($l): forwarded/s against same (per run, then median): unpinned \([$all[] as $f | ($f.runs | map(select(.layout == $l)) | INDEX(.placement)) | if .same and .unpinned then .unpinned.forwarded_per_s / .same.forwarded_per_s else null end] | median | r(2))x, other \([$all[] as $f | ($f.runs | map(select(.layout == $l)) | INDEX(.placement)) | if .same and .other then .other.forwarded_per_s / .same.forwarded_per_s else null end] | median | r(2))x"),
	"load average (1/5/15 min) at the end of each run: \(map(.host.loadavg_1_5_15) | join("; "))"' "$@"
	;;
*seed002-004*)
	jq -rn --slurpfile all <(cat "$@") "$JQ_LIB"'$all | '"$(
		cat <<'JQ'
	(["criterion bench", "median ns / 1024 lookups", "M lookups/s", "x packed"] | row),
	([range(4)] | map("---") | row),
	( [.[].criterion[]] | group_by(.id) | sort_by({"steer/flow_table/false_sharing/split": 0, "steer/flow_table/false_sharing/packed": 1, "steer/flow_table/false_sharing/desired_table_llc_churn": 2}[.[0].id] // 3)[] as $g |
	  [$g[0].id, ($g | map(.median_ns) | median | r(0)), ($g | map(.lookups_per_s / 1e6) | median | r(1)),
	   ([$all[] | (.criterion | INDEX(.id)) as $c | if $c[$g[0].id] and $c["steer/flow_table/false_sharing/packed"] then $c["steer/flow_table/false_sharing/packed"].median_ns / $c[$g[0].id].median_ns else null end] | median | r(2))] | row ),
	"",
	(["replica layout", "M lookups/s (both)", "M increments/s (both)", "M lookups/s (reader alone)", "M increments/s (writer alone)"] | row),
	([range(5)] | map("---") | row),
	( ["split", "packed"][] as $l |
	  [$l, ([$all[] | .replica[] | select(.case == "both" and .layout == $l) | .lookups_per_s / 1e6] | median | r(1)),
	   ([$all[] | .replica[] | select(.case == "both" and .layout == $l) | .increments_per_s / 1e6] | median | r(1)),
	   ([$all[] | .replica[] | select(.case == "reader_alone" and .layout == $l) | .lookups_per_s / 1e6] | median | r(1)),
	   ([$all[] | .replica[] | select(.case == "writer_alone" and .layout == $l) | .increments_per_s / 1e6] | median | r(1))] | row ),
	"",
	"replica split/packed under two threads (per run, then median): lookups \([$all[] | (.replica | map(select(.case == "both")) | INDEX(.layout)) | if .split and .packed then .split.lookups_per_s / .packed.lookups_per_s else null end] | median | r(2))x, increments \([$all[] | (.replica | map(select(.case == "both")) | INDEX(.layout)) | if .split and .packed then .split.increments_per_s / .packed.increments_per_s else null end] | median | r(2))x",
	"goal (split beats packed) met in \(map(select(.goal_split_beats_packed)) | length)/\(length) runs",
	"load average (1/5/15 min) at the end of each run: \(map(.host.loadavg_1_5_15) | join("; "))"
JQ
	)"
	;;
*seed003*)
	jq -rn --slurpfile all <(cat "$@") "$JQ_LIB"'$all | '"$(
		cat <<'JQ'
	(["layout", "fast path", "ring enqueues/packet", "fast-path share %", "replies/s", "echo CPU us/packet", "drops"] | row),
	([range(7)] | map("---") | row),
	( [.[].end_to_end[]] | group_by([.layout, .fast_path]) | sort_by(.[0].layout, .[0].fast_path != "on")[] as $g |
	  [$g[0].layout, $g[0].fast_path, ($g | map(.ring_enqueues_per_packet) | median | r(3)),
	   ($g | map(.fast_path_share * 100) | median | r(1)), ($g | map(.replies_per_s) | median | r(0)),
	   ($g | map(.echo_cpu_us_per_packet) | median | r(2)), ($g | map(.drops) | median | r(0))] | row ),
	"",
	(["criterion bench", "ns/packet", "ring enqueues/packet", "Mpackets/s"] | row),
	([range(4)] | map("---") | row),
	( [.[].criterion[]] | group_by(.fast_path) | sort_by(.[0].fast_path != "on")[] as $g |
	  ["steer/dispatch/fast_path/\($g[0].fast_path)", ($g | map(.ns_per_packet) | median | r(2)),
	   ($g | map(.ring_enqueues_per_packet) | median | r(3)), ($g | map(1e3 / .ns_per_packet) | median | r(1))] | row ),
	"",
	( [.[].end_to_end[].layout] | unique[] as $l |
	  "\($l): replies/s on/off (per run, then median): \([$all[] | (.end_to_end | map(select(.layout == $l)) | INDEX(.fast_path)) | if .on and .off then .on.replies_per_s / .off.replies_per_s else null end] | median | r(2))x; CPU us/packet on/off: \([$all[] | (.end_to_end | map(select(.layout == $l)) | INDEX(.fast_path)) | if .on and .off then .on.echo_cpu_us_per_packet / .off.echo_cpu_us_per_packet else null end] | median | r(2))x"),
	"criterion off/on ns per packet (per run, then median): \([$all[] | (.criterion | INDEX(.fast_path)) | if .on and .off then .off.ns_per_packet / .on.ns_per_packet else null end] | median | r(2))x",
	"goal (>= 50% fewer ring enqueues per packet) met in \(map(select(.goal_50pct_fewer_enqueues)) | length)/\(length) runs",
	"load average (1/5/15 min) at the end of each run: \(map(.host.loadavg_1_5_15) | join("; "))"
JQ
	)"
	;;
*) die "unknown tool '$tool'" ;;
esac
