// Streams, cuBLAS handles and the device guard of the CUDA backend, and core/cuda.h's queries.
// See Note [One stream per device] in core/cuda/runtime.h.

#include "core/cuda/runtime.h"

#include <mutex>

#include "core/cuda.h"
#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace distgrad::cuda {
namespace detail {
namespace {

// What cudaGetDeviceCount reported, asked once per process.
struct VisibleDevices {
  int count = 0;
  cudaError_t error = cudaSuccess;
};

const VisibleDevices& visible_devices() {
  static const VisibleDevices devices = [] {
    VisibleDevices result;
    // Not DISTGRAD_CUDA_CHECK: no driver or no GPU is an expected answer here, meaning "0 devices".
    result.error = cudaGetDeviceCount(&result.count);
    if (result.error != cudaSuccess) {
      (void)cudaGetLastError();  // clear it, so later launch checks do not report it
      result.count = 0;
    }
    return result;
  }();
  return devices;
}

// The lazily created stream and cuBLAS handle of one device.
struct DeviceState {
  std::once_flag stream_created;
  cudaStream_t stream = nullptr;
  std::once_flag cublas_created;
  cublasHandle_t cublas = nullptr;
};

DeviceState& device_state(int device) {
  check_device(device);
  // Never deleted; see Note [One stream per device].
  static DeviceState* const states = new DeviceState[visible_devices().count];
  return states[device];
}

}  // namespace

void check_device(int device) {
  const VisibleDevices& devices = visible_devices();
  if (devices.error != cudaSuccess) {
    DISTGRAD_FAIL("CUDA device cuda:", device,
                  " does not exist: 0 CUDA devices visible (cudaGetDeviceCount failed with ",
                  cudaGetErrorName(devices.error), ": ", cudaGetErrorString(devices.error), ")");
  }
  DISTGRAD_CHECK(device >= 0 && device < devices.count, "CUDA device cuda:", device, " does not exist: ", devices.count,
                 " CUDA device(s) visible");
}

cudaStream_t current_stream(int device) {
  DeviceState& state = device_state(device);
  std::call_once(state.stream_created, [&] {
    DeviceGuard guard(device);
    DISTGRAD_CUDA_CHECK(cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking));
  });
  return state.stream;
}

cublasHandle_t cublas_handle(int device) {
  DeviceState& state = device_state(device);
  std::call_once(state.cublas_created, [&] {
    DeviceGuard guard(device);
    DISTGRAD_CUBLAS_CHECK(cublasCreate(&state.cublas));
    DISTGRAD_CUBLAS_CHECK(cublasSetStream(state.cublas, current_stream(device)));
  });
  return state.cublas;
}

DeviceGuard::DeviceGuard(int device) : device_(device), previous_device_(device) {
  DISTGRAD_CUDA_CHECK(cudaGetDevice(&previous_device_));
  if (previous_device_ != device_) {
    DISTGRAD_CUDA_CHECK(cudaSetDevice(device_));
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_device_ != device_) {
    // A destructor must not throw; switching back to a device that was current a moment ago
    // only fails when the context is already broken, which the next checked call reports.
    (void)cudaSetDevice(previous_device_);
  }
}

}  // namespace detail

bool is_built() { return true; }

int device_count() { return detail::visible_devices().count; }

void synchronize(int device) { DISTGRAD_CUDA_CHECK(cudaStreamSynchronize(detail::current_stream(device))); }

}  // namespace distgrad::cuda
