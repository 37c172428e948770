#include "transport/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/copy.h"
#include "core/error.h"
#include "trace/trace.h"

namespace distgrad::transport::shm {
namespace {

// The control page before a segment's data: its first word is the ticket (Note [Shared-memory path]).
constexpr size_t kControlBytes = 4096;
// A receiver's tensor views the segment: the ticket with this bit set.
constexpr uint64_t kViewedBit = uint64_t{1} << 63;
// New segments hold at least this many bytes (rounded up to a power of two above it).
constexpr size_t kMinSegmentBytes = size_t{1} << 16;

std::atomic_ref<uint64_t> ticket_word(void* base) { return std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(base)); }

std::string read_first_line(const char* path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

std::string read_link(const char* path) {
  char target[256];
  const ssize_t size = ::readlink(path, target, sizeof target - 1);
  return size > 0 ? std::string(target, static_cast<size_t>(size)) : std::string();
}

std::string errno_text() { return std::strerror(errno); }

// Every segment is a memfd of this name, sealed with these seals once sized (Note [Only our own
// segments]).
constexpr char kSegmentName[] = "distgrad-segment";
constexpr int kSegmentSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// Opens fd `fd` of process `pid` for reading and writing, when it is one of distgrad's segments,
// of inode `inode` and `file_bytes` long when non-zero; -1 with `why` set otherwise. It is
// verified through a read-only descriptor first: nothing else is ever opened for writing.
int open_peer_memfd(int64_t pid, int32_t fd, uint64_t inode, uint64_t file_bytes, std::string* why) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int readonly = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (readonly < 0) {
    *why = "cannot open " + path + ": " + errno_text();
    return -1;
  }
  const std::string self_path = "/proc/self/fd/" + std::to_string(readonly);
  struct stat info {};
  const bool is_file = ::fstat(readonly, &info) == 0 && S_ISREG(info.st_mode);
  const int seals = is_file ? ::fcntl(readonly, F_GET_SEALS) : -1;
  const std::string name = read_link(self_path.c_str());
  const std::string expected_name = std::string("/memfd:") + kSegmentName + " (deleted)";
  if (!is_file || seals != kSegmentSeals || name != expected_name) {
    *why = path + " is not a distgrad segment (" + (name.empty() ? std::string("not a file") : name) +
           (seals == kSegmentSeals ? "" : ", not sealed as one") + ")";
    ::close(readonly);
    return -1;
  }
  if (static_cast<uint64_t>(info.st_ino) != inode ||
      (file_bytes != 0 && static_cast<uint64_t>(info.st_size) != file_bytes)) {
    *why = path + " is not the segment named (expected inode " + std::to_string(inode) + " of " +
           std::to_string(file_bytes) + " bytes, found inode " + std::to_string(info.st_ino) + " of " +
           std::to_string(info.st_size) + " bytes)";
    ::close(readonly);
    return -1;
  }
  const int opened = ::open(self_path.c_str(), O_RDWR | O_CLOEXEC);  // the same file, verified
  if (opened < 0) *why = "cannot open " + path + " for writing: " + errno_text();
  ::close(readonly);
  return opened;
}

}  // namespace

std::string host_identity() {
  return read_first_line("/proc/sys/kernel/random/boot_id") + "/" + read_link("/proc/self/ns/pid") + "/" +
         read_link("/proc/self/ns/net") + "/uid " + std::to_string(::getuid());
}

// ---------------------------------------------------------------------------------------------

Segment::Segment(size_t data_bytes) : data_bytes_(data_bytes), file_bytes_(kControlBytes + data_bytes) {
  fd_ = ::memfd_create(kSegmentName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  DISTGRAD_CHECK(fd_ >= 0, "rpc: cannot create a shared-memory segment (memfd_create): ", errno_text());
  struct stat info {};
  if (::ftruncate(fd_, static_cast<off_t>(file_bytes_)) != 0 || ::fcntl(fd_, F_ADD_SEALS, kSegmentSeals) != 0 ||
      ::fstat(fd_, &info) != 0) {
    const std::string why = errno_text();
    ::close(fd_);
    DISTGRAD_FAIL("rpc: cannot size a shared-memory segment of ", file_bytes_, " bytes: ", why);
  }
  inode_ = static_cast<uint64_t>(info.st_ino);
  base_ = ::mmap(nullptr, file_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (base_ == MAP_FAILED) {
    const std::string why = errno_text();
    ::close(fd_);
    DISTGRAD_FAIL("rpc: cannot map a shared-memory segment of ", file_bytes_, " bytes: ", why);
  }
}

Segment::~Segment() {
  ::munmap(base_, file_bytes_);
  ::close(fd_);
}

uint8_t* Segment::data() const { return static_cast<uint8_t*>(base_) + kControlBytes; }

bool Segment::is_free() const { return ticket_word(base_).load(std::memory_order_acquire) == 0; }

bool Segment::try_claim(uint64_t ticket) {
  uint64_t free = 0;
  return ticket_word(base_).compare_exchange_strong(free, ticket, std::memory_order_acq_rel);
}

SegmentRef Segment::ref(uint64_t ticket) const { return {fd_, inode_, file_bytes_, ticket}; }

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

std::unique_ptr<MappedSegment> MappedSegment::open(int64_t pid, const SegmentRef& ref, std::string* why) {
  if (ref.file_bytes < kControlBytes) {
    *why = "a segment of " + std::to_string(ref.file_bytes) + " bytes is smaller than its control page";
    return nullptr;
  }
  const int fd = open_peer_memfd(pid, ref.fd, ref.inode, ref.file_bytes, why);
  if (fd < 0) return nullptr;
  void* base = ::mmap(nullptr, ref.file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const std::string map_error = base == MAP_FAILED ? errno_text() : "";
  ::close(fd);
  if (base == MAP_FAILED) {
    *why = "cannot map the segment: " + map_error;
    return nullptr;
  }
  return std::unique_ptr<MappedSegment>(new MappedSegment(base, ref.file_bytes));
}

MappedSegment::~MappedSegment() { ::munmap(base_, file_bytes_); }

uint8_t* MappedSegment::data() const { return static_cast<uint8_t*>(base_) + kControlBytes; }

// ---------------------------------------------------------------------------------------------

bool PeerSegments::can_open(int32_t probe_fd, uint64_t probe_inode) const {
  std::string why;
  const int fd = open_peer_memfd(pid_, probe_fd, probe_inode, 0, &why);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

Tensor PeerSegments::view(const SegmentRef& ref, const Shape& sizes, DType dtype) {
  size_t nbytes = element_size(dtype);
  for (int64_t size : sizes) nbytes *= static_cast<size_t>(size);
  if (ref.file_bytes < kControlBytes || ref.file_bytes - kControlBytes < nbytes) {
    throw SegmentError("a shared-memory segment of " + std::to_string(ref.file_bytes) + " bytes cannot hold " +
                       std::to_string(nbytes) + " bytes of tensor data");
  }
  if (ref.ticket == 0 || (ref.ticket & kViewedBit) != 0) {
    throw SegmentError("invalid shared-memory ticket " + std::to_string(ref.ticket));
  }
  std::shared_ptr<MappedSegment> mapping;
  {
    std::lock_guard<std::mutex> lock(mappings_mutex_);
    std::shared_ptr<MappedSegment>& slot = mappings_[{ref.fd, ref.inode}];
    if (!slot) {
      std::string why;
      slot = MappedSegment::open(pid_, ref, &why);
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
  if (!ticket_word(mapping->base())
           .compare_exchange_strong(expected, ref.ticket | kViewedBit, std::memory_order_acq_rel)) {
    throw SegmentError("the shared-memory segment holds message " + std::to_string(expected & ~kViewedBit) +
                       ((expected & kViewedBit) != 0 ? " (already received)" : "") + ", not message " +
                       std::to_string(ref.ticket));
  }
  void* data = mapping->data();
  Storage storage = Storage::wrap(data, nbytes, Device::cpu(), [mapping, ticket = ref.ticket](void*) {
    uint64_t viewed = ticket | kViewedBit;
    ticket_word(mapping->base()).compare_exchange_strong(viewed, 0, std::memory_order_acq_rel);
  });
  return Tensor(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype);
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
