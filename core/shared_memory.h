// SharedMemory: memory that other processes on this host can map: a memfd of distgrad's, mapped
// read-write, a control page followed by the data. Tensors live in it after share_memory_()
// (Note [Shared tensors]); rpc's and ddp's same-host segments are made of it (transport/).
//
//   std::shared_ptr<SharedMemory> mine = SharedMemory::create(bytes, SharedMemory::Kind::kTensorStorage);
//   // another process, told (pid, mine->fd(), mine->inode(), mine->file_bytes()):
//   std::shared_ptr<SharedMemory> theirs = SharedMemory::open(pid, fd, inode, file_bytes, kind, &why);
//
// Note [Only our own segments]
// A peer names one of its files by descriptor, and /proc/<pid>/fd/<n> opens whatever file that
// is. A process opens only distgrad's memfds: named after their kind ("distgrad-segment",
// "distgrad-tensor") and carrying exactly the seals every one gets once sized (no shrinking, no
// growing, no more seals), checked through a read-only descriptor before the file is opened for
// writing and mapped; any other file the peer has open (a dataset opened read-only, say) is
// refused and left untouched. The seals also keep the creator from shrinking the file under a
// mapping of another process (which would fault its reads). memfds have no name in /dev/shm or
// anywhere else: the kernel frees one when the last descriptor and mapping of it are gone.
//
// Note [Shared tensors]
// Tensor::share_memory_() (PyTorch's name) moves a CPU tensor's storage into a SharedMemory of
// kind kTensorStorage. rpc sends such a tensor to a worker on the same host by reference, without
// copying its bytes: the message names the memfd (the sender's descriptor, its inode and size)
// and the tensor's offset in it, and the receiver's tensor views the same memory (docs/rpc.md,
// "Tensors in shared memory"). The memory outlives whichever process lets go of it first.
//
// A message in flight must find the file open in its sender, which may drop its last tensor of
// that memory as soon as the message left. So the control page counts the messages in flight
// that name the memory (pin_for_message before sending, release_message once the receiver mapped
// it), and a SharedMemory destroyed while that count is not zero keeps its descriptor and control
// page (not its data mapping) until the count reaches zero; every create and open closes those
// that can be. A message that is never received keeps its memory until its sender exits.
//
// In one process, each memory of kind kTensorStorage is mapped once: find() returns the live
// SharedMemory of an inode, so a tensor sent back to the process that made it (or that already
// maps it) views the mapping that process has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace distgrad {

class SharedMemory {
 public:
  // What the memory is for; a reference to one kind never opens the other (Note [Only our own
  // segments]).
  enum class Kind {
    kSegment,        // a transport's segment, whose control page belongs to that transport
    kTensorStorage,  // a tensor's storage (Note [Shared tensors])
  };

  // A new memfd of `data_bytes` after the control page, mapped read-write; throws distgrad::Error
  // naming the size when it cannot be made.
  static std::shared_ptr<SharedMemory> create(size_t data_bytes, Kind kind);
  // Descriptor `fd` of process `pid`, when it is a memfd of distgrad's of `kind`, inode `inode`
  // and `file_bytes` bytes (any size when 0), mapped read-write; null with `why` set when it
  // cannot be (the process or descriptor is gone, it is another file, opening it is not allowed).
  static std::shared_ptr<SharedMemory> open(int64_t pid, int32_t fd, uint64_t inode, uint64_t file_bytes, Kind kind,
                                            std::string* why);
  // Whether `open` would succeed, without mapping anything.
  static bool can_open(int64_t pid, int32_t fd, uint64_t inode, Kind kind);
  // This process's host identity (the kernel's boot id, the pid and network namespaces, the
  // user): equal for processes that can open each other's memfds.
  static std::string host_identity();
  // The live memory of kind kTensorStorage and inode `inode` in this process (made or opened
  // here); null when there is none.
  static std::shared_ptr<SharedMemory> find(uint64_t inode);

  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  int fd() const { return fd_; }
  uint64_t inode() const { return inode_; }
  Kind kind() const { return kind_; }
  size_t file_bytes() const { return file_bytes_; }
  size_t data_bytes() const { return file_bytes_ - kControlBytes; }
  // The control page (its first word is a transport's; Note [Shared tensors] uses the second).
  void* control() const { return base_; }
  uint8_t* data() const { return static_cast<uint8_t*>(base_) + kControlBytes; }

  // Note [Shared tensors]: one more message in flight names this memory; one fewer (called by its
  // receiver once mapped). Releasing more than were pinned leaves the count at zero.
  void pin_for_message();
  void release_message();
  uint64_t messages_in_flight() const;

  static constexpr size_t kControlBytes = 4096;

 private:
  SharedMemory(int fd, uint64_t inode, size_t file_bytes, Kind kind, void* base)
      : fd_(fd), inode_(inode), file_bytes_(file_bytes), kind_(kind), base_(base) {}
  static std::shared_ptr<SharedMemory> adopt(int fd, Kind kind, std::string* why);

  const int fd_;
  const uint64_t inode_;
  const size_t file_bytes_;
  const Kind kind_;
  void* const base_;
};

}  // namespace distgrad
