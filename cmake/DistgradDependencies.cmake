# Third-party packages: those of the libraries (cmake/distgradLibraryDependencies.cmake, shared
# with find_package(distgrad)), and GoogleTest and Google Benchmark when tests and benchmarks
# are built.
macro(distgrad_find_dependency)
  find_package(${ARGV} REQUIRED)
endmacro()
include(distgradLibraryDependencies)

if(DISTGRAD_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
if(DISTGRAD_BUILD_BENCHMARKS)
  find_package(benchmark CONFIG REQUIRED)
endif()
