#!/usr/bin/env bash
# A real single-node Slurm cluster (scripts/slurm_local.sh, which installs Slurm and munge when
# missing): srun starting 4 workers directly (they rendezvous from Slurm's variables), srun
# starting one distgrad-run per node, and preemption (rendezvous/preemption.h): a job and an
# array task given SIGUSR1 save their step, requeue themselves, and resume from it. Stops
# everything it started on every exit; exit 77 (skipped) where Slurm cannot start.
#   slurm_test.sh DISTGRAD_RUN LAUNCH_WORKER
set -euo pipefail
run=$1 worker=$2
slurm="$(cd "$(dirname "$0")/../.." && pwd)/scripts/slurm_local.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: a local Slurm cluster needs root"; exit 77; }
export SLURM_LOCAL_DIR=/var/tmp/distgrad_slurm_test
scratch=$(mktemp -d /var/tmp/distgrad_slurm_test_jobs.XXXXXX)
trap '"$slurm" stop >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
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

# preempt NAME SBATCH_OPTIONS...: a 2-task job running `srun launch_worker preemptible` under
# sbatch --requeue; once both tasks watch, SIGUSR1 to its steps (as Slurm's --signal sends before a
# preemption); rank 0 then requeues it, the requeued job (released from its BeginTime hold) runs
# again, and each task resumes from the step it saved. The job must end COMPLETED after 1 restart.
preempt() {
  local name=$1 dir="$scratch/$1" job state; shift
  mkdir -p "$dir"
  job=$("$slurm" run sbatch --parsable --requeue --open-mode=append -o "$dir/out" -n 2 "$@" \
    --wrap "srun $worker preemptible $dir")
  [[ $* == *--array=* ]] && job="${job}_${*##*--array=}"
  for _ in $(seq 300); do [[ -f $dir/pid0 && -f $dir/pid1 ]] && break; sleep 0.1; done
  [[ -f $dir/pid0 && -f $dir/pid1 ]] || { cat "$dir/out"; echo "FAIL: $name: the tasks did not start watching"; exit 1; }
  "$slurm" run scancel --signal=USR1 "$job"
  for _ in $(seq 300); do
    state=$("$slurm" run scontrol show job "$job" | grep -o "JobState=[A-Z]*" || true)
    [[ $state == JobState=PENDING ]] && "$slurm" run scontrol update JobId="$job" StartTime=now 2>/dev/null || true
    [[ $state == JobState=COMPLETED ]] && break
    sleep 0.2
  done
  cat "$dir/out"
  [[ $state == JobState=COMPLETED ]] || { echo "FAIL: $name: job $job ended $state"; exit 1; }
  "$slurm" run scontrol show job "$job" | grep -q "Restarts=1" || { echo "FAIL: $name: job $job was not requeued once"; exit 1; }
  for rank in 0 1; do
    grep -q "rank $rank preempted at step" "$dir/out" && grep -q "rank $rank resumed at step" "$dir/out" ||
      { echo "FAIL: $name: rank $rank did not save and resume its step"; exit 1; }
  done
  grep -q "requeued Slurm job $job" "$dir/out" || { echo "FAIL: $name: rank 0 did not requeue $job"; exit 1; }
  echo "$name: SIGUSR1, step saved, job $job requeued by rank 0, resumed"
}
preempt plain_job
preempt array_task --array=3
