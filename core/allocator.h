// Allocators hand out raw device memory for Storage.
//
// The CPU allocator returns 64-byte aligned blocks and keeps freed blocks for reuse: those of
// 64 KiB and more in one cache (Note [CPU caching allocator] in allocator.cc), smaller ones per
// thread (Note [Small CPU blocks]). The CUDA allocator (core/cuda/)
// caches freed blocks per device (Note [CUDA caching allocator]).
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

// Returns the CPU allocator's cached free blocks to the system (the small ones of this thread).
void release_cached_cpu_memory();
// Bytes of freed CPU blocks currently kept for reuse (the small ones: this thread's).
size_t cached_cpu_bytes();
// Bytes of freed CPU blocks currently kept for reuse, every thread's small ones included: what a
// process's heap holds beyond its live tensors (each thread keeps up to 4 MiB of small blocks).
size_t cached_cpu_bytes_of_every_thread();

}  // namespace distgrad
