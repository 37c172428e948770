#include "core/shared_memory.h"

#include <absl/base/thread_annotations.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace distgrad {
namespace {

// Every memfd of distgrad's is named after its kind and sealed with these seals once sized (Note
// [Only our own segments]).
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

const char* name_of(SharedMemory::Kind kind) {
  return kind == SharedMemory::Kind::kSegment ? "distgrad-segment" : "distgrad-tensor";
}

const char* description_of(SharedMemory::Kind kind) {
  return kind == SharedMemory::Kind::kSegment ? "distgrad segment" : "distgrad shared tensor";
}

std::string errno_text() { return std::strerror(errno); }

std::string read_link(const std::string& path) {
  char target[256];
  const ssize_t size = ::readlink(path.c_str(), target, sizeof target - 1);
  return size > 0 ? std::string(target, static_cast<size_t>(size)) : std::string();
}

// The control page's second word: the messages in flight naming the memory (Note [Shared tensors]).
std::atomic_ref<uint64_t> messages_word(void* control) {
  return std::atomic_ref<uint64_t>(static_cast<uint64_t*>(control)[1]);
}

// Opens descriptor `fd` of process `pid` for reading and writing when it is a memfd of distgrad's
// of `kind`, inode `inode` and `file_bytes` bytes (any when 0); -1 with `why` set otherwise. It is
// verified through a read-only descriptor first: nothing else is ever opened for writing.
int open_verified(int64_t pid, int32_t fd, uint64_t inode, uint64_t file_bytes, SharedMemory::Kind kind,
                  std::string* why) {
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
  const std::string name = read_link(self_path);
  const std::string expected_name = std::string("/memfd:") + name_of(kind) + " (deleted)";
  if (!is_file || seals != kSeals || name != expected_name) {
    *why = path + " is not a " + description_of(kind) + " (" + (name.empty() ? std::string("not a file") : name) +
           (seals == kSeals ? "" : ", not sealed as one") + ")";
    ::close(readonly);
    return -1;
  }
  if (static_cast<uint64_t>(info.st_ino) != inode ||
      (file_bytes != 0 && static_cast<uint64_t>(info.st_size) != file_bytes)) {
    *why = path + " is not the memory named (expected inode " + std::to_string(inode) + " of " +
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

// The live tensor storages of this process by inode, and the descriptors kept open for messages
// still in flight (Note [Shared tensors]).
class Registry {
 public:
  static Registry& get() {
    static auto* registry = new Registry;  // never destroyed: memories may outlive static destructors
    return *registry;
  }

  void add(const std::shared_ptr<SharedMemory>& memory) {
    std::lock_guard<std::mutex> lock(registry_mutex_);
    storages_[memory->inode()] = memory;
  }
  std::shared_ptr<SharedMemory> find(uint64_t inode) {
    std::lock_guard<std::mutex> lock(registry_mutex_);
    const auto found = storages_.find(inode);
    return found == storages_.end() ? nullptr : found->second.lock();
  }
  void forget(uint64_t inode) {
    std::lock_guard<std::mutex> lock(registry_mutex_);
    const auto found = storages_.find(inode);
    if (found != storages_.end() && found->second.expired()) storages_.erase(found);
  }

  // Keeps `fd` and the control page at `control` until no message names the memory.
  void keep_until_received(int fd, void* control) {
    std::lock_guard<std::mutex> lock(registry_mutex_);
    kept_.push_back({fd, control});
  }
  // Closes what keep_until_received kept whose messages have all been received.
  void close_received() {
    std::lock_guard<std::mutex> lock(registry_mutex_);
    std::erase_if(kept_, [](const Kept& kept) {
      if (messages_word(kept.control).load(std::memory_order_acquire) != 0) return false;
      ::munmap(kept.control, SharedMemory::kControlBytes);
      ::close(kept.fd);
      return true;
    });
  }

 private:
  struct Kept {
    int fd;
    void* control;
  };
  std::mutex registry_mutex_;  // guards storages_ and kept_
  std::map<uint64_t, std::weak_ptr<SharedMemory>> storages_ ABSL_GUARDED_BY(registry_mutex_);
  std::vector<Kept> kept_ ABSL_GUARDED_BY(registry_mutex_);
};

}  // namespace

std::shared_ptr<SharedMemory> SharedMemory::adopt(int fd, Kind kind, std::string* why) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    *why = "cannot stat the memfd: " + errno_text();
    ::close(fd);
    return nullptr;
  }
  const auto file_bytes = static_cast<size_t>(info.st_size);
  if (file_bytes < kControlBytes) {
    *why = "a memfd of " + std::to_string(file_bytes) + " bytes is smaller than its control page";
    ::close(fd);
    return nullptr;
  }
  void* base = ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    *why = "cannot map " + std::to_string(file_bytes) + " bytes: " + errno_text();
    ::close(fd);
    return nullptr;
  }
  std::shared_ptr<SharedMemory> memory(
      new SharedMemory(fd, static_cast<uint64_t>(info.st_ino), file_bytes, kind, base));
  if (kind == Kind::kTensorStorage) Registry::get().add(memory);
  return memory;
}

std::shared_ptr<SharedMemory> SharedMemory::create(size_t data_bytes, Kind kind) {
  Registry::get().close_received();
  const int fd = ::memfd_create(name_of(kind), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  DISTGRAD_CHECK(fd >= 0, "cannot create shared memory (memfd_create): ", errno_text());
  const size_t file_bytes = kControlBytes + data_bytes;
  if (::ftruncate(fd, static_cast<off_t>(file_bytes)) != 0 || ::fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    DISTGRAD_FAIL("cannot size shared memory of ", file_bytes, " bytes: ", why);
  }
  std::string why;
  std::shared_ptr<SharedMemory> memory = adopt(fd, kind, &why);
  DISTGRAD_CHECK(memory != nullptr, "cannot make shared memory of ", file_bytes, " bytes: ", why);
  return memory;
}

std::shared_ptr<SharedMemory> SharedMemory::open(int64_t pid, int32_t fd, uint64_t inode, uint64_t file_bytes,
                                                 Kind kind, std::string* why) {
  Registry::get().close_received();
  const int opened = open_verified(pid, fd, inode, file_bytes, kind, why);
  return opened < 0 ? nullptr : adopt(opened, kind, why);
}

bool SharedMemory::can_open(int64_t pid, int32_t fd, uint64_t inode, Kind kind) {
  std::string why;
  const int opened = open_verified(pid, fd, inode, 0, kind, &why);
  if (opened < 0) return false;
  ::close(opened);
  return true;
}

std::string SharedMemory::host_identity() {
  std::ifstream boot_id("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(boot_id, boot);
  return boot + "/" + read_link("/proc/self/ns/pid") + "/" + read_link("/proc/self/ns/net") + "/uid " +
         std::to_string(::getuid());
}

std::shared_ptr<SharedMemory> SharedMemory::find(uint64_t inode) { return Registry::get().find(inode); }

SharedMemory::~SharedMemory() {
  if (kind_ == Kind::kTensorStorage) Registry::get().forget(inode_);
  ::munmap(data(), data_bytes());
  if (messages_in_flight() == 0) {
    ::munmap(base_, kControlBytes);
    ::close(fd_);
  } else {
    Registry::get().keep_until_received(fd_, base_);
  }
  Registry::get().close_received();
}

void SharedMemory::pin_for_message() { messages_word(base_).fetch_add(1, std::memory_order_acq_rel); }

void SharedMemory::release_message() {
  uint64_t in_flight = messages_word(base_).load(std::memory_order_acquire);
  while (in_flight != 0 &&
         !messages_word(base_).compare_exchange_weak(in_flight, in_flight - 1, std::memory_order_acq_rel)) {
  }
}

uint64_t SharedMemory::messages_in_flight() const { return messages_word(base_).load(std::memory_order_acquire); }

}  // namespace distgrad
