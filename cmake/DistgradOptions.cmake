# Build options, language level, warnings, ccache and install locations. Tests, benchmarks,
# examples and install rules are on by default only when distgrad is the top-level project (not
# when a program pulls it in with add_subdirectory or FetchContent).
option(DISTGRAD_BUILD_TESTS "Build the test suite" ${PROJECT_IS_TOP_LEVEL})
option(DISTGRAD_BUILD_BENCHMARKS "Build the Google Benchmark programs in bench/" ${PROJECT_IS_TOP_LEVEL})
option(DISTGRAD_BUILD_EXAMPLES "Build the examples" ${PROJECT_IS_TOP_LEVEL})
option(DISTGRAD_INSTALL "Add install rules (headers, libraries, distgrad-run, CMake package, distgrad.pc)"
       ${PROJECT_IS_TOP_LEVEL})

if(PROJECT_IS_TOP_LEVEL AND NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

include(GNUInstallDirs)
# Headers install under include/distgrad/, keeping the tree's paths ("core/tensor.h").
set(DISTGRAD_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/distgrad)
set(DISTGRAD_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/distgrad)

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
