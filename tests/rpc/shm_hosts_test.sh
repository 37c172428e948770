#!/usr/bin/env bash
# The fast paths across simulated hosts (scripts/netns_hosts.sh): two network-namespace hosts of 2
# workers each, started by the same distgrad-run command on each. Rank 0 must reach its neighbour
# on its own host through shared memory and the Unix socket, and the two workers of the other host
# over TCP sockets (small calls) and gRPC (the host identity includes the network namespace;
# tests/rpc/shm_test_worker.cc "hosts"). Every process runs inside a namespace this test makes, and the namespaces are removed
# on every exit. Exit 77 (skipped) without the privilege to create namespaces.
#   shm_hosts_test.sh DISTGRAD_RUN SHM_TEST_WORKER
set -euo pipefail
run=$1 worker=$2
hosts="$(cd "$(dirname "$0")/../.." && pwd)/scripts/netns_hosts.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: creating network namespaces needs root"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }
export SIM_PREFIX=dgshm- SIM_SUBNET=10.231.9
out=$(mktemp -d)
trap '"$hosts" down >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
"$hosts" up 2 >/dev/null 2>&1 || { echo "SKIP: cannot create network namespaces here"; exit 77; }
"$hosts" exec node1 true >/dev/null 2>&1 || { echo "SKIP: cannot enter the namespaces (nsenter/unshare refused)"; exit 77; }

token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
status=0
for node in 0 1; do
  timeout 90 "$hosts" exec "node$((node + 1))" env DISTGRAD_TOKEN="$token" "$run" --nnodes 2 --node-rank "$node" \
    --master-addr "$SIM_SUBNET.1" --master-port 29500 --nproc-per-node 2 --run-id shm-hosts "$worker" hosts \
    >"$out/node$node.log" 2>&1 &
  eval "pid$node=$!"
done
wait "$pid0" || status=$?
wait "$pid1" || status=$?
for node in 0 1; do sed "s/^/node$node| /" "$out/node$node.log"; done
[ "$status" = 0 ] || { echo "FAIL: a launcher exited with $status"; exit 1; }
grep -q 'same-host peers used shared memory and the Unix socket, the others TCP and gRPC' "$out/node0.log" \
  || { echo "FAIL: rank 0 did not finish its checks"; exit 1; }
echo "rank 0 reached worker1 through shared memory and the Unix socket, workers 2 and 3 over TCP and gRPC"
