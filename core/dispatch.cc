#include "core/cuda/backend.h"
#include "core/kernels.h"

namespace distgrad::kernels {

const DeviceKernels& kernels_for(Device device) {
  if (device.is_cpu()) return cpu_kernels();
  return cuda::detail::kernels();
}

}  // namespace distgrad::kernels
