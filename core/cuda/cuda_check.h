// DISTGRAD_CUDA_CHECK and DISTGRAD_CUBLAS_CHECK: the one wrapper around every CUDA runtime
// and cuBLAS call in core/cuda/.
//
// A failing call throws distgrad::Error naming the call, the error and where it was made:
//
//   DISTGRAD_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream));
//   // -> "CUDA call cudaMemcpyAsync(...) failed with cudaErrorInvalidValue (invalid argument)
//   //     at core/cuda/backend.cc:42"
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace distgrad::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  // The runtime also records the error as the thread's last error; reset it so that the next
  // launch check does not report this failure a second time (sticky errors stay regardless).
  (void)cudaGetLastError();
  DISTGRAD_FAIL("CUDA call ", call, " failed with ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ") at ",
                file, ":", line);
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  DISTGRAD_FAIL("cuBLAS call ", call, " failed with ", cublasGetStatusName(status), " (", cublasGetStatusString(status),
                ") at ", file, ":", line);
}

}  // namespace distgrad::cuda::detail

#define DISTGRAD_CUDA_CHECK(expr)                                                                 \
  do {                                                                                            \
    const cudaError_t distgrad_cuda_error = (expr);                                               \
    if (distgrad_cuda_error != cudaSuccess) [[unlikely]] {                                        \
      ::distgrad::cuda::detail::throw_cuda_error(distgrad_cuda_error, #expr, __FILE__, __LINE__); \
    }                                                                                             \
  } while (0)

#define DISTGRAD_CUBLAS_CHECK(expr)                                                                    \
  do {                                                                                                 \
    const cublasStatus_t distgrad_cublas_status = (expr);                                              \
    if (distgrad_cublas_status != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                \
      ::distgrad::cuda::detail::throw_cublas_error(distgrad_cublas_status, #expr, __FILE__, __LINE__); \
    }                                                                                                  \
  } while (0)
