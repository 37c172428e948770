#!/usr/bin/env bash
# examples/maml_fewshot on quick runs, in one of two modes:
#   learns:  4 workers under distgrad-run, 40 meta-iterations of 4 tasks, must lift the
#            accuracy on 40 meta-test tasks from the untrained network's to at least MIN (the
#            example exits non-zero below --min_test_accuracy); flags after MIN are passed on
#            (--local_loader: the workers draw the tasks from their own shards);
#   resumes: one process (--local: the same arithmetic every run) trains 1 epoch, then resumes
#            for the second alone, and must end with the checkpoint an uninterrupted 2-epoch run
#            writes, byte for byte (an epoch's tasks depend only on the seed and its number);
#   precision: a short epoch with --precision bf16 over 2 workers (autocast on the workers) and
#            with fp16 in one process (autocast and loss scaling) runs to its accuracy line.
# Files go to a fresh temporary directory, removed on exit.
#   maml_fewshot_test.sh DISTGRAD_RUN MAML_FEWSHOT learns MIN [FLAGS...] | resumes | precision
set -euo pipefail
launcher=$1
example=$2
mode=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

case "$mode" in
  learns)
    timeout 300 "$launcher" --standalone --nproc-per-node 4 "$example" --epochs 2 --iterations_per_epoch 20 \
      --meta_batch 4 --eval_tasks 40 --min_test_accuracy "$4" --checkpoint "$dir/learns.safetensors" \
      --plot "$dir/learns.svg" "${@:5}"
    [ -s "$dir/learns.svg" ] || { echo "FAIL: no plot written"; exit 1; }
    ;;
  resumes)
    quick=(--local --iterations_per_epoch 2 --meta_batch 3 --eval_tasks 5 --plot "")
    timeout 120 "$example" "${quick[@]}" --epochs 1 --checkpoint "$dir/resumed.safetensors"
    timeout 120 "$example" "${quick[@]}" --epochs 2 --checkpoint "$dir/resumed.safetensors" --resume | tee "$dir/resumed.log"
    grep -q "^resumed from .* after epoch 1$" "$dir/resumed.log" || { echo "FAIL: the second run did not resume"; exit 1; }
    if grep -q "^epoch 1:" "$dir/resumed.log"; then echo "FAIL: the resumed run trained epoch 1 again"; exit 1; fi
    timeout 120 "$example" "${quick[@]}" --epochs 2 --checkpoint "$dir/uninterrupted.safetensors"
    cmp "$dir/resumed.safetensors" "$dir/uninterrupted.safetensors" ||
      { echo "FAIL: the resumed run's checkpoint differs from the uninterrupted run's"; exit 1; }
    echo "the resumed checkpoint equals the uninterrupted run's"
    ;;
  precision)
    short=(--epochs 1 --iterations_per_epoch 3 --meta_batch 2 --eval_tasks 4 --plot "")
    timeout 120 "$launcher" --standalone --nproc-per-node 2 "$example" "${short[@]}" --precision bf16 \
      --checkpoint "$dir/bf16.safetensors" | tee "$dir/bf16.log"
    timeout 120 "$example" --local "${short[@]}" --precision fp16 --checkpoint "$dir/fp16.safetensors" | tee "$dir/fp16.log"
    for run in bf16 fp16; do
      grep -q "epoch 1: meta-train accuracy" "$dir/$run.log" || { echo "FAIL: the $run run reported no epoch"; exit 1; }
    done
    ;;
  *)
    echo "usage: $0 DISTGRAD_RUN MAML_FEWSHOT learns MIN [FLAGS...] | resumes | precision" >&2
    exit 2
    ;;
esac
