#include "core/cuda/backend.h"
#include "core/kernels.h"

namespace distgrad::kernels {

const DeviceKernels& kernels_for(Device device) {
  if (device.is_cpu()) return cpu_kernels();
  return cuda::detail::kernels();
}

}  // namespace distgrad::kernels

namespace distgrad {

void fail_on_half_kernel(DType dtype, const char* op) {
  DISTGRAD_FAIL(op, ": this kernel has no ", dtype_name(dtype),
                " form (ops compute it in float32 and round the result); convert with distgrad::to(t, kFloat32)");
}

}  // namespace distgrad
