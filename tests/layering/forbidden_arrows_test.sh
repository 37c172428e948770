#!/usr/bin/env bash
# The layering check fails on forbidden arrows: in a copy of the tree's layers, rpc/codec.h
# includes nn/module.h, autograd/engine.cc includes rpc/rpc.h, rpc's CMakeLists.txt links
# distgrad::autograd and the installed rpc/registry.h includes the internal rpc/frame.h; the
# check must name all four (and pass on the untouched copy first).
#   tests/layering/forbidden_arrows_test.sh SOURCE_DIR
set -euo pipefail
source=$(cd "$1" && pwd)
check="$source/tests/layering/check_layers.cmake"
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
mkdir -p "$copy/docs" "$copy/cmake"
cp "$source/docs/architecture.md" "$copy/docs/"
cp "$source/cmake/DistgradPackage.cmake" "$copy/cmake/"
for layer in $(sed -n '/^```layers$/,/^```$/s/^\([a-z_]*\):.*/\1/p' "$source/docs/architecture.md"); do
  cp -r "$source/$layer" "$copy/"
done

cmake -DSOURCE_DIR="$copy" -P "$check" > /dev/null || { echo "the untouched copy fails the check" >&2; exit 1; }

echo '#include "nn/module.h"' >> "$copy/rpc/codec.h"
echo '#include "rpc/rpc.h"' >> "$copy/autograd/engine.cc"
echo 'target_link_libraries(distgrad_rpc PRIVATE distgrad::autograd)' >> "$copy/rpc/CMakeLists.txt"
echo '#include "rpc/frame.h"' >> "$copy/rpc/registry.h"
if output=$(cmake -DSOURCE_DIR="$copy" -P "$check" 2>&1); then
  echo "the check passed a tree with forbidden arrows:" >&2
  echo "$output" >&2
  exit 1
fi
for expected in "rpc/codec.h includes nn/module.h: rpc may not depend on nn" \
                "autograd/engine.cc includes rpc/rpc.h: autograd may not depend on rpc" \
                "rpc/CMakeLists.txt links distgrad::autograd: rpc may not depend on autograd" \
                "rpc/registry.h includes rpc/frame.h: an installed header may not include an internal one" \
                "4 arrow(s) that docs/architecture.md does not allow"; do
  grep -qF "$expected" <<< "$output" || { echo "missing from the check's output: $expected" >&2; echo "$output" >&2; exit 1; }
done
echo "the check names each of the four forbidden arrows"
