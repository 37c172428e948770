# Third-party packages, all from Debian (see scripts/install_deps.sh).
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)  # safetensors headers
find_package(ZLIB REQUIRED)                    # gzip-compressed datasets

if(DISTGRAD_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
if(DISTGRAD_BUILD_BENCHMARKS)
  find_package(benchmark CONFIG REQUIRED)
endif()
