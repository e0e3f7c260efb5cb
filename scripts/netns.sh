# shellcheck shell=bash
# A network namespace and a 2-queue veth pair for steer's demo
# (scripts/demo.sh; the benchmarks build theirs in steer-bench). Source it,
# then:
#
#   name=$(netns_default_name)        # steer-<pid>, unique per shell
#   trap 'netns_down "$name"' EXIT
#   netns_up "$name"                  # root namespace side + namespace side
#   ... "$NETNS_HOST_IF" "$NETNS_HOST_V4" "$NETNS_NS_V4" ...
#   netns_down "$name"                # idempotent
#
# Layout (the same commands as steer-testbed's TestNet, crates/steer-testbed):
#   root namespace: <name>-h  NETNS_HOST_V4/24, NETNS_HOST_V6/64 (nodad), up
#   namespace <name>: <name>-p NETNS_NS_V4/24, NETNS_NS_V6/64 (nodad), up, lo up
#   2 rx and 2 tx queues on each side; permanent neighbour entries both ways
#   (v4 and v6), so AF_XDP echo replies never wait for ARP/ND (an XDP program
#   that redirects every frame would also swallow ARP).
# Like TestNet it sets neither GRO nor an XDP program on the peer: AF_XDP in
# copy mode transmits through the generic path (veth_xmit), which needs no
# NAPI on the receiving side. Only XDP_TX/XDP_REDIRECT *into* a veth needs the
# peer to have NAPI (an XDP program or `ethtool -K <peer> gro on`); set
# NETNS_PEER_GRO=on to get the latter.
#
# Addresses. The default is NOT 192.0.2.0/24: on these VMs eth0 is
# 192.0.2.2/24 with its default gateway at 192.0.2.1, so 192.0.2.1 on a veth
# would take the gateway's address and 192.0.2.2 in the namespace would be
# unreachable from the root namespace (it is a local address there). The
# defaults come from the benchmarking range 198.18.0.0/15, a /24 per run
# picked from the PID and skipped while in use:
#   NETNS_V4_NET=198.19.<slot>   host .1, namespace .2
#   NETNS_V6_NET=2001:db8:5:<slot>   host ::1, namespace ::2
# Set NETNS_V4_NET / NETNS_V6_NET (without the last part) to choose; netns_up
# refuses a /24 or /64 that already has an address or a route in the root
# namespace.
#
# After netns_up these are set: NETNS_NAME NETNS_HOST_IF NETNS_NS_IF
# NETNS_HOST_V4 NETNS_NS_V4 NETNS_HOST_V6 NETNS_NS_V6 NETNS_HOST_MAC
# NETNS_NS_MAC.

# A unique namespace name for this shell: steer-<pid> (<= 13 characters, so
# the interface names <name>-h / <name>-p stay within IFNAMSIZ-1 = 15).
netns_default_name() {
	echo "steer-$$"
}

netns_host_if() { echo "$1-h"; }
netns_ns_if() { echo "$1-p"; }

_netns_log() { echo "netns: $*" >&2; }

_netns_exists() {
	ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF -- "$1"
}

_netns_must() {
	local out
	if ! out=$("$@" 2>&1); then
		_netns_log "failed: $* :: $out"
		return 1
	fi
}

# True if the prefix already has an address or a (non-default) route in the
# root namespace.
_netns_v4_in_use() {
	local net=$1
	[ -n "$(ip -4 -o addr show to "$net.0/24" 2>/dev/null)" ] && return 0
	[ -n "$(ip -4 route show root "$net.0/24" 2>/dev/null)" ] && return 0
	ip -4 route show match "$net.2" 2>/dev/null | grep -v '^default' | grep -q . && return 0
	return 1
}

_netns_v6_in_use() {
	local net=$1
	[ -n "$(ip -6 -o addr show to "$net:/64" 2>/dev/null)" ] && return 0
	[ -n "$(ip -6 route show root "$net:/64" 2>/dev/null)" ] && return 0
	ip -6 route show match "$net::2" 2>/dev/null | grep -v '^default' | grep -q . && return 0
	return 1
}

# netns_up <name>: builds the namespace and the veth pair; on failure removes
# what it made and returns non-zero.
netns_up() {
	local name=${1:?netns_up: namespace name}
	if [ ${#name} -gt 13 ]; then
		_netns_log "name '$name' is longer than 13 characters (interface names <name>-h must fit 15)"
		return 1
	fi
	local host ns_if
	host=$(netns_host_if "$name")
	ns_if=$(netns_ns_if "$name")

	# Leftovers of a crashed earlier run with the same names.
	netns_down "$name"

	local v4 v6 slot i
	if [ -n "${NETNS_V4_NET:-}" ]; then
		v4=$NETNS_V4_NET
		if _netns_v4_in_use "$v4"; then
			_netns_log "$v4.0/24 is already in use in the root namespace (ip -4 addr / ip route): choose another NETNS_V4_NET"
			return 1
		fi
	else
		slot=$(($$ % 250))
		for ((i = 0; i < 250; i++)); do
			v4="198.19.$(((slot + i) % 250))"
			_netns_v4_in_use "$v4" || break
			v4=
		done
		if [ -z "$v4" ]; then
			_netns_log "no free /24 in 198.19.0.0/16"
			return 1
		fi
	fi
	if [ -n "${NETNS_V6_NET:-}" ]; then
		v6=$NETNS_V6_NET
	else
		v6="2001:db8:5:$(printf '%x' "${v4##*.}")"
	fi
	if _netns_v6_in_use "$v6"; then
		_netns_log "$v6:/64 is already in use in the root namespace: choose another NETNS_V6_NET"
		return 1
	fi

	# Results for the caller (this file is sourced).
	# shellcheck disable=SC2034
	NETNS_NAME=$name
	# shellcheck disable=SC2034
	NETNS_HOST_IF=$host
	# shellcheck disable=SC2034
	NETNS_NS_IF=$ns_if
	NETNS_HOST_V4=$v4.1
	NETNS_NS_V4=$v4.2
	NETNS_HOST_V6=$v6::1
	NETNS_NS_V6=$v6::2

	if ! {
		_netns_must ip netns add "$name" &&
			_netns_must ip link add "$host" numrxqueues 2 numtxqueues 2 type veth \
				peer name "$ns_if" numrxqueues 2 numtxqueues 2 netns "$name" &&
			_netns_must ip addr add "$NETNS_HOST_V4/24" dev "$host" &&
			_netns_must ip -6 addr add "$NETNS_HOST_V6/64" dev "$host" nodad &&
			_netns_must ip link set "$host" up &&
			_netns_must ip -n "$name" addr add "$NETNS_NS_V4/24" dev "$ns_if" &&
			_netns_must ip -n "$name" -6 addr add "$NETNS_NS_V6/64" dev "$ns_if" nodad &&
			_netns_must ip -n "$name" link set "$ns_if" up &&
			_netns_must ip -n "$name" link set lo up
	}; then
		netns_down "$name"
		return 1
	fi

	NETNS_HOST_MAC=$(cat "/sys/class/net/$host/address")
	# `ip netns exec` remounts /sys for the namespace.
	NETNS_NS_MAC=$(ip netns exec "$name" cat "/sys/class/net/$ns_if/address")
	if [ -z "$NETNS_HOST_MAC" ] || [ -z "$NETNS_NS_MAC" ]; then
		_netns_log "could not read the MAC addresses of $host / $ns_if"
		netns_down "$name"
		return 1
	fi
	if ! {
		_netns_must ip -n "$name" neigh replace "$NETNS_HOST_V4" lladdr "$NETNS_HOST_MAC" nud permanent dev "$ns_if" &&
			_netns_must ip -n "$name" neigh replace "$NETNS_HOST_V6" lladdr "$NETNS_HOST_MAC" nud permanent dev "$ns_if" &&
			_netns_must ip neigh replace "$NETNS_NS_V4" lladdr "$NETNS_NS_MAC" nud permanent dev "$host" &&
			_netns_must ip neigh replace "$NETNS_NS_V6" lladdr "$NETNS_NS_MAC" nud permanent dev "$host"
	}; then
		netns_down "$name"
		return 1
	fi
	if [ "${NETNS_PEER_GRO:-off}" = on ]; then
		if ! _netns_must ip netns exec "$name" ethtool -K "$ns_if" gro on; then
			netns_down "$name"
			return 1
		fi
	fi

	# The namespace's address must be reached through our veth, not through
	# some other interface holding an overlapping prefix.
	local via
	via=$(ip -4 -o route get "$NETNS_NS_V4" 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p')
	if [ "$via" != "$host" ]; then
		_netns_log "$NETNS_NS_V4 is routed via '${via:-nothing}', not $host: address conflict"
		netns_down "$name"
		return 1
	fi
	return 0
}

# netns_down <name>: removes the veth pair and the namespace, ending any
# process still running inside that namespace (which this library's users
# started there). Idempotent and silent when nothing is left.
netns_down() {
	local name=${1:?netns_down: namespace name}
	local host pid
	host=$(netns_host_if "$name")
	if _netns_exists "$name"; then
		for pid in $(ip netns pids "$name" 2>/dev/null); do
			kill -TERM "$pid" 2>/dev/null || true
		done
	fi
	if ip link show dev "$host" >/dev/null 2>&1; then
		ip link del dev "$host" 2>/dev/null || true
	fi
	if _netns_exists "$name"; then
		ip netns del "$name" 2>/dev/null || true
	fi
	# Deleting a namespace is asynchronous for its devices: wait a little for
	# the host end to go, so callers can check `ip link` right away.
	local i
	for ((i = 0; i < 50; i++)); do
		ip link show dev "$host" >/dev/null 2>&1 || break
		sleep 0.1
	done
	return 0
}
