// The CUDA backend's entry points as seen from core's C++ code (internal).
//
// Implemented in core/cuda/*.cu|.cc when distgrad is built with CUDA, and by
// core/cuda/unavailable.cc otherwise, where each one throws a clear Error.
#pragma once

#include <cstddef>

#include "core/allocator.h"
#include "core/kernels.h"

namespace distgrad::cuda::detail {

const kernels::DeviceKernels& kernels();
// The caching allocator of one device; throws when the device does not exist.
Allocator& allocator(int device);
// Copies `nbytes` between host and device, or between devices, on the current stream; returns
// once the data is usable by the host when the destination is the CPU.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace distgrad::cuda::detail
