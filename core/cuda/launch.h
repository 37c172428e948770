// What the CUDA kernel files (core/cuda/*.cu) share to launch a primitive: the block size, the
// accumulation type of sums, and the device made current with its stream (Note [One stream per
// device] in core/cuda/runtime.h).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/cuda/runtime.h"
#include "core/device.h"
#include "core/error.h"

namespace distgrad::cuda::detail {

constexpr int kThreadsPerBlock = 256;

// Float32 sums and products accumulate in float64; other types in themselves (as on the CPU).
template <typename T>
using AccumulateType = std::conditional_t<std::is_same_v<T, float>, double, T>;

// Makes `device` current and gives the stream to launch on, for one primitive's scope.
class DeviceLaunch {
 public:
  explicit DeviceLaunch(Device device) : stream_(current_stream(cuda_index(device))), guard_(device.index) {}

  cudaStream_t stream() const { return stream_; }

 private:
  static int cuda_index(Device device) {
    DISTGRAD_CHECK(device.is_cuda(), "CUDA kernel: expected tensors on a CUDA device, found ", device.str());
    return device.index;
  }

  cudaStream_t stream_;
  DeviceGuard guard_;
};

}  // namespace distgrad::cuda::detail
