// Storage: a refcounted block of device memory shared by a tensor and all of its views.
//
// Storage is a cheap handle (a shared_ptr). Memory comes from an Allocator, is borrowed from
// the caller with a deleter (`Storage::wrap`, used by transports that receive tensors into their
// own buffers), or is a SharedMemory other processes can map (`Storage::in_shared_memory`,
// `move_to_shared_memory`; Note [Shared tensors] in core/shared_memory.h). The storage also
// carries the version counter that every in-place op bumps, so autograd can detect that a tensor
// saved for backward was modified.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/device.h"

namespace distgrad {

class Allocator;
class SharedMemory;

class Storage {
 public:
  Storage() = default;

  // Allocates `nbytes` on `device`.
  static Storage allocate(size_t nbytes, Device device);
  // Borrows `data`; `deleter(data)` runs when the last tensor viewing it is gone.
  static Storage wrap(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  // The data of `memory`, on the CPU.
  static Storage in_shared_memory(std::shared_ptr<SharedMemory> memory);

  bool defined() const { return impl_ != nullptr; }
  void* data() const { return impl_->data; }
  size_t nbytes() const { return impl_->nbytes; }
  Device device() const { return impl_->device; }
  long use_count() const { return impl_.use_count(); }

  // The shared memory holding the data; null unless the storage is in shared memory.
  const std::shared_ptr<SharedMemory>& shared_memory() const { return impl_->shared_memory; }
  // Moves a CPU storage's data into new shared memory, for every tensor viewing it (nothing when
  // it is there already or on a CUDA device). Not safe while another thread uses the storage.
  void move_to_shared_memory() const;

  // Version counter shared by every view of this storage; bumped by in-place ops.
  uint64_t version() const { return impl_->version.load(std::memory_order_relaxed); }
  void bump_version() const { impl_->version.fetch_add(1, std::memory_order_relaxed); }

 private:
  struct Impl {
    void* data = nullptr;
    size_t nbytes = 0;
    Device device;
    Allocator* allocator = nullptr;               // set when the memory came from an allocator
    std::function<void(void*)> deleter;           // set when the memory was borrowed
    std::shared_ptr<SharedMemory> shared_memory;  // set when the memory is shared memory's data
    std::atomic<uint64_t> version{0};
    ~Impl();
  };
  std::shared_ptr<Impl> impl_;
};

}  // namespace distgrad
