#!/usr/bin/env bash
# The main example's lines reach the launcher's output as they are printed: a long run under
# distgrad-run (stdout a pipe) must show its "meta-test loss before training" line within 60 s.
# Block-buffered, that line waited for the first progress line's flush, after a tenth of the
# 100,000 iterations (minutes).
#   line_buffered_test.sh DISTGRAD_RUN MAML_SINUSOID
set -euo pipefail
launcher=$1
example=$2
source "$(dirname "$0")/launched_run.sh"
start_run "$launcher" --standalone --nproc-per-node 2 "$example" --iterations 100000 --eval_tasks 10 \
  --plot "$run_dir/plot.svg"
wait_for_output "meta-test loss before training" 60
echo "the first lines arrived while the run went on:"
cat "$run_dir/output"
