#!/usr/bin/env bash
# Two hosts of 2 workers each, simulated with network namespaces (scripts/netns_hosts.sh): the
# same distgrad-run command on each, node 0 hosting the Store at its namespace address; rank 0
# must reach all 4 workers, and a worker failing on node 1 must restart both nodes' workers. Every process runs inside a namespace this test makes, and the
# namespaces, the guard route and their files are removed on every exit. Exit 77 (skipped)
# without the privilege to create namespaces.
#   two_hosts_test.sh DISTGRAD_RUN LAUNCH_WORKER
set -euo pipefail
run=$1 worker=$2
export SIM_PREFIX=dgrun- SIM_SUBNET=10.231.8
# shellcheck source=../two_netns_hosts.sh
source "$(dirname "$0")/../two_netns_hosts.sh"
# Runs the same distgrad-run command on both hosts (extra flags, then the worker's mode); prints
# both logs; fails unless both launchers exit 0 and rank 0 reached all 4 workers.
run_job() {
  local name=$1 mode=$2; shift 2
  run_on_both_hosts "$name" "$run" "$@" "$worker" "$mode"
  grep -q '^\[0\] all 4 workers answered$' "$out/$name.node0.log" \
    || { echo "FAIL: $name: rank 0 did not reach all 4 workers"; exit 1; }
}

run_job two-hosts rpc
echo "two hosts x 2 workers: rank 0 reached all 4 workers through node 0's Store"

# Rank 3 (on node 1) fails in the first attempt: both nodes restart their workers together.
run_job restart rpc_fail_first --max-restarts 1
for node in 0 1; do
  grep -q 'rank 3 (pid [0-9]*) exited with code 5: failing on purpose in the first attempt; restarting the workers (restart 1 of 1)' \
    "$out/restart.node$node.log" || { echo "FAIL: node $node did not restart after rank 3 failed"; exit 1; }
done
echo "a failure on node 1 restarted the workers of both nodes, which then finished"
