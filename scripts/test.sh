#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest. Idempotent.
# The leak check (ctest label "memcheck": the core tests under valgrind) runs last.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j 2 -LE memcheck --timeout 300
ctest --test-dir build --output-on-failure -L memcheck
