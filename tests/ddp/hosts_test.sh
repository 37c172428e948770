#!/usr/bin/env bash
# Process groups across simulated hosts (scripts/netns_hosts.sh): two network-namespace hosts of 2
# ranks each, started by the same distgrad-run command on each. The groups within a host must
# choose shared memory and the groups that span hosts Gloo, by the host identity alone (it
# includes the network namespace; tests/ddp/ddp_worker.cc "hosts"). Every process runs inside a
# namespace this test makes, and the namespaces are removed on every exit. Exit 77 (skipped)
# without the privilege to create namespaces.
#   hosts_test.sh DISTGRAD_RUN DDP_WORKER
set -euo pipefail
run=$1 worker=$2
export SIM_PREFIX=dgddp- SIM_SUBNET=10.231.11
# shellcheck source=../two_netns_hosts.sh
source "$(dirname "$0")/../two_netns_hosts.sh"
run_on_both_hosts ddp-hosts "$run" "$worker" hosts
grep -q 'the groups within a host on shm' "$out/ddp-hosts.node0.log" || { echo "FAIL: rank 0 did not finish its checks"; exit 1; }
echo "groups within a host ran on shared memory, groups across hosts on Gloo"
