# Build options, language level, warnings and ccache.
option(DISTGRAD_BUILD_TESTS "Build the test suite" ON)
option(DISTGRAD_BUILD_BENCHMARKS "Build the Google Benchmark programs in bench/" ON)
option(DISTGRAD_BUILD_EXAMPLES "Build the examples" ON)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)

find_program(DISTGRAD_CCACHE ccache)
if(DISTGRAD_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${DISTGRAD_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${DISTGRAD_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${DISTGRAD_CCACHE})
endif()

# Warnings for distgrad's own targets (not for third-party code).
add_library(distgrad_warnings INTERFACE)
target_compile_options(distgrad_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
