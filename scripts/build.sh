#!/usr/bin/env bash
# Configures and builds distgrad into ${DISTGRAD_BUILD_DIR:-build}: Release, Ninja, ccache, -j2.
# CUDA is detected automatically (override: DISTGRAD_WITH_CUDA=ON|OFF). Idempotent: reruns
# only rebuild what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${DISTGRAD_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DDISTGRAD_WITH_CUDA="${DISTGRAD_WITH_CUDA:-AUTO}" \
  "$@"
cmake --build "$build_dir" -j "${DISTGRAD_JOBS:-2}"
