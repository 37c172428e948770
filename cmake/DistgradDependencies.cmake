# Third-party packages, all from Debian (see scripts/install_deps.sh).
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)  # safetensors headers
find_package(ZLIB REQUIRED)                    # gzip-compressed datasets
find_package(Protobuf REQUIRED)                # module mode: Debian ships no protobuf-config.cmake
find_package(gRPC CONFIG REQUIRED)             # needs protobuf-compiler-grpc for grpc_cpp_plugin
find_package(Gloo CONFIG REQUIRED)             # libgloo-dev: the target is plain `gloo`, CPU collectives

if(DISTGRAD_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
if(DISTGRAD_BUILD_BENCHMARKS)
  find_package(benchmark CONFIG REQUIRED)
endif()
