# CUDA detection. DISTGRAD_WITH_CUDA is a STRING, not option(): option() would turn AUTO into OFF.
#   AUTO (default): CUDA on when nvcc and cuBLAS are found (also looks in /usr/local/cuda)
#   ON: CUDA required; configure fails without it
#   OFF: CPU only
# Sets DISTGRAD_HAVE_CUDA, and DISTGRAD_HAVE_NCCL when NCCL is found beside CUDA (or in $NCCL_HOME):
# the process groups' CUDA backend (ddp/). Architectures default to 90 (H100/H200); override with
# -DCMAKE_CUDA_ARCHITECTURES=... ("native" fails on machines without a GPU).
set(DISTGRAD_WITH_CUDA AUTO CACHE STRING "CUDA backend: AUTO, ON or OFF")
set_property(CACHE DISTGRAD_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(DISTGRAD_HAVE_CUDA OFF)
set(DISTGRAD_HAVE_NCCL OFF)

if(NOT DISTGRAD_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # else both libcudart.so and -lcudart_static get linked
    enable_language(CUDA)
    # CMake 3.25 predates nvcc's C++20 support: tell it the flag, then ask for C++20.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit)
    if(TARGET CUDA::cudart AND TARGET CUDA::cublas)
      set(DISTGRAD_HAVE_CUDA ON)
    endif()
  endif()
  if(NOT DISTGRAD_HAVE_CUDA AND DISTGRAD_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DISTGRAD_WITH_CUDA=ON but no CUDA compiler with cuBLAS was found "
                        "(looked for nvcc on PATH and in /usr/local/cuda)")
  endif()
endif()

if(DISTGRAD_HAVE_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                          INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    set(DISTGRAD_HAVE_NCCL ON)
  endif()
endif()
