#!/usr/bin/env bash
# An example's --help exits 0 and lists each FLAG given, those of the shared headers under
# examples/ included (absl's own --help exits 1 and shows only the flags of the program's .cc).
#   help_test.sh PROGRAM FLAG...
set -euo pipefail
program=$1
shift
if ! help=$("$program" --help); then
  echo "FAIL: $program --help exited non-zero"
  exit 1
fi
for flag in "$@"; do
  if ! grep -q -- "^  --$flag " <<< "$help"; then
    echo "FAIL: $program --help does not list --$flag:"
    echo "$help"
    exit 1
  fi
done
echo "$program --help lists $*"
