#!/usr/bin/env bash
# Builds distgrad on a lent GPU machine and runs what needs the GPU (docs/gpu.md). Run it there,
# in the repository root, with .device/ carried (scripts/device/pack.sh makes it here):
#   bash scripts/device/check.sh [STEP ...]      default: build cuda-tests bench profile example
# Steps (each bounded in time, so that one that hangs leaves the others their turn):
#   build       unpack .device/deps.tar.xz into /opt/distgrad-deps; configure build-device/ with
#               CUDA (sm_90) and NCCL; build it with every core (on past targets that fail)
#   tests       the whole suite but memcheck: on a GPU the CUDA, NCCL and device-map tests run
#   cuda-tests  only the tests that skip without a GPU (names with Cuda or Nccl)
#   bench       few-shot MAML on the GPU (bench/run_maml_bench.py --device cuda): ours and plain
#               PyTorch in one process, ours at 1 to 4 ranks sharing the GPU
#   profile     the kernels of one few-shot MAML iteration of ours on 2 tasks, each timed by ncu
#               (profile.csv: one row a kernel launch)
#   example     examples/maml_fewshot on CUDA, 4 ranks under distgrad-run: its accuracies and plot
#   precision   mixed precision's speed-up: few-shot MAML in one process on the GPU at each
#               --precision (fp32, bf16, fp16: autocast, half GEMMs through cuBLAS), one JSON
#               line each (the half ops' CUDA parity runs in cuda-tests)
# Logs go to $OUT (the device tool brings them back), else to build-device/gpu-logs/.
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=/opt/distgrad-deps
build=build-device
logs=${OUT:-$build/gpu-logs}
mkdir -p "$logs"

# Where the machine keeps NCCL: beside CUDA, in /usr (the lent H100's), or in the Python image's
# nvidia-nccl wheel, wherever under nvidia/ it puts include/nccl.h: the folder above include/.
nccl_home() {
  local dir header
  for dir in /usr/local/cuda /usr; do
    if [[ -f $dir/include/nccl.h ]]; then
      echo "$dir"
      return
    fi
  done
  for dir in $(python3 -c 'import nvidia; print(*nvidia.__path__)' 2>/dev/null); do
    header=$(find "$dir" -path '*/include/nccl.h' 2>/dev/null | head -1)
    if [[ -n $header ]]; then
      dirname "$(dirname "$header")"
      return
    fi
  done
}

environment() {
  local lib=$deps/usr/lib/x86_64-linux-gnu
  export PATH=$deps/usr/bin:/usr/local/cuda/bin:$PATH
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread:/usr/local/cuda/lib64:/usr/local/cuda/lib${NCCL_HOME:+:$NCCL_HOME/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export CPATH=$deps/usr/include:$deps/usr/include/x86_64-linux-gnu
  # pkg-config (gRPC's CMake files ask it for re2) reads our .pc files, their /usr under $deps.
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$deps/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$deps
  export DISTGRAD_FASHION_MNIST_DIR=$PWD/.device/fashion-mnist
  # CMake 4 (pip's) refuses files that ask for a policy version under 3.5; older CMakes ignore this.
  export CMAKE_POLICY_VERSION_MINIMUM=3.5
}

build_step() {
  if [[ ! -f $deps/.unpacked ]]; then
    [[ -f .device/deps.tar.xz ]] || { echo "check: no .device/deps.tar.xz: run scripts/device/pack.sh here and carry .device" >&2; exit 2; }
    mkdir -p "$deps"
    tar -xJf .device/deps.tar.xz -C "$deps"
    touch "$deps/.unpacked"
  fi
  { nvidia-smi || true; nvcc --version || true; c++ --version || true; cmake --version || true
    echo "NCCL_HOME=${NCCL_HOME:-}"; ls "${NCCL_HOME:-/nonexistent}"/lib{,/x86_64-linux-gnu}/libnccl* 2>&1 || true
    ls /usr/local/cuda/lib64/libcublas* 2>&1 || true; nproc; free -g; } > "$logs/machine.txt" 2>&1
  local nccl=() nccl_lib=""
  if [[ -n ${NCCL_HOME:-} ]]; then
    nccl_lib=$(ls "$NCCL_HOME"/lib/libnccl.so* 2>/dev/null | head -1 || true)
  fi
  if [[ -n $nccl_lib ]]; then  # the wheel has libnccl.so.2 only, which find_library would not take
    nccl=(-DNCCL_INCLUDE_DIR="$NCCL_HOME/include" -DNCCL_LIBRARY="$nccl_lib")
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDISTGRAD_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${DISTGRAD_CUDA_ARCHITECTURES:-90}" -DCMAKE_PREFIX_PATH="$deps/usr" \
    "${nccl[@]}" 2>&1 | tee "$logs/configure.log"
  grep -q "NCCL ON" "$logs/configure.log" || echo "check: configured without NCCL (looked in ${NCCL_HOME:-nowhere})"
  cmake --build "$build" -j "$(nproc)" -- -k 0 > "$logs/build.log" 2>&1 || failed+=(build.log)
  tail -n 30 "$logs/build.log"
}

# ctest into $logs/NAME.log: the suite but memcheck, narrowed by the further ctest arguments.
run_tests() {
  local log=$logs/$1.log
  shift
  timeout 240 ctest --test-dir "$build" -j "$(($(nproc) / 2))" -LE memcheck --timeout 300 --output-on-failure "$@" \
    > "$log" 2>&1 ||
    failed+=("$(basename "$log")")
  tail -n 25 "$log"
}

bench_step() {
  timeout 180 python3 bench/run_maml_bench.py --build "$build" --workload fewshot --device cuda --worlds 1,2,3,4 \
    --ours distgrad --rounds 1 --warmup 2 --iterations 10 --timeout 60 --peer-python "$(command -v python3)" 2>&1 |
    tee "$logs/bench.log"
}

# ncu times each kernel (one pass: only its duration, at the clocks the card runs); the bench
# itself says how long the iteration took beside them.
profile_step() {
  timeout 90 ncu --metrics gpu__time_duration.sum --clock-control none --csv --page raw --launch-count 8000 \
    "$build/bench/maml_fewshot_bench" --local --device=cuda --meta_batch=2 --warmup=0 --iterations=1 \
    > "$logs/profile.csv" 2> "$logs/profile.err" || failed+=(profile.err)
  grep -c '^"[0-9]' "$logs/profile.csv" || true
  tail -n 5 "$logs/profile.err"
}

example_step() {
  timeout 120 "$build/launcher/distgrad-run" --standalone --nproc-per-node 4 "$build/examples/maml_fewshot" \
    --device cuda --epochs 3 --iterations_per_epoch 30 --eval_tasks 100 --checkpoint /tmp/maml_fewshot.safetensors \
    --plot "$logs/maml_fewshot_cuda.svg" > "$logs/example.log" 2>&1 || failed+=(example.log)
  tr '\r' '\n' < "$logs/example.log" | grep -iE 'epoch|accuracy|error|few-shot' | tail -n 20
}

precision_step() {
  local precision
  : > "$logs/precision.log"
  for precision in fp32 bf16 fp16; do
    echo "precision=$precision" | tee -a "$logs/precision.log"
    timeout 60 "$build/bench/maml_fewshot_bench" --local --device=cuda --precision="$precision" --warmup=2 \
      --iterations=10 >> "$logs/precision.log" 2>&1 || failed+=(precision.log)
    tail -n 1 "$logs/precision.log"
  done
}

NCCL_HOME=${NCCL_HOME:-$(nccl_home)}
environment
steps=("$@")
failed=()
((${#steps[@]})) || steps=(build cuda-tests bench profile example)
for step in "${steps[@]}"; do
  echo "== check: $step"
  case $step in
    build) build_step ;;
    tests) run_tests tests ;;
    cuda-tests) run_tests cuda-tests -R 'Cuda|Nccl' ;;
    bench) bench_step ;;
    profile) profile_step ;;
    example) example_step ;;
    precision) precision_step ;;
    *) echo "check: unknown step '$step' (build, tests, cuda-tests, bench, profile, example, precision)" >&2; exit 2 ;;
  esac
done
if ((${#failed[@]})); then
  echo "check: steps failed, see ${failed[*]} in $logs" >&2
  exit 1
fi
