#!/usr/bin/env bash
# The main example's lines reach the launcher's output as they are printed: a long run under
# distgrad-run (stdout a pipe) must show its "meta-test loss before training" line within 60 s.
# Block-buffered, that line waited for the first progress line's flush, after a tenth of the
# 100,000 iterations (minutes).
#   line_buffered_test.sh DISTGRAD_RUN MAML_SINUSOID
set -euo pipefail
launcher=$1
example=$2
dir=$(mktemp -d)
"$launcher" --standalone --nproc-per-node 2 "$example" --iterations 100000 --eval_tasks 10 --plot "$dir/plot.svg" \
  > "$dir/output" 2>&1 &
launcher_pid=$!
trap 'kill -INT "$launcher_pid" 2> /dev/null || true; wait "$launcher_pid" 2> /dev/null || true; rm -rf "$dir"' EXIT
deadline=$((SECONDS + 60))
until grep -q "meta-test loss before training" "$dir/output"; do
  if ((SECONDS > deadline)) || ! kill -0 "$launcher_pid" 2> /dev/null; then
    echo "FAIL: no \"meta-test loss before training\" line within 60 s; the output so far:"
    cat "$dir/output"
    exit 1
  fi
  sleep 0.1
done
echo "the first lines arrived while the run went on:"
cat "$dir/output"
