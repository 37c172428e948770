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
export SIM_PREFIX=dgshm- SIM_SUBNET=10.231.9
# shellcheck source=../two_netns_hosts.sh
source "$(dirname "$0")/../two_netns_hosts.sh"
run_on_both_hosts shm-hosts "$run" "$worker" hosts
grep -q 'same-host peers used shared memory and the Unix socket, the others TCP and gRPC' "$out/shm-hosts.node0.log" \
  || { echo "FAIL: rank 0 did not finish its checks"; exit 1; }
echo "rank 0 reached worker1 through shared memory and the Unix socket, workers 2 and 3 over TCP and gRPC"
