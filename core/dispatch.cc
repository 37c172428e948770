#include "core/cuda/backend.h"
#include "core/kernels.h"

namespace distgrad::kernels {

const DeviceKernels& kernels_for(Device device) {
  if (device.is_cpu()) return cpu_kernels();
  return cuda::detail::kernels();
}

}  // namespace distgrad::kernels

namespace distgrad {

void fail_on_storage_dtype(DType dtype, const char* op) {
  DISTGRAD_FAIL(op, ": ", dtype_name(dtype), " tensors are for storage: they are made, copied, viewed, converted, ",
                "saved, sent and all-reduced, not computed on; convert with distgrad::to(t, kFloat32) first");
}

}  // namespace distgrad
