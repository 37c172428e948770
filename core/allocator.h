// Allocators hand out raw device memory for Storage.
//
// The CPU allocator returns 64-byte aligned blocks. The CUDA allocator (core/cuda/) caches
// freed blocks per device; see Note [CUDA caching allocator].
#pragma once

#include <cstddef>

#include "core/device.h"

namespace distgrad {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns at least `nbytes` bytes (a valid pointer even for 0 bytes); throws on failure.
  virtual void* allocate(size_t nbytes) = 0;
  // Returns a block obtained from allocate() with the same `nbytes`.
  virtual void deallocate(void* data, size_t nbytes) = 0;
};

// The allocator for `device`; throws when distgrad was built without CUDA or the device is absent.
Allocator& allocator_for(Device device);

}  // namespace distgrad
