// The same-host tensor path: tensor bytes through shared memory while gRPC carries the frame
// (internal to rpc/ and ddp/; docs/rpc.md, "Same-host shared memory"). ddp/'s shared-memory
// collectives use Segment and open_segment.
//
// Note [Shared-memory path]
// Every process publishes a host identity at rendezvous (SharedMemory::host_identity(): the kernel's boot id,
// the pid and network namespaces, the user). Two processes with equal identities may move tensor
// bytes through memfd segments: the sender copies a tensor into a segment of its own and names
// the segment in the frame (its fd, inode, the message's ticket); the receiver opens it through
// /proc/<sender pid>/fd/<fd>, checks the inode and maps it once, and the received tensor views
// the mapping, so the bytes are copied once on the way.
//
// Ownership. A segment belongs to the process that created it; its first word holds the ticket
// of the message that occupies it, 0 when free. The sender claims a free segment (0 -> ticket)
// before filling it; the receiver's tensor releases it (ticket -> 0) when its last view is gone.
// So a segment is never refilled while a tensor views it. A sender keeps its segments per peer
// (a SendPool, reused so their pages are touched once), up to a byte cap, and sends over the
// network when every segment is busy and the cap is reached. memfds have no name: whatever
// happens to either process, nothing is left in /dev/shm, and the kernel frees a segment once
// the last process mapping it is gone (a receiver's tensors stay valid after the sender died).
//
// Agreement. Identities only say the peers might share memory; the receiver proves it by
// opening the peer's probe segment (published with its identity) once. A caller says in each
// request whether it can read the callee's segments (then the reply may use them), and a callee
// says in each reply whether it can read the caller's (then later requests may). The first
// request to a peer therefore always travels over the network.
//
// Which files a receiver opens: Note [Only our own segments] in core/shared_memory.h.
//
// Tensors in shared memory. A tensor whose storage is already in shared memory (share_memory_(),
// or received that way) is not copied: the frame names its memory and offset, and the receiver
// views the same memory (Note [Shared tensors] in core/shared_memory.h).
#pragma once

#include <absl/base/thread_annotations.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/shared_memory.h"
#include "core/tensor.h"

namespace distgrad::transport::shm {

// A segment reference that does not match the segment (from a malformed or stale message).
class SegmentError : public Error {
 public:
  using Error::Error;
};

// How a receiver finds a tensor's bytes: the sender's fd number, the memfd's inode and size in
// bytes, and either the ticket of the message the segment holds, or, for a tensor in shared memory
// (`tensor_storage`), the byte offset of the tensor in the memory's data.
struct SegmentRef {
  int32_t fd = -1;
  uint64_t inode = 0;
  uint64_t file_bytes = 0;
  uint64_t ticket = 0;
  bool tensor_storage = false;
  uint64_t byte_offset = 0;
};

// A segment this process created: a SharedMemory of kind kSegment whose control page's first word
// is the ticket of the message it holds (0 when free).
class Segment {
 public:
  // Throws distgrad::Error naming the size when the segment cannot be created.
  explicit Segment(size_t data_bytes);

  size_t data_bytes() const { return memory_->data_bytes(); }
  uint8_t* data() const { return memory_->data(); }
  bool is_free() const;
  // 0 -> ticket; false when the segment is occupied.
  bool try_claim(uint64_t ticket);
  SegmentRef ref(uint64_t ticket) const;

 private:
  const std::shared_ptr<SharedMemory> memory_;
};

// Another process's segment `ref` names, in process `pid`, mapped here; null with `why` set when it
// cannot be (SharedMemory::open).
std::shared_ptr<SharedMemory> open_segment(int64_t pid, const SegmentRef& ref, std::string* why);

// The segments a sender fills for one peer; see Note [Shared-memory path].
class SendPool {
 public:
  explicit SendPool(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Copies `tensor` (any device, any layout) into a free segment and returns how the peer finds
  // it; nullopt when every segment is busy and a new one would pass the cap.
  std::optional<SegmentRef> put(const Tensor& tensor);
  // Segments and their bytes, busy or not.
  std::pair<size_t, size_t> size() const;

 private:
  const size_t max_bytes_;
  mutable std::mutex segments_mutex_;  // guards segments_, total_bytes_, next_ticket_
  std::vector<std::unique_ptr<Segment>> segments_ ABSL_GUARDED_BY(segments_mutex_);
  size_t total_bytes_ ABSL_GUARDED_BY(segments_mutex_) = 0;
  uint64_t next_ticket_ ABSL_GUARDED_BY(segments_mutex_) = 1;
};

// One peer's segments mapped in this process: received tensors view them.
class PeerSegments {
 public:
  explicit PeerSegments(int64_t pid) : pid_(pid) {}

  // Whether this process can open the peer's memfds: opens its probe segment (checked once by
  // the caller and remembered).
  bool can_open(int32_t probe_fd, uint64_t probe_inode) const;
  // A tensor of `sizes` and `dtype` viewing what `ref` names: a segment, which it releases when its
  // last view is gone, or a tensor's shared memory, whose message it marks received. Throws
  // SegmentError naming what does not match (the inode, the size, the ticket, the offset).
  Tensor view(const SegmentRef& ref, const Shape& sizes, DType dtype);

 private:
  Tensor view_segment(const SegmentRef& ref, const Shape& sizes, DType dtype, size_t nbytes);
  Tensor view_tensor_storage(const SegmentRef& ref, const Shape& sizes, DType dtype) const;

  const int64_t pid_;
  std::mutex mappings_mutex_;  // guards mappings_
  std::map<std::pair<int32_t, uint64_t>, std::shared_ptr<SharedMemory>> mappings_ ABSL_GUARDED_BY(mappings_mutex_);
};

// A segment of one page that peers open to prove they can (Note [Shared-memory path]).
class Probe {
 public:
  Probe() : segment_(0) {}
  SegmentRef ref() const { return segment_.ref(0); }

 private:
  Segment segment_;
};

// Counters of what this process sent, by path.
struct Counters {
  std::atomic<uint64_t> shared_tensors{0}, shared_bytes{0};          // copied into segments
  std::atomic<uint64_t> referenced_tensors{0}, referenced_bytes{0};  // in shared memory, not copied
};

// An agent's shared-memory links to every peer: the rendezvous cards, the agreement of Note
// [Shared-memory path], a SendPool and the mapped segments per peer.
//
//   Links links(threshold, pool_bytes);
//   publish(host_identity(), links.card());  ...  if (same host) links.add_peer(rank, card_of(rank));
//   if (links.read_by(to)) ref = links.put(to, tensor);       // sender
//   Tensor t = links.view(from, ref, sizes, dtype);            // receiver
class Links {
 public:
  // Tensors of at least `threshold` bytes use shared memory; each peer's pool holds at most
  // `pool_bytes`.
  Links(size_t threshold, size_t pool_bytes);
  ~Links();
  Links(const Links&) = delete;
  Links& operator=(const Links&) = delete;

  // This process's part of its rendezvous entry: its pid and probe ("PID FD INODE").
  std::string card() const;
  // Peer `rank`, on this host, published `card` (as card() wrote it); throws distgrad::Error on a
  // card that does not parse. Peers never added are not on this host. Adding a rank again (a
  // worker that rejoined the world: a new process) replaces its link, agreement and pool; a
  // transfer that already holds the old link finishes with it.
  void add_peer(int rank, const std::string& card);

  // Whether this process can open `rank`'s segments (probed on first use, then remembered).
  bool reads_from(int rank);
  // Whether `rank` said it can open this process's segments, and recording what it said.
  bool read_by(int rank) const;
  void set_read_by(int rank, bool reads);

  // How `rank` (a peer on this host that can read this process's segments: the caller checks
  // read_by, or the request's word for a reply) finds `tensor`: its shared memory when it is a
  // contiguous tensor in shared memory (pinned for the message, Note [Shared tensors]); else a
  // segment it is copied into when it has at least `threshold` bytes and a segment is free or can
  // be made; else nullopt (it goes over the network).
  std::optional<SegmentRef> put(int rank, const Tensor& tensor);
  // Receiving from `rank`: PeerSegments::view.
  Tensor view(int rank, const SegmentRef& ref, const Shape& sizes, DType dtype);

  const Counters& counters() const { return counters_; }
  // Segments and bytes in every pool.
  std::pair<size_t, size_t> pool_size() const;

 private:
  struct Peer;
  // Peer `rank`, or null when it was never added (not on this host).
  std::shared_ptr<Peer> find(int rank) const;

  const size_t threshold_, pool_bytes_;
  const Probe probe_;
  mutable std::mutex peers_mutex_;                                          // guards peers_
  std::vector<std::shared_ptr<Peer>> peers_ ABSL_GUARDED_BY(peers_mutex_);  // by rank
  Counters counters_;
};

}  // namespace distgrad::transport::shm
