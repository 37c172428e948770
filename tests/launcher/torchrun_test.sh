#!/usr/bin/env bash
# A distgrad program started by torchrun instead of distgrad-run (torchrun --no-python): the same
# variables, torchrun's own store at MASTER_PORT, distgrad's at MASTER_PORT + 1 (Note [Under
# torchrun] in rpc/agent.cc). Uses `torchrun` from PATH (or DISTGRAD_TORCHRUN); exit 77
# (skipped) without one.
#   torchrun_test.sh LAUNCH_WORKER
set -euo pipefail
worker=$1
torchrun=${DISTGRAD_TORCHRUN:-$(command -v torchrun || true)}
[ -n "$torchrun" ] && [ -x "$torchrun" ] || { echo "SKIP: no torchrun on PATH (scripts/install_peer.sh installs one)"; exit 77; }
output=$(timeout 120 "$torchrun" --standalone --nproc-per-node 2 --no-python "$worker" rpc 2>&1) || {
  echo "$output"; echo "FAIL: torchrun exited with $?"; exit 1; }
echo "$output"
grep -q '^all 2 workers answered$' <<<"$output" || { echo "FAIL: rank 0 did not reach both workers"; exit 1; }
echo "torchrun --no-python: rank 0 reached both workers through distgrad's Store at MASTER_PORT + 1"
