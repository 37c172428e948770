#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main example. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} build/examples/maml_sinusoid_local "$@"
