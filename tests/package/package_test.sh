#!/usr/bin/env bash
# Builds and runs an outside project against distgrad as a user would, in one of three ways:
#   find_package   installs BUILD_DIR (cmake --install) to a temporary prefix; the project finds it
#                  with find_package(distgrad) and runs with the installed distgrad-run
#   fetch_content  the project builds distgrad from SOURCE_DIR with FetchContent (add_subdirectory)
#   pkg_config     installs as find_package does, then compiles with `pkg-config --cflags --libs`
# The program (tests/package/consumer) makes a distributed call and a distributed backward pass
# on two local workers, recording a trace (distgrad-run --trace), which the installed
# distgrad-trace merges again.
#   tests/package/package_test.sh MODE BUILD_DIR SOURCE_DIR
set -euo pipefail
mode=$1
build=$(cd "$2" && pwd)
source=$(cd "$3" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")
cuda=$(sed -n 's/^DISTGRAD_WITH_CUDA:STRING=//p' "$build/CMakeCache.txt")

# Installs into $work/prefix; sets libdir to its library folder (lib, or lib/<multiarch>).
install_package() {
  cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
  libdir=$(dirname "$(find "$work/prefix" -name libdistgrad_core.a)")
  for file in "$work/prefix/include/distgrad/distgrad.h" "$work/prefix/include/distgrad/rpc/rpc.h" \
              "$work/prefix/bin/distgrad-run" "$work/prefix/bin/distgrad-trace" "$libdir/pkgconfig/distgrad.pc" \
              "$libdir/cmake/distgrad/distgradConfig.cmake" "$libdir/cmake/distgrad/distgradConfigVersion.cmake"; do
    [[ -e $file ]] || { echo "package_test: the install lacks $file" >&2; exit 1; }
  done
}

case $mode in
  find_package)
    install_package
    cmake -S "$source/tests/package/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
      -DCMAKE_PREFIX_PATH="$work/prefix"
    cmake --build "$work/consumer"
    run="$work/prefix/bin/distgrad-run"
    ;;
  fetch_content)
    cmake -S "$source/tests/package/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
      -DDISTGRAD_SOURCE_DIR="$source" -DDISTGRAD_WITH_CUDA="$cuda"
    # A subproject builds no tests, benchmarks or examples, and installs nothing.
    for option in DISTGRAD_BUILD_TESTS DISTGRAD_BUILD_BENCHMARKS DISTGRAD_BUILD_EXAMPLES DISTGRAD_INSTALL; do
      grep -q "^$option:BOOL=OFF$" "$work/consumer/CMakeCache.txt" ||
        { echo "package_test: $option is not OFF in a subproject" >&2; exit 1; }
    done
    cmake --build "$work/consumer" -j "${DISTGRAD_JOBS:-2}" --target consumer distgrad_run
    run="$work/consumer/_deps/distgrad-build/launcher/distgrad-run"
    ;;
  pkg_config)
    install_package
    mkdir -p "$work/consumer"
    export PKG_CONFIG_PATH="$libdir/pkgconfig"
    # shellcheck disable=SC2046  # pkg-config's output is a list of words
    c++ -O1 "$source/tests/package/consumer/consumer.cc" -o "$work/consumer/consumer" \
      $(pkg-config --cflags --libs distgrad)
    run="$work/prefix/bin/distgrad-run"
    ;;
  *)
    echo "package_test: unknown mode '$mode' (find_package, fetch_content or pkg_config)" >&2
    exit 2
    ;;
esac

OMP_NUM_THREADS=1 "$run" --trace "$work/trace" --standalone --nproc-per-node 2 "$work/consumer/consumer" 2>&1 |
  tee "$work/run.log"
grep -q "consumer: worker1 returned 6, and the gradient 2 2 2 came back" "$work/run.log"
grep -q "scaled_sum" "$work/trace/stats.json" || { echo "package_test: no scaled_sum in the trace's statistics" >&2; exit 1; }
if [[ $mode != fetch_content ]]; then
  "$work/prefix/bin/distgrad-trace" merge "$work/trace" | grep -q "scaled_sum"
fi
