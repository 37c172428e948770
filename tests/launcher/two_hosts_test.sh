#!/usr/bin/env bash
# Two hosts of 2 workers each, simulated with network namespaces (scripts/netns_hosts.sh): the
# same distgrad-run command on each, node 0 hosting the Store at its namespace address; rank 0
# must reach all 4 workers. Every process runs inside a namespace this test makes, and the
# namespaces, the guard route and their files are removed on every exit. Exit 77 (skipped)
# without the privilege to create namespaces.
#   two_hosts_test.sh DISTGRAD_RUN LAUNCH_WORKER
set -euo pipefail
run=$1 worker=$2
hosts="$(cd "$(dirname "$0")/../.." && pwd)/scripts/netns_hosts.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: creating network namespaces needs root"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }
export SIM_PREFIX=dgrun- SIM_SUBNET=10.231.8
out=$(mktemp -d)
trap '"$hosts" down >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
"$hosts" up 2 >/dev/null 2>&1 || { echo "SKIP: cannot create network namespaces here"; exit 77; }
"$hosts" exec node1 true >/dev/null 2>&1 || { echo "SKIP: cannot enter the namespaces (nsenter/unshare refused)"; exit 77; }

token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
for node in 0 1; do
  timeout 90 "$hosts" exec "node$((node + 1))" env DISTGRAD_TOKEN="$token" "$run" --nnodes 2 --node-rank "$node" \
    --master-addr "$SIM_SUBNET.1" --master-port 29500 --nproc-per-node 2 --run-id two-hosts "$worker" rpc \
    >"$out/node$node.log" 2>&1 &
  eval "pid$node=$!"
done
status=0
wait "$pid0" || status=$?
wait "$pid1" || status=$?
for node in 0 1; do sed "s/^/node$node| /" "$out/node$node.log"; done
[ "$status" = 0 ] || { echo "FAIL: a launcher exited with $status"; exit 1; }
grep -q '^\[0\] all 4 workers answered$' "$out/node0.log" || { echo "FAIL: rank 0 did not reach all 4 workers"; exit 1; }
echo "two hosts x 2 workers: rank 0 reached all 4 workers through node 0's Store"
