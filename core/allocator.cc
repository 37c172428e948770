#include "core/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/cuda/backend.h"
#include "core/error.h"

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define DISTGRAD_HAVE_VALGRIND_HEADERS 1
#endif

namespace distgrad {
namespace {

// A cached block handed out again holds the values of its last tensor: under valgrind's memcheck
// it is marked undefined, as fresh memory is, so reading it before writing is still reported
// (without valgrind this costs a few instructions).
void* as_fresh(void* data, size_t nbytes) {
#ifdef DISTGRAD_HAVE_VALGRIND_HEADERS
  VALGRIND_MAKE_MEM_UNDEFINED(data, nbytes);
#else
  static_cast<void>(nbytes);
#endif
  return data;
}

// Note [CPU caching allocator]
// A fresh large allocation is served by glibc with new mmap pages, and touching them for the
// first time runs at a fraction of memory bandwidth: a 16M-float add ran at 3 GB/s instead of
// 13 GB/s, and a 512x512 matmul at half of OpenBLAS's speed, because every result landed in
// fresh pages. Medium blocks fare no better: glibc serves them with mmap or trims them from
// the top of its heap, and a training step of an MLP on 128x784 batches spent a fifth of its
// time in page faults. Blocks of at least kCachedBlock bytes are therefore kept when freed, in
// exact size classes (multiples of kCachedBlock below kLargeBlock, of kLargeBlock above), and
// handed out again; large ones are 2 MiB aligned and advised for transparent huge pages. At
// most half of the machine's memory (at least 1 GiB) stays cached; beyond that, freed blocks go
// back to the system. A process so keeps at most what it once held. The cap was 1 GiB until
// few-shot MAML on a conv net (examples/maml_fewshot): an iteration frees the graphs of all its
// tasks (about 300 MB each) at the end of its backward pass and allocates them again in the
// next one; with 1 GiB a third of its time went to the kernel zeroing fresh pages, and with a
// quarter of 23 GB a meta-batch of 32 in one process took 23.4 s per iteration against 18.7 s
// with half. Cached memory lives until release_cached_memory() or exit.
//
// Note [Small CPU blocks]
// Blocks below kCachedBlock are kept per thread, in power-of-two size classes from 64 bytes, up
// to kMaxSmallCachedBytes per thread: a free puts the block on the freeing thread's list, an
// allocation takes from its own (blocks may so move between threads; glibc frees them wherever).
// Small tensors come and go by the thousand in a MAML step, and glibc's aligned_alloc served
// each one through _int_memalign, whose requests above 1 KiB also consolidate the fast bins:
// malloc and free were a fifth of a local MAML iteration. A thread's list goes back to the
// system when the thread ends; a block freed after that (by another thread-local object's
// destructor) goes straight to free().
constexpr size_t kAlignment = 64;
constexpr size_t kMaxSmallCachedBytes = size_t{4} << 20;
constexpr size_t kCachedBlock = size_t{64} << 10;
constexpr size_t kLargeBlock = size_t{1} << 20;
constexpr size_t kHugePage = size_t{2} << 20;

// How many bytes of freed blocks of at least kCachedBlock stay cached (Note [CPU caching allocator]).
size_t max_cached_bytes() {
  static const size_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    const size_t half =
        pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) / 2 : 0;
    return std::max(half, size_t{1} << 30);
  }();
  return bytes;
}

void* allocate_aligned(size_t nbytes, size_t alignment) {
  const size_t rounded = (nbytes + alignment - 1) / alignment * alignment;
  void* data = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  DISTGRAD_CHECK(data != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
  return data;
}

// This thread's freed small blocks (Note [Small CPU blocks]).
class SmallBlockCache {
 public:
  static constexpr size_t kClasses = 11;  // 64 B, 128 B, ..., 64 KiB

  SmallBlockCache();
  ~SmallBlockCache();

  // The size class of a block of `nbytes` (below kCachedBlock).
  static size_t size_class(size_t nbytes) {
    size_t index = 0;
    while ((size_t{64} << index) < nbytes) ++index;
    return index;
  }
  static size_t class_bytes(size_t index) { return size_t{64} << index; }

  void* allocate(size_t index) {
    std::vector<void*>& blocks = free_[index];
    if (blocks.empty()) return allocate_aligned(class_bytes(index), kAlignment);
    void* data = blocks.back();
    blocks.pop_back();
    set_cached_bytes(cached_bytes() - class_bytes(index));
    return as_fresh(data, class_bytes(index));
  }

  void deallocate(void* data, size_t index) {
    if (cached_bytes() + class_bytes(index) > kMaxSmallCachedBytes) {
      std::free(data);
      return;
    }
    free_[index].push_back(data);
    set_cached_bytes(cached_bytes() + class_bytes(index));
  }

  void release() {
    for (std::vector<void*>& blocks : free_) {
      for (void* data : blocks) std::free(data);
      blocks.clear();
    }
    set_cached_bytes(0);
  }

  // Written by the owning thread only; read by any (cached_cpu_bytes_of_every_thread).
  size_t cached_bytes() const { return cached_bytes_.load(std::memory_order_relaxed); }

 private:
  void set_cached_bytes(size_t bytes) { cached_bytes_.store(bytes, std::memory_order_relaxed); }

  std::vector<void*> free_[kClasses];
  std::atomic<size_t> cached_bytes_{0};
};

// Every live thread's small-block cache, for cached_cpu_bytes_of_every_thread. Never destroyed:
// threads may end after main returns.
struct SmallBlockCaches {
  absl::Mutex mutex;
  std::vector<const SmallBlockCache*> caches ABSL_GUARDED_BY(mutex);
};
SmallBlockCaches& small_block_caches() {
  static auto* caches = new SmallBlockCaches;
  return *caches;
}

SmallBlockCache::SmallBlockCache() {
  SmallBlockCaches& registry = small_block_caches();
  absl::MutexLock lock(&registry.mutex);
  registry.caches.push_back(this);
}

// Set by the cache's destructor; trivially destructible, so readable until the thread ends.
thread_local bool small_block_cache_destroyed = false;

SmallBlockCache::~SmallBlockCache() {
  small_block_cache_destroyed = true;
  release();
  SmallBlockCaches& registry = small_block_caches();
  absl::MutexLock lock(&registry.mutex);
  std::erase(registry.caches, this);
}

// This thread's cache, or null once it is destroyed.
SmallBlockCache* small_block_cache() {
  if (small_block_cache_destroyed) return nullptr;
  thread_local SmallBlockCache cache;
  return &cache;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes < kCachedBlock) {
      SmallBlockCache* cache = small_block_cache();
      const size_t index = SmallBlockCache::size_class(nbytes);
      return cache != nullptr ? cache->allocate(index)
                              : allocate_aligned(SmallBlockCache::class_bytes(index), kAlignment);
    }
    const size_t rounded = size_class(nbytes);
    {
      absl::MutexLock lock(&free_blocks_mutex_);
      auto it = free_blocks_.find(rounded);
      if (it != free_blocks_.end() && !it->second.empty()) {
        void* data = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
        return as_fresh(data, rounded);
      }
    }
    if (rounded < kLargeBlock) return allocate_aligned(rounded, kAlignment);
    void* data = allocate_aligned(rounded, kHugePage);
    madvise(data, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing
    return data;
  }

  void deallocate(void* data, size_t nbytes) override {
    if (nbytes < kCachedBlock) {
      SmallBlockCache* cache = small_block_cache();
      if (cache != nullptr) {
        cache->deallocate(data, SmallBlockCache::size_class(nbytes));
      } else {
        std::free(data);
      }
      return;
    }
    {
      const size_t rounded = size_class(nbytes);
      absl::MutexLock lock(&free_blocks_mutex_);
      if (cached_bytes_ + rounded <= max_cached_bytes()) {
        free_blocks_[rounded].push_back(data);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(data);
  }

  void release_cached() {
    absl::MutexLock lock(&free_blocks_mutex_);
    for (auto& [size, blocks] : free_blocks_) {
      for (void* data : blocks) std::free(data);
    }
    free_blocks_.clear();
    cached_bytes_ = 0;
  }

  size_t cached_bytes() {
    absl::MutexLock lock(&free_blocks_mutex_);
    return cached_bytes_;
  }

 private:
  static size_t size_class(size_t nbytes) {
    const size_t unit = nbytes < kLargeBlock ? kCachedBlock : kLargeBlock;
    return (nbytes + unit - 1) / unit * unit;
  }

  absl::Mutex free_blocks_mutex_;
  absl::flat_hash_map<size_t, std::vector<void*>> free_blocks_ ABSL_GUARDED_BY(free_blocks_mutex_);
  size_t cached_bytes_ ABSL_GUARDED_BY(free_blocks_mutex_) = 0;
};

// Never destroyed: tensors held by static objects may be freed after main returns.
CpuAllocator& cpu_allocator() {
  static auto* allocator = new CpuAllocator;
  return *allocator;
}

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda::detail::allocator(device.index);
}

void release_cached_cpu_memory() {
  cpu_allocator().release_cached();
  if (SmallBlockCache* cache = small_block_cache()) cache->release();
}

size_t cached_cpu_bytes() {
  const SmallBlockCache* cache = small_block_cache();
  return cpu_allocator().cached_bytes() + (cache != nullptr ? cache->cached_bytes() : 0);
}

size_t cached_cpu_bytes_of_every_thread() {
  size_t bytes = cpu_allocator().cached_bytes();
  SmallBlockCaches& registry = small_block_caches();
  absl::MutexLock lock(&registry.mutex);
  for (const SmallBlockCache* cache : registry.caches) bytes += cache->cached_bytes();
  return bytes;
}

}  // namespace distgrad
