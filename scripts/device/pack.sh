#!/usr/bin/env bash
# Packs what a lent GPU machine needs to build and test distgrad there (docs/gpu.md). That
# machine has CUDA, a C++ compiler, CMake and ninja, but none of the Debian libraries we build
# against, and no network. Writes, in the git-ignored .device/ of the repository:
#   deps.tar.xz    the packages of scripts/install_deps.sh's libraries (and what they need beyond
#                  a base system), unpacked, without docs or the static archives nothing links
#   fashion-mnist/ the dataset's four files (examples, tests and the few-shot benchmark read them)
# about 50 MB in all, under the device tool's 64 MiB per call. Run it here (Debian 12, as root,
# after scripts/install_deps.sh); it does nothing when .device/ is newer than this script.
set -euo pipefail
script=$(realpath "$0")
cd "$(dirname "$script")/../.."
out=.device
if [[ -f $out/deps.tar.xz && $out/deps.tar.xz -nt $script && -f $out/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  echo "pack: $out/ is up to date"
  exit 0
fi

# The -dev packages of install_deps.sh and the libraries they pull in that a base system (glibc,
# libstdc++, libgomp from the machine's own compiler) does not have.
packages=(
  googletest libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
  libabsl-dev libabsl20220623 nlohmann-json3-dev zlib1g-dev zlib1g
  libgrpc++-dev libgrpc++1.51 libgrpc-dev libgrpc29 protobuf-compiler-grpc
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 libprotoc32 protobuf-compiler
  libc-ares-dev libc-ares2 libre2-dev libre2-9 libssl-dev libssl3
  libgloo-dev libgloo0 libhiredis-dev libhiredis0.14 libibverbs-dev libibverbs1
  libnl-3-dev libnl-3-200 libnl-route-3-dev libnl-route-3-200
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5 libquadmath0
  pkgconf pkgconf-bin libpkgconf3
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root"
chmod 755 "$work" && chmod 777 "$work/debs"  # apt-get download runs as _apt
(cd "$work/debs" && apt-get download "${packages[@]}" >/dev/null)
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$work/root"; done
# Merged /usr, as on the machine: the -dev packages' links in /usr/lib point at libraries that
# some packages (zlib, libnl) put in /lib.
cp -a "$work/root/lib/." "$work/root/usr/lib/"
rm -rf "$work/root/lib"
# Absolute links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) made relative, into the tree;
# links to what no package here provides (libibverbs' drivers) go.
find "$work/root" -type l -lname '/*' | while read -r link; do
  target=$(readlink "$link")
  ln -sfr "$work/root/usr${target#/usr}" "$link"
done
find "$work/root" -xtype l -delete
# Debian's Gloo names its library by absolute path; the others' CMake files are relocatable.
sed -i 's|"/usr/lib/libgloo|"${_IMPORT_PREFIX}/lib/libgloo|g' "$work"/root/usr/share/cmake/Gloo/GlooTargets-*.cmake

# What Debian's alternatives would link: OpenBLAS's library and headers where compilers look.
lib=$work/root/usr/lib/x86_64-linux-gnu
include=$work/root/usr/include/x86_64-linux-gnu
for name in libopenblas.so libopenblas.so.0 libblas.so libblas.so.3; do ln -sf "openblas-pthread/$name" "$lib/$name"; done
for header in "$include"/openblas-pthread/*.h; do ln -sf "openblas-pthread/$(basename "$header")" "$include/"; done
# Static archives only GoogleTest's and Google Benchmark's CMake files name; docs.
find "$work/root" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' ! -name 'libbenchmark*' -delete
rm -rf "$work/root/usr/share/doc" "$work/root/usr/share/man" "$work/root/usr/share/lintian" "$work/root/usr/src"

mkdir -p "$out/fashion-mnist"
tar -cJf "$out/deps.tar.xz.partial" -C "$work/root" .
mv "$out/deps.tar.xz.partial" "$out/deps.tar.xz"
cp /usr/share/datasets/fashion-mnist/*.gz "$out/fashion-mnist/"
du -sh "$out"
