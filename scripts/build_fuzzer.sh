#!/usr/bin/env bash
# Builds the libFuzzer target tests/fuzz/frame_fuzzer.cc with clang (the main build uses GCC,
# which has no libFuzzer): the decoding code (rpc/frame.cc, rpc/codec.cc, the generated
# headers) is compiled with coverage and AddressSanitizer; the rest links from the GCC build.
#   scripts/build_fuzzer.sh BUILD_DIR OUTPUT [CLANGXX]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
output=$2
clangxx=${3:-clang++}
libs=("$build/transport/libdistgrad_transport.a" "$build/core/libdistgrad_core.a")
system_libs=$(pkg-config --libs grpc++ protobuf absl_synchronization absl_flat_hash_map absl_strings)
cuda_libs=()
if [[ $(nm -C "$build/core/libdistgrad_core.a" 2>/dev/null | grep -c cudaMalloc) -gt 0 ]]; then
  cuda_libs=(-L/usr/local/cuda/lib64 -lcudart -lcublas "-Wl,-rpath,/usr/local/cuda/lib64")
fi
"$clangxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address -I"$root" -I"$build/proto/generated" \
  "$root/tests/fuzz/frame_fuzzer.cc" "$root/rpc/frame.cc" "$root/rpc/codec.cc" \
  "$build/proto/generated/proto/worker.pb.cc" \
  "${libs[@]}" $system_libs -lopenblas -lgomp "${cuda_libs[@]}" -o "$output"
