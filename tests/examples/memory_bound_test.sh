#!/usr/bin/env bash
# The main example's workers keep their memory bounded over a long run (docs/rpc.md, "Memory"):
# 4000 meta-iterations over 4 workers under distgrad-run; each worker's anonymous resident memory
# (RssAnon: its heap, not the pages of its binary and libraries) is read at iteration 2000, once
# the first iterations have grown the heaps to what an iteration needs, and at 3600. The median
# of the four processes' growth in between (the mean of the middle two, so that one worker's
# step does not decide) may be at most MAX_GROWTH_MB. With glibc's default arenas (nearly one
# per thread) the medians were 8.5-9.8 MB over those 1600 iterations, the workers still growing;
# with RpcOptions::keep_freed_memory's arena per core, 0.6-3.6 MB on 2 cores (one worker once
# stepped by 14 MB).
#   memory_bound_test.sh DISTGRAD_RUN MAML_SINUSOID MAX_GROWTH_MB
set -euo pipefail
launcher=$1
example=$2
max_growth_kb=$(($3 * 1024))
source "$(dirname "$0")/launched_run.sh"
start_run "$launcher" --standalone --nproc-per-node 4 "$example" --iterations 4000 --eval_tasks 10 \
  --plot "$run_dir/plot.svg"

# "PID KB" for each worker process (the launcher's children).
resident() {
  for pid in $(pgrep -P "$launcher_pid"); do
    echo "$pid $(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status")"
  done
}

wait_for_output "\] 2000/4000 " 240
resident > "$run_dir/early"
wait_for_output "\] 3600/4000 " 240
resident > "$run_dir/late"
finish_run

[ "$(wc -l < "$run_dir/early")" -eq 4 ] || { echo "FAIL: expected 4 workers, found: $(cat "$run_dir/early")"; exit 1; }
growths=()
while read -r pid before; do
  after=$(awk -v pid="$pid" '$1 == pid {print $2}' "$run_dir/late")
  echo "worker pid $pid: ${before} kB at iteration 2000, ${after} kB at 3600 (grew by $((after - before)) kB)"
  growths+=($((after - before)))
done < "$run_dir/early"
mapfile -t sorted < <(printf '%s\n' "${growths[@]}" | sort -n)
median=$(((sorted[1] + sorted[2]) / 2))
if ((median > max_growth_kb)); then
  echo "FAIL: the workers' median growth over 1600 iterations is ${median} kB, more than ${max_growth_kb} kB"
  exit 1
fi
echo "the workers' median growth over 1600 iterations is ${median} kB (at most ${max_growth_kb} kB)"
