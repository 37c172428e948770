#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "core/cuda/backend.h"
#include "core/error.h"

namespace distgrad {
namespace {

// 64-byte aligned host memory (a cache line, and enough for AVX-512 loads).
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    constexpr size_t kAlignment = 64;
    const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* data = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    DISTGRAD_CHECK(data != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    return data;
  }
  void deallocate(void* data, size_t) override { std::free(data); }
};

}  // namespace

Allocator& allocator_for(Device device) {
  static CpuAllocator cpu_allocator;
  if (device.is_cpu()) return cpu_allocator;
  return cuda::detail::allocator(device.index);
}

}  // namespace distgrad
