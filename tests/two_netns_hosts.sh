# Sourced by the tests that run workers on two simulated hosts (scripts/netns_hosts.sh): with
# SIM_PREFIX and SIM_SUBNET exported first, it skips (exit 77) without the privilege to create
# network namespaces, brings up hosts node1 and node2, removes them (and the folder $out) on every
# exit, and sets $hosts (the script), $out (a fresh folder) and $token (a random job token).
hosts="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/scripts/netns_hosts.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: creating network namespaces needs root"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }
out=$(mktemp -d)
trap '"$hosts" down >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
"$hosts" up 2 >/dev/null 2>&1 || { echo "SKIP: cannot create network namespaces here"; exit 77; }
"$hosts" exec node1 true >/dev/null 2>&1 || { echo "SKIP: cannot enter the namespaces (nsenter/unshare refused)"; exit 77; }
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
