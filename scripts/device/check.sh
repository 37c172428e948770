#!/usr/bin/env bash
# Builds distgrad on a lent GPU machine and runs what needs the GPU (docs/gpu.md). Run it there,
# in the repository root, with .device/ carried (scripts/device/pack.sh makes it here):
#   bash scripts/device/check.sh [STEP ...]      default: build cuda-tests bench
# Steps:
#   build       unpack .device/deps.tar.xz into /opt/distgrad-deps; configure build-device/ with
#               CUDA (sm_90) and NCCL; build it with every core
#   tests       the whole suite but memcheck: on a GPU the CUDA, NCCL and device-map tests run
#   cuda-tests  only the tests that skip without a GPU (names with Cuda or Nccl)
#   bench       few-shot MAML on the GPU (bench/run_maml_bench.py --device cuda): ours and plain
#               PyTorch in one process, ours at 1, 2 and 4 ranks sharing the GPU
#   profile     one few-shot MAML iteration of ours under nsys (or ncu's per-kernel summary of
#               its first 2000 kernels)
# Logs go to $OUT (the device tool brings them back), else to build-device/gpu-logs/.
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=/opt/distgrad-deps
build=build-device
logs=${OUT:-$build/gpu-logs}
mkdir -p "$logs"

# Where the machine keeps NCCL: beside CUDA, or in the Python image's nvidia-nccl wheel.
nccl_home() {
  local dir
  for dir in /usr/local/cuda /usr; do
    if [[ -f $dir/include/nccl.h ]]; then
      echo "$dir"
      return
    fi
  done
  python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true
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
}

build_step() {
  if [[ ! -f $deps/.unpacked ]]; then
    [[ -f .device/deps.tar.xz ]] || { echo "check: no .device/deps.tar.xz: run scripts/device/pack.sh here and carry .device" >&2; exit 2; }
    mkdir -p "$deps"
    tar -xJf .device/deps.tar.xz -C "$deps"
    touch "$deps/.unpacked"
  fi
  { nvidia-smi || true; nvcc --version || true; c++ --version || true; } > "$logs/machine.txt" 2>&1
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
  cmake --build "$build" -j "$(nproc)" 2>&1 | tail -n 40 | tee "$logs/build.log"
}

# ctest into $logs/NAME.log: the suite but memcheck, narrowed by the further ctest arguments.
run_tests() {
  local log=$logs/$1.log
  shift
  ctest --test-dir "$build" -j "$(($(nproc) / 2))" -LE memcheck --timeout 900 --output-on-failure "$@" > "$log" 2>&1 ||
    failed+=("$(basename "$log")")
  tail -n 25 "$log"
}

bench_step() {
  python3 bench/run_maml_bench.py --build "$build" --workload fewshot --device cuda --worlds 1,2,4 --ours distgrad \
    --rounds 1 --warmup 2 --iterations 10 --peer-python "$(command -v python3)" 2>&1 | tee "$logs/bench.log"
}

profile_step() {
  local command=("$build/bench/maml_fewshot_bench" --local --device=cuda --warmup=1 --iterations=1)
  if command -v nsys >/dev/null; then
    nsys profile --stats=true -o /tmp/fewshot "${command[@]}" > "$logs/profile.txt" 2>&1
  else  # every kernel replayed for its counters: the first 2000 only
    ncu --print-summary per-kernel --launch-count 2000 "${command[@]}" > "$logs/profile.txt" 2>&1
  fi
  tail -n 60 "$logs/profile.txt"
}

NCCL_HOME=${NCCL_HOME:-$(nccl_home)}
environment
steps=("$@")
failed=()
((${#steps[@]})) || steps=(build cuda-tests bench)
for step in "${steps[@]}"; do
  echo "== check: $step"
  case $step in
    build) build_step ;;
    tests) run_tests tests ;;
    cuda-tests) run_tests cuda-tests -R 'Cuda|Nccl' ;;
    bench) bench_step ;;
    profile) profile_step ;;
    *) echo "check: unknown step '$step' (build, tests, cuda-tests, bench, profile)" >&2; exit 2 ;;
  esac
done
if ((${#failed[@]})); then
  echo "check: tests failed, see ${failed[*]} in $logs" >&2
  exit 1
fi
