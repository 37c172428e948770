#!/usr/bin/env bash
# examples/ddp_fashion_mnist under distgrad-run, on a quick MLP run (4096 training images, 1000
# test images), in one of two modes:
#   matches: world size 2 (32 samples per rank) reaches the test accuracy of world size 1 (the
#            single-process run, 64 per batch, the same sample order) within 0.01;
#   resumes: rank 1 exits after epoch 1 (--fail_at_epoch 1), distgrad-run --max-restarts 1
#            restarts the group, which resumes from epoch 1 and ends with the checkpoint an
#            uninterrupted run writes, byte for byte;
#   precision: world size 2 with --precision bf16 and fp16 (autocast; fp16 with loss scaling)
#              reaches the float32 run's test accuracy within 0.01, and a bad value exits with 2.
# Checkpoints go to a fresh temporary directory, removed on exit.
#   ddp_fashion_mnist_test.sh DISTGRAD_RUN DDP_FASHION_MNIST matches|resumes|precision
set -euo pipefail
launcher=$1
example=$2
mode=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
quick=(--model mlp --train_limit 4096 --test_limit 1000 --seed 1 --global_batch 64)

# Runs the example under distgrad-run: run NAME LAUNCHER_OPTIONS... -- EXAMPLE_OPTIONS...; the
# output goes to $dir/NAME.log and the console; fails the test when the launcher fails.
run() {
  local name=$1
  shift
  local options=()
  while [ "$1" != "--" ]; do options+=("$1"); shift; done
  shift
  local status=0
  timeout 60 "$launcher" --standalone "${options[@]}" "$example" "${quick[@]}" "$@" >"$dir/$name.log" 2>&1 || status=$?
  cat "$dir/$name.log"
  [ "$status" -eq 0 ] || { echo "FAIL: $name: distgrad-run exited with $status"; exit 1; }
}

# The accuracy in rank 0's "final_test_accuracy=..." line of run NAME.
final_accuracy() {
  local accuracy
  accuracy=$(sed -n 's/^\[0\] final_test_accuracy=\([0-9.]*\)$/\1/p' "$dir/$1.log")
  [ -n "$accuracy" ] || { echo "FAIL: $1: no final_test_accuracy line from rank 0" >&2; exit 1; }
  echo "$accuracy"
}

case "$mode" in
  matches)
    run world1 --nproc-per-node 1 -- --epochs 1 --checkpoint "$dir/world1.safetensors"
    run world2 --nproc-per-node 2 -- --epochs 1 --checkpoint "$dir/world2.safetensors"
    one=$(final_accuracy world1)
    two=$(final_accuracy world2)
    awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' || {
      echo "FAIL: world size 2 reached test accuracy $two, world size 1 $one (expected within 0.01)"; exit 1; }
    echo "test accuracy: world size 1 $one, world size 2 $two"
    ;;
  resumes)
    run restarted --nproc-per-node 2 --max-restarts 1 -- --epochs 2 --fail_at_epoch 1 \
      --checkpoint "$dir/restarted.safetensors"
    grep -q 'restarting the workers (restart 1 of 1)' "$dir/restarted.log" || {
      echo "FAIL: distgrad-run did not restart the workers after rank 1 failed"; exit 1; }
    grep -q '^\[0\] resumed from epoch 1 ' "$dir/restarted.log" || {
      echo "FAIL: the restarted group did not say it resumed from epoch 1"; exit 1; }
    run uninterrupted --nproc-per-node 2 -- --epochs 2 --checkpoint "$dir/uninterrupted.safetensors"
    cmp "$dir/restarted.safetensors" "$dir/uninterrupted.safetensors" || {
      echo "FAIL: the resumed run's final checkpoint differs from an uninterrupted run's"; exit 1; }
    echo "resumed from epoch 1 after the restart; final test accuracy $(final_accuracy restarted), as uninterrupted"
    ;;
  precision)
    run fp32 --nproc-per-node 2 -- --epochs 1 --checkpoint "$dir/fp32.safetensors"
    fp32=$(final_accuracy fp32)
    for precision in bf16 fp16; do
      run "$precision" --nproc-per-node 2 -- --epochs 1 --precision "$precision" --checkpoint "$dir/$precision.safetensors"
      half=$(final_accuracy "$precision")
      awk -v a="$fp32" -v b="$half" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' || {
        echo "FAIL: --precision $precision reached test accuracy $half, fp32 $fp32 (expected within 0.01)"; exit 1; }
      echo "test accuracy: fp32 $fp32, $precision $half"
    done
    status=0
    "$example" "${quick[@]}" --precision fp8 >"$dir/bad.log" 2>&1 || status=$?
    [ "$status" -eq 2 ] && grep -q "precision must be fp32, bf16 or fp16, found 'fp8'" "$dir/bad.log" || {
      cat "$dir/bad.log"; echo "FAIL: --precision fp8 exited with $status, expected 2 and a message"; exit 1; }
    ;;
  *)
    echo "usage: $0 DISTGRAD_RUN DDP_FASHION_MNIST matches|resumes|precision" >&2
    exit 2
    ;;
esac
