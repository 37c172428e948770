// The CUDA entry points for builds without CUDA (compiled instead of the rest of core/cuda/).
//
// The queries in core/cuda.h answer "no CUDA" so that tests can skip cleanly; everything that
// would need a device throws an Error that says how to get one.
#include <cstddef>
#include <string>

#include "core/cuda.h"
#include "core/cuda/backend.h"
#include "core/error.h"

namespace distgrad::cuda {
namespace {

[[noreturn]] void fail_without_cuda(const std::string& what) {
  DISTGRAD_FAIL(what,
                ": distgrad was built without CUDA support; reconfigure with -DDISTGRAD_WITH_CUDA=ON on a machine "
                "with the CUDA toolkit (nvcc) to use CUDA devices");
}

}  // namespace

bool is_built() { return false; }

int device_count() { return 0; }

void synchronize(int device) { fail_without_cuda("cuda::synchronize(" + std::to_string(device) + ")"); }

namespace detail {

const kernels::DeviceKernels& kernels() { fail_without_cuda("CUDA kernels"); }

Allocator& allocator(int device) { fail_without_cuda("allocating memory on cuda:" + std::to_string(device)); }

void copy_bytes(void*, Device dst_device, const void*, Device src_device, size_t) {
  fail_without_cuda("copying from " + src_device.str() + " to " + dst_device.str());
}

}  // namespace detail
}  // namespace distgrad::cuda
