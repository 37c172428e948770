#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main example: distributed MAML over 4 local
# worker processes. Extra arguments go to the example (e.g. --iterations 500). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
build/launcher/distgrad-run --standalone --nproc-per-node 4 build/examples/maml_sinusoid "$@"
