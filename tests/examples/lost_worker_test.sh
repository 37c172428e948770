#!/usr/bin/env bash
# The main example outlives a lost worker (docs/fault-tolerance.md): a world of 4 started by hand,
# as srun or mpirun would start it, runs with --reissue_lost_partitions twice: undisturbed, and
# with worker2 killed (SIGKILL) a fifth of the way into training; given DISTGRAD_RUN, the
# disturbed world runs under `distgrad-run --tolerate-lost-workers` instead. The disturbed run must
# say it lost worker2, end with status 0 on every survivor (and the launcher's), and print rank 0's
# loss curve (every progress line's loss and the meta-test losses) exactly as the undisturbed run
# did.
#   lost_worker_test.sh MAML_SINUSOID [DISTGRAD_RUN]
set -euo pipefail
example=$1
launcher=${2:-}
out=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2> /dev/null || true; rm -rf "$out"' EXIT
args=(--iterations 300 --eval_tasks 20 --plot "" --reissue_lost_partitions)

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run_world NAME [KILL_RANK]: the 4 ranks' outputs in $out/NAME.RANK; KILL_RANK is killed once
# rank 0 has reported 60 of the 300 iterations. Fails when a rank other than KILL_RANK fails.
run_world() {
  local name=$1 kill_rank=${2:--1} port pids=() rank status=0
  port=$(free_port)
  for rank in 0 1 2 3; do
    RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      OMP_NUM_THREADS=1 "$example" "${args[@]}" > "$out/$name.$rank" 2>&1 &
    pids+=($!)
  done
  if ((kill_rank >= 0)); then
    wait_for_iteration_60 "$out/$name.0" "${pids[0]}"
    kill -9 "${pids[$kill_rank]}"
  fi
  for rank in 0 1 2 3; do
    if ! wait "${pids[$rank]}" && ((rank != kill_rank)); then
      echo "FAIL: rank $rank of the $name run failed:"; cat "$out/$name.$rank"; status=1
    fi
  done
  return $status
}

# wait_for_iteration_60 FILE PID: until FILE shows rank 0's report of iteration 60; fails the test
# when PID ends first or 120 s pass.
wait_for_iteration_60() {
  local deadline=$((SECONDS + 120))
  until grep -q "\] 60/300 " "$1"; do
    if ((SECONDS > deadline)) || ! kill -0 "$2" 2> /dev/null; then
      echo "FAIL: rank 0 did not reach iteration 60:"; cat "$1"; exit 1
    fi
    sleep 0.05
  done
}

# run_launched NAME: the world under distgrad-run --tolerate-lost-workers, its output in
# $out/NAME.0; the worker of rank 2 is killed at iteration 60. Fails when the launcher does.
run_launched() {
  "$launcher" --standalone --nproc-per-node 4 --tolerate-lost-workers "$example" "${args[@]}" > "$out/$1.0" 2>&1 &
  local launcher_pid=$! pid
  wait_for_iteration_60 "$out/$1.0" "$launcher_pid"
  for pid in $(pgrep -P "$launcher_pid"); do
    if tr '\0' '\n' < "/proc/$pid/environ" | grep -qx "RANK=2"; then kill -9 "$pid"; fi
  done
  if ! wait "$launcher_pid"; then
    echo "FAIL: distgrad-run failed:"; cat "$out/$1.0"; return 1
  fi
  if ! grep -q "rank 2 (pid [0-9]*) was killed by signal 9.*the other workers go on (--tolerate-lost-workers)" "$out/$1.0"; then
    echo "FAIL: distgrad-run did not report rank 2's loss:"; cat "$out/$1.0"; return 1
  fi
}

curve() { grep -o -E '(\] [0-9]+/300 loss [0-9.]+|meta-test loss [a-z ]+: *[0-9.]+)' "$out/$1.0"; }

run_world undisturbed
if [[ -n $launcher ]]; then run_launched disturbed; else run_world disturbed 2; fi
if ! grep -q "on worker2 failed (UNAVAILABLE)" "$out/disturbed.0"; then
  echo "FAIL: the disturbed run did not lose worker2:"; cat "$out/disturbed.0"; exit 1
fi
if ! diff <(curve undisturbed) <(curve disturbed); then
  echo "FAIL: the loss curves differ (< undisturbed, > disturbed); rank 0 of the disturbed run:"
  cat "$out/disturbed.0"; exit 1
fi
echo "PASS: worker2 lost at iteration 60, the loss curve equals the undisturbed one ($(curve disturbed | wc -l) lines)"
grep -E "UNAVAILABLE|running it again" "$out/disturbed.0" | head -5
