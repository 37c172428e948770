#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main example. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
build/examples/sine_regression
