#!/usr/bin/env bash
# Builds a libFuzzer target of tests/fuzz/ with clang (the main build uses GCC, which has no
# libFuzzer): the fuzzer and the code under test (SOURCE..., absolute paths) are compiled with
# coverage and AddressSanitizer; the rest links from the GCC build in BUILD_DIR.
#   scripts/build_fuzzer.sh BUILD_DIR OUTPUT CLANGXX SOURCE...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
output=$2
clangxx=$3
shift 3
# Archives whose members the clang objects already define are not pulled in, so these may hold
# the sources under test too.
libs=("$build/rendezvous/libdistgrad_rendezvous.a" "$build/proto/libdistgrad_proto.a"
  "$build/transport/libdistgrad_transport.a" "$build/trace/libdistgrad_trace.a" "$build/core/libdistgrad_core.a")
system_libs=$(pkg-config --libs grpc++ protobuf absl_synchronization absl_flat_hash_map absl_strings)
cuda_libs=()
if [[ $(nm -C "$build/core/libdistgrad_core.a" 2>/dev/null | grep -c cudaMalloc) -gt 0 ]]; then
  cuda_libs=(-L/usr/local/cuda/lib64 -lcudart -lcublas "-Wl,-rpath,/usr/local/cuda/lib64")
fi
"$clangxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address -I"$root" -I"$build/proto/generated" "$@" \
  "${libs[@]}" $system_libs -lopenblas -lgomp -lpthread "${cuda_libs[@]}" -o "$output"
