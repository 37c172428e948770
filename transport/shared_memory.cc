#include "transport/shared_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cstring>

#include "core/copy.h"
#include "core/error.h"
#include "trace/trace.h"

namespace distgrad::transport::shm {
namespace {

// A receiver's tensor views the segment: the ticket with this bit set.
constexpr uint64_t kViewedBit = uint64_t{1} << 63;
// New segments hold at least this many bytes (rounded up to a power of two above it).
constexpr size_t kMinSegmentBytes = size_t{1} << 16;

std::atomic_ref<uint64_t> ticket_word(void* control) {
  return std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(control));
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Segment::Segment(size_t data_bytes) : memory_(SharedMemory::create(data_bytes, SharedMemory::Kind::kSegment)) {}

bool Segment::is_free() const { return ticket_word(memory_->control()).load(std::memory_order_acquire) == 0; }

bool Segment::try_claim(uint64_t ticket) {
  uint64_t free = 0;
  return ticket_word(memory_->control()).compare_exchange_strong(free, ticket, std::memory_order_acq_rel);
}

SegmentRef Segment::ref(uint64_t ticket) const {
  return {.fd = memory_->fd(), .inode = memory_->inode(), .file_bytes = memory_->file_bytes(), .ticket = ticket};
}

std::shared_ptr<SharedMemory> open_segment(int64_t pid, const SegmentRef& ref, std::string* why) {
  return SharedMemory::open(pid, ref.fd, ref.inode, ref.file_bytes, SharedMemory::Kind::kSegment, why);
}

// ---------------------------------------------------------------------------------------------

std::optional<SegmentRef> SendPool::put(const Tensor& tensor) {
  const size_t nbytes = tensor.nbytes();
  Segment* segment = nullptr;
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(segments_mutex_);
    ticket = next_ticket_++;
    // The smallest free segment that fits. Only this pool occupies its segments, and it holds the
    // lock: a free segment stays free until claimed below.
    for (const std::unique_ptr<Segment>& candidate : segments_) {
      if (candidate->data_bytes() >= nbytes && candidate->is_free() &&
          (segment == nullptr || candidate->data_bytes() < segment->data_bytes())) {
        segment = candidate.get();
      }
    }
    if (segment != nullptr) segment->try_claim(ticket);
    if (segment == nullptr) {
      const size_t bytes = std::bit_ceil(std::max(nbytes, kMinSegmentBytes));
      if (total_bytes_ + bytes > max_bytes_) return std::nullopt;
      segments_.push_back(std::make_unique<Segment>(bytes));
      total_bytes_ += bytes;
      segment = segments_.back().get();
      segment->try_claim(ticket);
    }
  }
  trace::Span span("transport", "shared-memory copy");
  span.arg("bytes", static_cast<int64_t>(nbytes));
  if (tensor.is_contiguous() && tensor.device().is_cpu()) {
    std::memcpy(segment->data(), tensor.data_ptr(), nbytes);
  } else {
    Tensor target(Storage::wrap(segment->data(), nbytes, Device::cpu(), [](void*) {}), tensor.sizes(),
                  contiguous_strides(tensor.sizes()), 0, tensor.dtype());
    untracked::copy_(target, tensor);
  }
  return segment->ref(ticket);
}

std::pair<size_t, size_t> SendPool::size() const {
  std::lock_guard<std::mutex> lock(segments_mutex_);
  return {segments_.size(), total_bytes_};
}

// ---------------------------------------------------------------------------------------------

bool PeerSegments::can_open(int32_t probe_fd, uint64_t probe_inode) const {
  return SharedMemory::can_open(pid_, probe_fd, probe_inode, SharedMemory::Kind::kSegment);
}

Tensor PeerSegments::view(const SegmentRef& ref, const Shape& sizes, DType dtype) {
  size_t nbytes = element_size(dtype);
  for (int64_t size : sizes) nbytes *= static_cast<size_t>(size);
  const uint64_t data_bytes =
      ref.file_bytes < SharedMemory::kControlBytes ? 0 : ref.file_bytes - SharedMemory::kControlBytes;
  if (ref.file_bytes < SharedMemory::kControlBytes || ref.byte_offset > data_bytes ||
      data_bytes - ref.byte_offset < nbytes) {
    throw SegmentError("shared memory of " + std::to_string(ref.file_bytes) + " bytes cannot hold " +
                       std::to_string(nbytes) + " bytes of tensor data at offset " + std::to_string(ref.byte_offset));
  }
  return ref.tensor_storage ? view_tensor_storage(ref, sizes, dtype) : view_segment(ref, sizes, dtype, nbytes);
}

Tensor PeerSegments::view_segment(const SegmentRef& ref, const Shape& sizes, DType dtype, size_t nbytes) {
  if (ref.ticket == 0 || (ref.ticket & kViewedBit) != 0 || ref.byte_offset != 0) {
    throw SegmentError("invalid shared-memory ticket " + std::to_string(ref.ticket) + " at offset " +
                       std::to_string(ref.byte_offset));
  }
  std::shared_ptr<SharedMemory> mapping;
  {
    std::lock_guard<std::mutex> lock(mappings_mutex_);
    std::shared_ptr<SharedMemory>& slot = mappings_[{ref.fd, ref.inode}];
    if (!slot) {
      std::string why;
      slot = open_segment(pid_, ref, &why);
      if (!slot) {
        mappings_.erase({ref.fd, ref.inode});
        throw SegmentError("the sender's shared-memory segment: " + why);
      }
    } else if (slot->file_bytes() != ref.file_bytes) {
      throw SegmentError("the shared-memory segment of inode " + std::to_string(ref.inode) + " has " +
                         std::to_string(slot->file_bytes()) + " bytes, the frame says " +
                         std::to_string(ref.file_bytes));
    }
    mapping = slot;
  }
  uint64_t expected = ref.ticket;
  if (!ticket_word(mapping->control())
           .compare_exchange_strong(expected, ref.ticket | kViewedBit, std::memory_order_acq_rel)) {
    throw SegmentError("the shared-memory segment holds message " + std::to_string(expected & ~kViewedBit) +
                       ((expected & kViewedBit) != 0 ? " (already received)" : "") + ", not message " +
                       std::to_string(ref.ticket));
  }
  void* data = mapping->data();
  Storage storage = Storage::wrap(data, nbytes, Device::cpu(), [mapping, ticket = ref.ticket](void*) {
    uint64_t viewed = ticket | kViewedBit;
    ticket_word(mapping->control()).compare_exchange_strong(viewed, 0, std::memory_order_acq_rel);
  });
  return Tensor(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype);
}

Tensor PeerSegments::view_tensor_storage(const SegmentRef& ref, const Shape& sizes, DType dtype) const {
  if (ref.byte_offset % element_size(dtype) != 0) {
    throw SegmentError(std::string("a ") + dtype_name(dtype) + " tensor cannot start at byte " +
                       std::to_string(ref.byte_offset) + " of its shared memory");
  }
  std::shared_ptr<SharedMemory> memory = SharedMemory::find(ref.inode);
  if (memory != nullptr && memory->file_bytes() != ref.file_bytes) {
    throw SegmentError("the shared memory of inode " + std::to_string(ref.inode) + " has " +
                       std::to_string(memory->file_bytes()) + " bytes, the frame says " +
                       std::to_string(ref.file_bytes));
  }
  if (memory == nullptr) {
    std::string why;
    memory = SharedMemory::open(pid_, ref.fd, ref.inode, ref.file_bytes, SharedMemory::Kind::kTensorStorage, &why);
    if (memory == nullptr) throw SegmentError("the sender's shared tensor: " + why);
  }
  memory->release_message();
  const auto offset = static_cast<int64_t>(ref.byte_offset / element_size(dtype));
  return Tensor(Storage::in_shared_memory(std::move(memory)), sizes, contiguous_strides(sizes), offset, dtype);
}

// ---------------------------------------------------------------------------------------------

struct Links::Peer {
  Peer(int64_t pid, SegmentRef probe, size_t pool_bytes) : probe(probe), pool(pool_bytes), segments(pid) {}
  const SegmentRef probe;
  enum : int { kUnknown, kYes, kNo };
  std::atomic<int> readable{kUnknown};  // whether this process can open the peer's segments
  std::atomic<bool> read_by{false};     // what the peer said about this process's segments
  SendPool pool;
  PeerSegments segments;
};

Links::Links(size_t threshold, size_t pool_bytes)
    : threshold_(std::max<size_t>(threshold, 1)), pool_bytes_(pool_bytes) {}

Links::~Links() = default;

std::string Links::card() const {
  const SegmentRef probe = probe_.ref();
  return std::to_string(::getpid()) + " " + std::to_string(probe.fd) + " " + std::to_string(probe.inode);
}

void Links::add_peer(int rank, const std::string& card) {
  int64_t pid = 0;
  int32_t fd = -1;
  uint64_t inode = 0;
  char extra = 0;
  DISTGRAD_CHECK(std::sscanf(card.c_str(), "%ld %d %lu %c", &pid, &fd, &inode, &extra) == 3 && pid > 0, "rpc: worker ",
                 rank, "'s shared-memory card \"", card, "\" is not \"PID FD INODE\"");
  auto peer = std::make_shared<Peer>(pid, SegmentRef{fd, inode, 0, 0}, pool_bytes_);
  std::lock_guard<std::mutex> lock(peers_mutex_);
  if (static_cast<size_t>(rank) >= peers_.size()) peers_.resize(rank + 1);
  peers_[rank].swap(peer);  // a replaced link is freed outside the lock (`peer` ends after it)
}

std::shared_ptr<Links::Peer> Links::find(int rank) const {
  std::lock_guard<std::mutex> lock(peers_mutex_);
  return rank >= 0 && static_cast<size_t>(rank) < peers_.size() ? peers_[rank] : nullptr;
}

bool Links::reads_from(int rank) {
  const std::shared_ptr<Peer> peer = find(rank);
  if (peer == nullptr) return false;
  int readable = peer->readable.load(std::memory_order_acquire);
  if (readable == Peer::kUnknown) {
    readable = peer->segments.can_open(peer->probe.fd, peer->probe.inode) ? Peer::kYes : Peer::kNo;
    peer->readable.store(readable, std::memory_order_release);
  }
  return readable == Peer::kYes;
}

bool Links::read_by(int rank) const {
  const std::shared_ptr<Peer> peer = find(rank);
  return peer != nullptr && peer->read_by.load(std::memory_order_acquire);
}

void Links::set_read_by(int rank, bool reads) {
  if (const std::shared_ptr<Peer> peer = find(rank)) peer->read_by.store(reads, std::memory_order_release);
}

std::optional<SegmentRef> Links::put(int rank, const Tensor& tensor) {
  const size_t nbytes = tensor.nbytes();
  const std::shared_ptr<SharedMemory>& memory = tensor.storage().shared_memory();
  if (memory != nullptr && tensor.is_contiguous() && find(rank) != nullptr) {
    memory->pin_for_message();
    counters_.referenced_tensors.fetch_add(1, std::memory_order_relaxed);
    counters_.referenced_bytes.fetch_add(nbytes, std::memory_order_relaxed);
    const auto byte_offset = static_cast<uint64_t>(tensor.offset()) * tensor.element_size();
    return SegmentRef{.fd = memory->fd(),
                      .inode = memory->inode(),
                      .file_bytes = memory->file_bytes(),
                      .tensor_storage = true,
                      .byte_offset = byte_offset};
  }
  const std::shared_ptr<Peer> peer = nbytes < threshold_ ? nullptr : find(rank);
  if (peer == nullptr) return std::nullopt;
  std::optional<SegmentRef> ref = peer->pool.put(tensor);
  if (ref) {
    counters_.shared_tensors.fetch_add(1, std::memory_order_relaxed);
    counters_.shared_bytes.fetch_add(nbytes, std::memory_order_relaxed);
  }
  return ref;
}

Tensor Links::view(int rank, const SegmentRef& ref, const Shape& sizes, DType dtype) {
  const std::shared_ptr<Peer> peer = find(rank);
  if (peer == nullptr) {
    throw SegmentError("worker " + std::to_string(rank) + " is not on this host (or has shared memory off)");
  }
  return peer->segments.view(ref, sizes, dtype);
}

std::pair<size_t, size_t> Links::pool_size() const {
  std::pair<size_t, size_t> total{0, 0};
  std::lock_guard<std::mutex> lock(peers_mutex_);
  for (const std::shared_ptr<Peer>& peer : peers_) {
    if (!peer) continue;
    const auto [segments, bytes] = peer->pool.size();
    total.first += segments;
    total.second += bytes;
  }
  return total;
}

}  // namespace distgrad::transport::shm
