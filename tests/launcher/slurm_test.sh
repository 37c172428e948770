#!/usr/bin/env bash
# A real single-node Slurm cluster (scripts/slurm_local.sh, which installs Slurm and munge when
# missing): srun starting 4 workers directly (they rendezvous from Slurm's variables), and srun
# starting one distgrad-run per node. Stops everything it started on every exit; exit 77
# (skipped) where Slurm cannot start.
#   slurm_test.sh DISTGRAD_RUN LAUNCH_WORKER
set -euo pipefail
run=$1 worker=$2
slurm="$(cd "$(dirname "$0")/../.." && pwd)/scripts/slurm_local.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: a local Slurm cluster needs root"; exit 77; }
export SLURM_LOCAL_DIR=/var/tmp/distgrad_slurm_test
trap '"$slurm" stop >/dev/null 2>&1 || true' EXIT
if ! started=$("$slurm" start --cpus 8 2>&1); then
  echo "$started"
  echo "SKIP: Slurm could not start here"
  exit 77
fi

# Runs CMD... through srun where the controller is; prints its output; fails unless it exits 0
# and prints the line EXPECTED.
expect_run() {
  local expected=$1 output; shift
  output=$(timeout 120 "$slurm" run "$@" 2>&1) || { echo "$output"; echo "FAIL: $* exited with $?"; exit 1; }
  echo "$output"
  grep -qxF "$expected" <<<"$output" || { echo "FAIL: $* did not print: $expected"; exit 1; }
}

expect_run "all 4 workers answered" srun -n 4 "$worker" rpc
echo "srun -n 4: the workers rendezvoused from Slurm's variables"
expect_run "[0] all 2 workers answered" srun -N 1 -n 1 "$run" --nproc-per-node 2 "$worker" rpc
echo "srun -N 1 -n 1 distgrad-run --nproc-per-node 2: the launcher's workers rendezvoused"
