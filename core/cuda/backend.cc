// copy_bytes: the CUDA backend's copies between the host and devices, and between devices.
//
// Each copy is queued on a current stream (Note [One stream per device]). Copies that involve
// the host wait for the stream before returning: the host may read the destination, or free
// the source, as soon as the call returns (host memory is pageable, never pinned).
#include "core/cuda/backend.h"

#include <cstddef>

#include "core/cuda/cuda_check.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace distgrad::cuda::detail {
namespace {

// Copies within one device or between two; the host does not wait for same-device copies.
void copy_between_devices(void* dst, int dst_device, const void* src, int src_device, size_t nbytes) {
  const cudaStream_t dst_stream = current_stream(dst_device);
  if (dst_device == src_device) {
    DeviceGuard guard(dst_device);
    DISTGRAD_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, dst_stream));
    return;
  }
  // The copy goes on the destination's stream, after the work that may still use `dst`; the
  // source device's stream must first finish writing `src`. Waiting for the copy afterwards
  // lets the source block be freed and reused on its own stream.
  DISTGRAD_CUDA_CHECK(cudaStreamSynchronize(current_stream(src_device)));
  DeviceGuard guard(dst_device);
  DISTGRAD_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, dst_stream));
  DISTGRAD_CUDA_CHECK(cudaStreamSynchronize(dst_stream));
}

// Copies between the host and `device` in direction `kind`, and waits for the copy.
void copy_with_host(void* dst, const void* src, int device, size_t nbytes, cudaMemcpyKind kind) {
  const cudaStream_t stream = current_stream(device);
  DeviceGuard guard(device);
  DISTGRAD_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, stream));
  DISTGRAD_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  DISTGRAD_CHECK(dst_device.is_cuda() || src_device.is_cuda(),
                 "cuda::detail::copy_bytes: expected a CUDA device on at least one side, found ", src_device.str(),
                 " to ", dst_device.str());
  if (nbytes == 0) {
    return;
  }
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    copy_between_devices(dst, dst_device.index, src, src_device.index, nbytes);
  } else if (dst_device.is_cuda()) {
    copy_with_host(dst, src, dst_device.index, nbytes, cudaMemcpyHostToDevice);
  } else {
    copy_with_host(dst, src, src_device.index, nbytes, cudaMemcpyDeviceToHost);
  }
}

}  // namespace distgrad::cuda::detail
