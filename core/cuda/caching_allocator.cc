// The CUDA caching allocator: one Allocator per device that keeps freed blocks for reuse
// instead of handing them back to cudaFree.
//
// Note [CUDA caching allocator]
// cudaMalloc and cudaFree are slow (cudaFree also waits for the whole device), and a training
// step allocates and frees the same sizes over and over. So a freed block is not returned to
// CUDA: it goes on the free list for its rounded size, and the next allocation of that size
// takes it back. Sizes are rounded to keep the lists few and reusable: below 1 MiB up to a
// multiple of 512 B, from 1 MiB up to a multiple of 2 MiB.
//
// Reuse needs no events because of Note [One stream per device] (core/cuda/runtime.h): a
// block whose last tensor died on the host may still be read or written by work queued
// earlier on the device's stream, but whoever gets the block next can only queue work on that
// same stream, after the earlier work, so the stream orders the old use before the new one.
// The host never touches device memory itself, and the copies of copy_bytes that involve the
// host or a second device wait for their streams before returning, so no work outside the
// device's stream still uses a block once its tensor is gone.
//
// When cudaMalloc runs out of memory, the allocator waits for the device's stream, frees every
// cached block of that device and retries once; a second failure throws an Error with the
// requested size. Allocators are never destroyed: tensors may outlive static destructors.
#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/allocator.h"
#include "core/cuda.h"
#include "core/cuda/backend.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace distgrad::cuda::detail {
namespace {

constexpr size_t kSmallBlockRounding = 512;
constexpr size_t kLargeBlockThreshold = size_t{1} << 20;  // 1 MiB
constexpr size_t kLargeBlockRounding = size_t{2} << 20;   // 2 MiB

size_t round_up(size_t nbytes, size_t multiple) { return (nbytes + multiple - 1) / multiple * multiple; }

// The size of the block that serves a request of `nbytes`; at least one small block, so that
// 0-byte requests still get a valid pointer.
size_t block_size(size_t nbytes) {
  if (nbytes < kLargeBlockThreshold) {
    return nbytes == 0 ? kSmallBlockRounding : round_up(nbytes, kSmallBlockRounding);
  }
  return round_up(nbytes, kLargeBlockRounding);
}

// Caches one device's freed blocks in per-size free lists; see Note [CUDA caching allocator].
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    const size_t size = block_size(nbytes);
    absl::MutexLock lock(&free_blocks_mutex_);
    auto cached = free_blocks_.find(size);
    if (cached != free_blocks_.end() && !cached->second.empty()) {
      void* block = cached->second.back();
      cached->second.pop_back();
      cached_bytes_ -= size;
      return block;
    }
    DeviceGuard guard(device_);
    void* block = try_cuda_malloc(size);
    if (block == nullptr) {
      release_cached_blocks();
      block = try_cuda_malloc(size);
    }
    DISTGRAD_CHECK(block != nullptr, "CUDA out of memory on cuda:", device_, ": cannot allocate ", nbytes,
                   " bytes (a block of ", size, " bytes), even after freeing all cached blocks");
    return block;
  }

  void deallocate(void* data, size_t nbytes) override {
    const size_t size = block_size(nbytes);
    absl::MutexLock lock(&free_blocks_mutex_);
    free_blocks_[size].push_back(data);
    cached_bytes_ += size;
  }

 private:
  // A new device block of `size` bytes, or nullptr when the device is out of memory.
  void* try_cuda_malloc(size_t size) {
    void* block = nullptr;
    const cudaError_t error = cudaMalloc(&block, size);
    if (error == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // out of memory is not sticky; clear it before retrying
      return nullptr;
    }
    if (error != cudaSuccess) {
      throw_cuda_error(error, "cudaMalloc(&block, size)", __FILE__, __LINE__);
    }
    return block;
  }

  // Hands every cached block back to CUDA once the work that may still use them is done.
  void release_cached_blocks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(free_blocks_mutex_) {
    if (cached_bytes_ == 0) {
      return;
    }
    DISTGRAD_CUDA_CHECK(cudaStreamSynchronize(current_stream(device_)));
    for (auto& [size, blocks] : free_blocks_) {
      for (void* block : blocks) {
        DISTGRAD_CUDA_CHECK(cudaFree(block));
      }
    }
    free_blocks_.clear();
    cached_bytes_ = 0;
  }

  const int device_;
  absl::Mutex free_blocks_mutex_;
  // Freed blocks by their rounded size, ready for reuse.
  absl::flat_hash_map<size_t, std::vector<void*>> free_blocks_ ABSL_GUARDED_BY(free_blocks_mutex_);
  size_t cached_bytes_ ABSL_GUARDED_BY(free_blocks_mutex_) = 0;
};

}  // namespace

Allocator& allocator(int device) {
  check_device(device);
  // One allocator per visible device, never destroyed; see Note [CUDA caching allocator].
  static const std::vector<std::unique_ptr<CachingAllocator>>* const allocators = [] {
    auto* per_device = new std::vector<std::unique_ptr<CachingAllocator>>();
    for (int device = 0; device < device_count(); ++device) {
      per_device->push_back(std::make_unique<CachingAllocator>(device));
    }
    return per_device;
  }();
  return *(*allocators)[device];
}

}  // namespace distgrad::cuda::detail
