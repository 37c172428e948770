#!/usr/bin/env bash
# Applies .clang-format to distgrad's C++ and CUDA sources; with --check, changes nothing and
# fails listing the files that are not formatted (the ctest "format" test runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' '*.h' '*.cu' 2>/dev/null || find core tests bench examples -name '*.cc' -o -name '*.h' -o -name '*.cu')
if [[ "${1:-}" == "--check" ]]; then
  unformatted=()
  for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
  done
  if ((${#unformatted[@]})); then
    echo "not formatted (run scripts/format.sh): ${unformatted[*]}" >&2
    exit 1
  fi
  exit 0
fi
clang-format -i "${files[@]}"
