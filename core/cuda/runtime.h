// The per-device CUDA state of the backend: the current stream, the cuBLAS handle, and a
// guard that makes a device current for a scope. Also implements the queries in core/cuda.h.
//
// Note [One stream per device]
// All work distgrad queues on a device (kernels, cuBLAS calls, copies, frees handed back to
// the caching allocator) goes on that device's single current stream, so it runs in the order
// it was queued, and the host waits only where it must read results (copies to the CPU,
// cuda::synchronize). The stream is created with cudaStreamNonBlocking so that it does not
// serialize against the legacy default stream that other libraries in the process may use.
// Streams and cuBLAS handles are created on first use and live until the process exits:
// destroying them from static destructors could run after the CUDA runtime has shut down.
// Host threads share a device's cuBLAS handle, which cuBLAS allows as long as the handle's
// configuration does not change after it is set up; ours never does.
//
//   DeviceGuard guard(device);
//   my_kernel<<<blocks, threads, 0, current_stream(device)>>>(...);
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace distgrad::cuda::detail {

// Throws an Error naming `device` and the number of visible devices unless it is one of them.
void check_device(int device);

// The stream all of `device`'s work goes on; see Note [One stream per device].
cudaStream_t current_stream(int device);

// `device`'s cuBLAS handle, bound to its current stream.
cublasHandle_t cublas_handle(int device);

// Makes a CUDA device current for the lifetime of the guard, then restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_device_;
};

}  // namespace distgrad::cuda::detail
