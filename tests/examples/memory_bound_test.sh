#!/usr/bin/env bash
# The main example's workers keep their memory bounded over a long run (docs/rpc.md, "Memory"):
# 4000 meta-iterations over 4 workers under distgrad-run; each worker's anonymous resident memory
# (RssAnon: its heap, not the pages of its binary and libraries) is read at iteration 2000, once
# the first iterations have grown the heaps to what an iteration needs, and at 3600; together
# the four may grow by at most MAX_GROWTH_MB in between (the sum evens out one worker's step).
# With glibc's default arenas (nearly one per thread) they grew by 28-32 MB over those 1600
# iterations (up to 12 MB for one worker) and went on growing; with RpcOptions::keep_freed_memory's
# arena per core, by 4-14 MB on 2 cores, levelling off.
#   memory_bound_test.sh DISTGRAD_RUN MAML_SINUSOID MAX_GROWTH_MB
set -euo pipefail
launcher=$1
example=$2
max_growth_kb=$(($3 * 1024))
dir=$(mktemp -d)
"$launcher" --standalone --nproc-per-node 4 "$example" --iterations 4000 --eval_tasks 10 --plot "$dir/plot.svg" \
  > "$dir/output" 2>&1 &
launcher_pid=$!
trap 'kill -INT "$launcher_pid" 2> /dev/null || true; wait "$launcher_pid" 2> /dev/null || true; rm -rf "$dir"' EXIT

# Waits (at most 240 s) until the example's progress line for iteration $1 is out.
wait_for_iteration() {
  local deadline=$((SECONDS + 240))
  until grep -q "\] $1/4000 " "$dir/output"; do
    if ((SECONDS > deadline)) || ! kill -0 "$launcher_pid" 2> /dev/null; then
      echo "FAIL: the example did not reach iteration $1"
      cat "$dir/output"
      exit 1
    fi
    sleep 0.1
  done
}

# "PID KB" for each worker process (the launcher's children).
resident() {
  for pid in $(pgrep -P "$launcher_pid"); do
    echo "$pid $(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status")"
  done
}

wait_for_iteration 2000
resident > "$dir/early"
wait_for_iteration 3600
resident > "$dir/late"
wait "$launcher_pid"
trap 'rm -rf "$dir"' EXIT

[ "$(wc -l < "$dir/early")" -eq 4 ] || { echo "FAIL: expected 4 workers, found: $(cat "$dir/early")"; exit 1; }
total=0
while read -r pid before; do
  after=$(awk -v pid="$pid" '$1 == pid {print $2}' "$dir/late")
  echo "worker pid $pid: ${before} kB at iteration 2000, ${after} kB at 3600 (grew by $((after - before)) kB)"
  total=$((total + after - before))
done < "$dir/early"
if ((total > max_growth_kb)); then
  echo "FAIL: the workers grew by ${total} kB together over 1600 iterations, more than ${max_growth_kb} kB"
  exit 1
fi
echo "the workers grew by ${total} kB together over 1600 iterations (at most ${max_growth_kb} kB)"
