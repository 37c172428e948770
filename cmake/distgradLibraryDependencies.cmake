# The packages distgrad's libraries build and link against, all from Debian (see
# scripts/install_deps.sh). Read by the build (cmake/DistgradDependencies.cmake) and by
# find_package(distgrad) (distgradConfig.cmake, beside which this file is installed):
# distgrad_find_dependency is find_package(... REQUIRED) in the one and find_dependency in the
# other, so both find the same packages.
distgrad_find_dependency(Threads)
distgrad_find_dependency(absl CONFIG)
distgrad_find_dependency(OpenMP COMPONENTS CXX)
set(distgrad_saved_bla_vendor "${BLA_VENDOR}")
set(BLA_VENDOR OpenBLAS)
distgrad_find_dependency(BLAS)
set(BLA_VENDOR "${distgrad_saved_bla_vendor}")
unset(distgrad_saved_bla_vendor)
distgrad_find_dependency(nlohmann_json 3 CONFIG)  # safetensors headers, trace merging
distgrad_find_dependency(ZLIB)                    # gzip-compressed datasets
distgrad_find_dependency(Protobuf)                # module mode: Debian ships no protobuf-config.cmake
distgrad_find_dependency(gRPC CONFIG)             # needs protobuf-compiler-grpc for grpc_cpp_plugin
distgrad_find_dependency(Gloo CONFIG)             # libgloo-dev: the target is plain `gloo`, CPU collectives
