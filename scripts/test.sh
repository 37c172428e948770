#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest. Idempotent.
# The leak checks (ctest label "memcheck": each test binary under valgrind) run last.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j 2 -LE memcheck --timeout 300
ctest --test-dir build --output-on-failure -j 2 -L memcheck
