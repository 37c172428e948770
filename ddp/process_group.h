// ProcessGroup: collectives over the ranks of a job (torch.distributed's process groups).
//
// A group runs all_reduce, broadcast, all_gather, reduce_scatter and barrier on contiguous
// tensors, in place, each in a blocking form and an `_async` form that returns a Work. CPU
// tensors go through shared memory when every rank is on one host, else through Gloo (its TCP
// transport, the library PyTorch uses for CPU collectives); CUDA tensors through NCCL on a
// stream of its own (docs/ddp.md, "Backends"). Every rank of the
// group must call the same collectives in the same order with tensors of the same dtype and
// sizes, as in PyTorch.
//
//   auto pg = dg::ddp::init_process_group();               // from RANK/WORLD_SIZE/... (or Slurm, MPI)
//   dg::Tensor t = dg::ones({4});
//   pg->all_reduce(t);                                      // t = 4 x world_size everywhere
//   std::shared_ptr<dg::ddp::Work> work = pg->broadcast_async(t, /*root=*/0);
//   work->wait();
//   auto evens = dg::ddp::new_group({0, 2});                // every rank calls it; null on 1 and 3
//
// Rendezvous: through the job's Store (Note [Job store] in rendezvous/job_store.h), the same one RPC
// uses, so the environment of distgrad-run, srun, mpirun or torchrun --no-python is enough.
//
// Errors: a bad argument throws at the call, naming the collective, the argument and what was
// expected (a non-contiguous tensor, an unsupported dtype, outputs of the wrong count or size).
// A collective that fails on the wire (a rank died, or did not arrive within the timeout)
// throws from wait() (or the blocking call) with the collective, the group and the rank, and the
// group is then unusable: later collectives fail at once, naming that first failure.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/tensor.h"
#include "ddp/work.h"

namespace distgrad::rendezvous {
class JobStore;
}

namespace distgrad::ddp {

class CollectiveBackend;
struct Launch;

// How all_reduce and reduce_scatter combine the ranks' tensors. kAvg needs a floating-point
// tensor (the sum divided by the group size).
enum class ReduceOp { kSum, kAvg, kMax, kMin, kProduct };
std::string_view to_string(ReduceOp op);

// Which library runs the collectives.
enum class Backend {
  kAuto,  // shared memory or Gloo for CPU tensors, NCCL for CUDA tensors when built with CUDA
  kNccl,  // CUDA tensors only
  kCpu,   // CPU tensors only (shared memory or Gloo)
};

struct ProcessGroupOptions {
  Backend backend = Backend::kAuto;
  // Bounds the rendezvous and every collective (0 is not allowed: every wait has a bound).
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // Before each collective on CPU tensors, check with one small all-reduce that every rank passed
  // the same dtype, sizes and op or root: a mismatch then fails that collective on every rank,
  // naming what differs, instead of crashing the process inside Gloo. Costs a round trip per
  // collective; DistributedDataParallel's bucket all-reduces skip it (CallCheck::kSkip). Free on
  // the shared-memory backend.
  bool check_calls = true;
  // CPU collectives between ranks on one host go through shared memory when every rank of the
  // group allows it (else Gloo over TCP). DISTGRAD_SHM=0 or DISTGRAD_SAME_HOST=0 in the
  // environment turn it off, as they do for RPC.
  bool shared_memory = true;
};

// Whether one collective runs the check of ProcessGroupOptions::check_calls.
enum class CallCheck { kAsConfigured, kSkip };

class ProcessGroup {
 public:
  // Use init_process_group or new_group, which make the rendezvous collective across ranks.
  ProcessGroup(std::string name, int rank, std::vector<int> global_ranks, ProcessGroupOptions options,
               std::shared_ptr<rendezvous::JobStore> store);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // This process's rank in the group, and the group's size.
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }
  // "world" for init_process_group's group, "group1", "group2", ... for new_group's.
  const std::string& name() const { return name_; }
  // The job-wide rank of each group rank.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  const ProcessGroupOptions& options() const { return options_; }
  // The CPU backend ("shm" or "gloo"), "nccl", or both ("shm+nccl", "gloo+nccl": kAuto once a
  // CUDA collective has run).
  std::string backend_name() const;

  // Combines `tensor` across the group with `op`, in place on every rank.
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                                         CallCheck check = CallCheck::kAsConfigured);

  // Copies rank `root`'s tensor into every other rank's.
  void broadcast(const Tensor& tensor, int root);
  std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root);

  // outputs[r] receives rank r's `input`. One output per rank, each of the input's dtype and
  // device and of rank r's input size (sizes may differ between ranks).
  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input);
  std::shared_ptr<Work> all_gather_async(const std::vector<Tensor>& outputs, const Tensor& input);

  // `output` receives the reduction over all ranks of their inputs[rank()]. One input per rank;
  // inputs[r] must have the same size on every rank (sizes may differ between r), and output
  // that of inputs[rank()].
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& output, const std::vector<Tensor>& inputs,
                                             ReduceOp op = ReduceOp::kSum);

  // Returns once every rank of the group has called it.
  void barrier();
  std::shared_ptr<Work> barrier_async();

  // Used by new_group: the number of groups made from this one so far.
  int next_group_number() { return ++groups_made_; }
  std::shared_ptr<rendezvous::JobStore> store() const { return store_; }

 private:
  // The backend for tensors on `device` (made on first use for CUDA), checking the choice.
  CollectiveBackend& backend_for(Device device, const char* op);
  std::shared_ptr<Work> new_work(std::string what) const;
  // How to launch a collective of `signature` (checked or not: see check_calls); `caller_waits`
  // for the blocking forms.
  Launch launch(std::array<int64_t, 4> signature, CallCheck check, bool caller_waits) const;
  // The collectives: the blocking forms wait for the Work at once.
  std::shared_ptr<Work> start_all_reduce(const Tensor& tensor, ReduceOp op, CallCheck check, bool caller_waits);
  std::shared_ptr<Work> start_broadcast(const Tensor& tensor, int root, bool caller_waits);
  std::shared_ptr<Work> start_all_gather(const std::vector<Tensor>& outputs, const Tensor& input, bool caller_waits);
  std::shared_ptr<Work> start_reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                             bool caller_waits);
  std::shared_ptr<Work> start_barrier(bool caller_waits);

  const std::string name_;
  const int rank_;
  const std::vector<int> global_ranks_;
  const ProcessGroupOptions options_;
  const std::shared_ptr<rendezvous::JobStore> store_;
  int groups_made_ = 0;
  std::unique_ptr<CollectiveBackend> cpu_;  // shared memory or Gloo, unless the backend is kNccl
  mutable std::mutex cuda_mutex_;           // guards cuda_
  std::unique_ptr<CollectiveBackend> cuda_ ABSL_GUARDED_BY(cuda_mutex_);  // NCCL, made on first use
  int cuda_device_ ABSL_GUARDED_BY(cuda_mutex_) = -1;                     // the device cuda_ runs on
};

// Joins the job's default group ("world") of every rank, from the environment (rendezvous::world_info:
// torchrun/distgrad-run, Slurm, Open MPI). Every rank must call it; it returns once all have
// connected, or throws naming the ranks that did not arrive within the timeout. Throws if a
// default group exists already.
std::shared_ptr<ProcessGroup> init_process_group(ProcessGroupOptions options = {});
// The default group; throws unless init_process_group was called.
std::shared_ptr<ProcessGroup> default_process_group();
bool is_initialized();
// Forgets the default group after the ranks agree they are done with the Store (at most
// 30 s): a later init_process_group makes a new one. Groups still held stay usable.
void destroy_process_group();

// A group of the given job-wide ranks (sorted and distinct; group rank i is the i-th of them).
// Every rank of the default group must call new_group with the same ranks, in the same order
// of new_group calls; ranks outside the group get nullptr. `options` default to the default
// group's.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, ProcessGroupOptions options);

}  // namespace distgrad::ddp
