// CollectiveBackend: what a ProcessGroup asks of a collective library (shared memory or Gloo for
// CPU tensors, NCCL for CUDA tensors). Internal to ddp/.
//
// The ProcessGroup checks every argument before it calls a backend (contiguous tensors of a
// supported dtype on the backend's device, one output per rank of the right size), so a
// backend only runs the collective. It runs them in the order they were called and finishes
// each Work within the group's timeout: with an error when the collective failed or timed out,
// after which every later collective fails at once (the backend is broken).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ddp/collective_thread.h"
#include "ddp/process_group.h"
#include "ddp/work.h"

namespace distgrad::rendezvous {
class JobStore;
}

namespace distgrad::ddp {

// What a backend needs to connect the ranks of one group.
struct GroupSetup {
  std::string group_name;  // "world", "group1", ...
  int rank = 0;            // in the group
  int size = 1;
  std::chrono::milliseconds timeout{0};
  rendezvous::JobStore* store = nullptr;  // outlives the backend (the group holds it)
  std::string key_prefix;                 // Store keys for this backend's rendezvous start with it
  bool shared_memory = true;              // whether this rank offers shared memory to the others
};

// What every rank must pass alike to one collective: its kind, the dtype, the op or root, and a
// hash of the element counts. Gloo crashes the process when ranks pass different sizes, so a
// backend compares the ranks' signatures before it sends anything (Note [Checking that the ranks
// agree] in ddp/gloo_backend.cc; for free in ddp/shared_memory_backend.cc).
using CallSignature = std::array<int64_t, 4>;
// How the group launches one collective.
struct Launch {
  // What every rank must pass alike to this collective.
  CallSignature signature{};
  // Whether to compare the signatures where that costs a round trip (Gloo; ProcessGroupOptions::
  // check_calls). The shared-memory backend compares them always, for free; NCCL's watchdog times
  // a mismatched collective out instead.
  bool check = false;
  // The caller waits for the Work right away (a blocking call): a CPU backend may run the
  // collective on the caller's thread (Note [One thread per group]).
  bool caller_waits = false;
};

// The error when the ranks' signatures first differ at `field` (0 to 3).
CallMismatch signature_mismatch(size_t field);

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  virtual const char* name() const = 0;

  virtual void all_reduce(const Tensor& tensor, ReduceOp op, std::shared_ptr<Work> work, const Launch& launch) = 0;
  virtual void broadcast(const Tensor& tensor, int root, std::shared_ptr<Work> work, const Launch& launch) = 0;
  virtual void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, std::shared_ptr<Work> work,
                          const Launch& launch) = 0;
  virtual void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                              std::shared_ptr<Work> work, const Launch& launch) = 0;
  virtual void barrier(std::shared_ptr<Work> work, const Launch& launch) = 0;
};

// Shared memory, for CPU tensors of ranks on one host (Note [Shared-memory collectives] in
// ddp/shared_memory_backend.cc). Every rank of the group calls it; it returns null on every rank
// unless every rank offers shared memory, they are all on one host and each can map the others'
// segments.
std::unique_ptr<CollectiveBackend> make_shared_memory_backend(const GroupSetup& setup);

// Gloo over TCP, for CPU tensors: connects the group's ranks (a full mesh) before returning.
std::unique_ptr<CollectiveBackend> make_gloo_backend(const GroupSetup& setup);

// NCCL, for CUDA tensors on `device`: one communicator for the group, its unique id passed
// through the Store. Throws when distgrad was built without NCCL.
std::unique_ptr<CollectiveBackend> make_nccl_backend(const GroupSetup& setup, int device);

}  // namespace distgrad::ddp
