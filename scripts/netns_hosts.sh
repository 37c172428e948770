#!/usr/bin/env bash
# netns_hosts.sh — simulate N hosts on one Linux machine with network namespaces (the project's copy
# of ../shared/tools/netns_hosts.sh; defaults: prefix "dgsim-", subnet 10.231.7).
#
# Layout (everything lives in namespaces this script creates; the root namespace only
# gets one "unreachable" guard route so that a stray client in the root namespace
# fails locally instead of sending 10.231.7.x traffic out of the real NIC):
#
#   dgsim-sw   : "switch" namespace, bridge br0 = 10.231.7.254/24  (hostname "login")
#   dgsim-nodeI: host I, eth0 = 10.231.7.I/24, hostname "nodeI", /etc/hosts lists all hosts
#
# Usage (root):
#   netns_hosts.sh up N            create N hosts (1..200); idempotent (same N -> no-op)
#   netns_hosts.sh down            kill processes inside, delete namespaces, guard route, /etc/netns files
#   netns_hosts.sh status          list hosts and addresses
#   netns_hosts.sh exec HOST CMD…  run CMD in HOST (node3 or login) with its hostname set
#   netns_hosts.sh fault HOST loss PCT      drop PCT% of packets arriving at HOST (nftables)
#   netns_hosts.sh fault HOST rate RATE     shape HOST egress, e.g. 100mbit (tc tbf)
#   netns_hosts.sh fault HOST delay MS      add MS ms egress delay (needs sch_netem in the kernel;
#                                            NOT available on the Firecracker kernel seen here)
#   netns_hosts.sh fault HOST partition     cut HOST off (link down);  ... fault HOST heal  undoes all faults
#
# Env: SIM_PREFIX (namespace prefix, default "dgsim-"), SIM_SUBNET (first three octets, default 10.231.7)
set -euo pipefail

P=${SIM_PREFIX:-dgsim-}
NET=${SIM_SUBNET:-10.231.7}
SW=${P}sw
STATE=/run/${P}netns_hosts.n

die() { echo "netns_hosts: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
command -v ip >/dev/null || die "iproute2 (ip) missing: apt-get install -y iproute2"

ns_of() {  # host name -> namespace name
  case "$1" in
    login|sw) echo "$SW" ;;
    node[0-9]*) echo "${P}$1" ;;
    *) die "unknown host '$1' (use nodeI or login)" ;;
  esac
}
exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

down() {
  local n
  for n in $(ip netns list | awk '{print $1}' | grep -E "^${P}(sw|node[0-9]+)$" || true); do
    # end whatever still runs in the namespace (processes we started there), by PID
    local pids; pids=$(ip netns pids "$n" 2>/dev/null || true)
    if [ -n "$pids" ]; then kill $pids 2>/dev/null || true; sleep 0.5
      pids=$(ip netns pids "$n" 2>/dev/null || true); [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true; fi
    ip netns del "$n" 2>/dev/null || true          # veth pairs die with their namespace
    rm -rf "/etc/netns/$n"
  done
  ip route del unreachable "${NET}.0/24" 2>/dev/null || true
  # `ip netns add` made /run/netns a mount point on first use: undo it when no namespace is left
  if mountpoint -q /run/netns 2>/dev/null && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
    umount /run/netns 2>/dev/null || true
  fi
  rmdir "/run/${P}cg" 2>/dev/null || true
  rmdir /etc/netns 2>/dev/null || true            # only if empty
  rm -f "$STATE"
}

up() {
  local N=${1:-}; [[ "$N" =~ ^[0-9]+$ ]] && [ "$N" -ge 1 ] && [ "$N" -le 200 ] || die "usage: up N (1..200)"
  if [ -f "$STATE" ] && [ "$(cat "$STATE")" = "$N" ] && exists "$SW"; then
    local ok=1 i; for i in $(seq 1 "$N"); do exists "${P}node$i" || ok=0; done
    [ $ok = 1 ] && { echo "netns_hosts: $N hosts already up"; return 0; }
  fi
  down
  # guard: the root namespace must never route the simulated subnet out of eth0
  ip route replace unreachable "${NET}.0/24"
  mkdir -p "/run/${P}cg"                         # mount point used by `exec`
  ip netns add "$SW"
  ip -n "$SW" link set lo up
  ip -n "$SW" link add br0 type bridge
  ip -n "$SW" addr add "${NET}.254/24" dev br0
  ip -n "$SW" link set br0 up
  local hosts="127.0.0.1 localhost
${NET}.254 login"
  local i; for i in $(seq 1 "$N"); do hosts+=$'\n'"${NET}.$i node$i"; done
  for i in $(seq 1 "$N"); do
    local ns="${P}node$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # create the pair directly inside the two namespaces (names only need to be unique per namespace)
    ip link add eth0 netns "$ns" type veth peer name "node$i" netns "$SW"
    ip -n "$ns" addr add "${NET}.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$SW" link set "node$i" master br0
    ip -n "$SW" link set "node$i" up
    mkdir -p "/etc/netns/$ns"; printf '%s\n' "$hosts" > "/etc/netns/$ns/hosts"
  done
  mkdir -p "/etc/netns/$SW"; printf '%s\n' "$hosts" > "/etc/netns/$SW/hosts"
  echo "$N" > "$STATE"
  echo "netns_hosts: up $N hosts (${NET}.1-${NET}.$N), login/switch at ${NET}.254"
}

status() {
  [ -f "$STATE" ] || { echo "netns_hosts: down"; return 0; }
  echo "hosts: $(cat "$STATE")"
  local n; for n in $(ip netns list | awk '{print $1}' | grep -E "^${P}(sw|node[0-9]+)$" | sort -V); do
    printf '%-14s %s  pids:%s\n' "$n" "$(ip -n "$n" -4 -br addr | awk '$1!="lo"{print $3}' | tr '\n' ' ')" "$(ip netns pids "$n" | wc -l)"
  done
}

hexec() {
  local h=$1; shift; local ns; ns=$(ns_of "$h"); exists "$ns" || die "$h is not up"
  [ "$h" = sw ] && h=login
  # Like `ip netns exec`, but: own UTS namespace (hostname = nodeI), /etc/hosts from /etc/netns/NS,
  # and a fresh sysfs for this netns WITH the cgroup mounts kept (plain `ip netns exec` hides
  # /sys/fs/cgroup, and slurmd then fails: "No filesystem mounted on /sys/fs/cgroup").
  exec nsenter --net="/run/netns/$ns" unshare --mount --uts /bin/sh -c '
    set -e; ns=$1; h=$2; shift 2
    mount --bind "/etc/netns/$ns/hosts" /etc/hosts
    hostname "$h"
    if [ -d /sys/fs/cgroup ] && mountpoint -q /sys/fs/cgroup; then
      mount --rbind /sys/fs/cgroup "/run/'"${P}"'cg"; mount -t sysfs sysfs /sys
      mount --move "/run/'"${P}"'cg" /sys/fs/cgroup
    else mount -t sysfs sysfs /sys; fi
    exec "$@"' sh "$ns" "$h" "$@"
}

fault() {
  local h=$1 kind=$2 arg=${3:-}; local ns; ns=$(ns_of "$h"); exists "$ns" || die "$h is not up"
  local dev=eth0; [ "$ns" = "$SW" ] && dev=br0
  case "$kind" in
    loss)
      command -v nft >/dev/null || die "nft missing: apt-get install -y nftables"
      ip netns exec "$ns" nft delete table inet simfault 2>/dev/null || true
      ip netns exec "$ns" nft add table inet simfault
      ip netns exec "$ns" nft add chain inet simfault in '{ type filter hook input priority 0; policy accept; }'
      ip netns exec "$ns" nft add rule inet simfault in iifname "$dev" numgen random mod 100 '<' "$arg" drop ;;
    rate)
      ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$arg" burst 64kb latency 50ms ;;
    delay)
      ip netns exec "$ns" tc qdisc replace dev "$dev" root netem delay "${arg}ms" \
        || die "netem not available in this kernel (CONFIG_NET_SCH_NETEM); inject delay in user space instead" ;;
    partition)
      ip -n "$ns" link set "$dev" down ;;
    heal)
      ip netns exec "$ns" nft delete table inet simfault 2>/dev/null || true
      ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
      ip -n "$ns" link set "$dev" up
      ;;
    *) die "fault kinds: loss PCT | rate RATE | delay MS | partition | heal" ;;
  esac
}

cmd=${1:-}; shift || true
case "$cmd" in
  up) up "$@" ;;
  down|stop) down; echo "netns_hosts: down" ;;
  status) status ;;
  exec) [ $# -ge 2 ] || die "usage: exec HOST CMD..."; hexec "$@" ;;
  fault) [ $# -ge 2 ] || die "usage: fault HOST KIND [ARG]"; fault "$@" ;;
  *) sed -n '2,25p' "$0"; exit 2 ;;
esac
