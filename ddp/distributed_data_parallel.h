// DistributedDataParallel: data-parallel training of one module replicated on every rank
// (torch.nn.parallel.DistributedDataParallel).
//
// Each rank runs the module on its own share of the batch; during backward the gradients are
// averaged over the ranks, so every replica takes the same optimizer step and the replicas
// stay equal without ever broadcasting parameters again.
//
//   auto pg = dg::ddp::init_process_group();
//   dg::ddp::DistributedDataParallel ddp(*net, pg, {.bucket_cap_mb = 25});
//   dg::optim::SGD opt(net->parameters(), 0.01);
//   opt.zero_grad();
//   dg::nn::cross_entropy(ddp.forward(x), y).backward();   // gradients averaged when it returns
//   opt.step();
//
// Note [Gradient buckets]
// At construction the parameters that require grad are put, in reverse registration order
// (roughly the order backward produces their gradients), into buckets of one dtype and device:
// the first bucket closes at first_bucket_cap_mb (1 MB, so communication starts early), the
// others at bucket_cap_mb. A post-accumulate-grad hook on each parameter copies its gradient
// into its bucket's flat buffer; when a bucket is full and every bucket before it has been
// launched, its all-reduce (average) starts asynchronously, so communication overlaps the rest
// of backward. Buckets launch in bucket order on every rank, which keeps the collectives in the
// same order everywhere. At the end of the backward pass (Engine::queue_callback) DDP waits for
// every bucket and writes the averaged gradients back into grad(); backward() returns after
// that. docs/ddp.md has a figure.
//
// Construction broadcasts rank 0's parameters and buffers to every rank (after checking that
// every rank's module has the same parameter shapes), and forward() broadcasts rank 0's buffers
// (BatchNorm's running statistics) with broadcast_buffers. Under no_sync() backward passes only
// accumulate locally; the next synchronized backward averages the accumulated gradients.
//
// Unused parameters: without find_unused_parameters, a parameter that gets no gradient in a
// backward pass is an error naming it (its bucket could never be reduced). With it, such
// parameters count as zero on this rank; the ranks also sum a used-count per parameter, and a
// parameter no rank used keeps its grad() as it was (undefined after zero_grad), as in PyTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ddp/process_group.h"
#include "nn/module.h"

namespace distgrad::ddp {

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25;       // later buckets close at this size (MiB)
  double first_bucket_cap_mb = 1;  // the first bucket closes at this size (MiB)
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // broadcast rank 0's buffers at every forward
};

class DistributedDataParallel {
 public:
  using Clock = std::chrono::steady_clock;

  // Wraps `module` (which must outlive this object) for the ranks of `group`.
  DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group,
                          DistributedDataParallelOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Broadcasts buffers (broadcast_buffers), then runs module.forward(input); the next backward
  // pass through the result averages the gradients (unless under no_sync).
  Tensor forward(const Tensor& input);

  nn::Module& module() { return module_; }
  const ProcessGroup& group() const { return *group_; }

  // While the returned guard lives, forward passes are not synchronized: their backward passes
  // accumulate gradients locally (gradient accumulation).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSyncGuard() { ddp_.sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The parameter names of each bucket, in bucket (launch) order (Note [Gradient buckets]).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

  // When things happened in the last synchronized backward pass, to see the overlap.
  struct BackwardTimeline {
    std::vector<Clock::time_point> bucket_launched;  // per bucket, when its all-reduce started
    Clock::time_point last_gradient;                 // when the last parameter's gradient arrived
    Clock::time_point finished;                      // when the averaged gradients were written back
  };
  const BackwardTimeline& last_backward() const { return timeline_; }

 private:
  struct Parameter {
    std::string name;
    Tensor tensor;
    size_t bucket = 0;
    int64_t offset = 0;  // in elements, in its bucket's buffer
    int64_t hook = 0;
    bool ready = false;  // its gradient is in the bucket, in this backward pass
    bool used = false;   // it received a gradient in this backward pass
  };
  struct Bucket {
    Tensor buffer;                   // flat, of the parameters' dtype and device
    std::vector<size_t> parameters;  // indices into parameters_
    size_t pending = 0;              // parameters not ready yet in this backward pass
    std::shared_ptr<Work> work;
  };

  void build_buckets();
  void check_same_model_everywhere();
  void broadcast_from_rank0(const std::vector<Tensor>& tensors);
  // The flat view of `parameter`'s place in its bucket's buffer.
  Tensor bucket_slot(const Parameter& parameter) const;
  void on_gradient(size_t index);
  void mark_ready(size_t index);
  void launch_ready_buckets();
  void finish_backward();

  nn::Module& module_;
  const std::shared_ptr<ProcessGroup> group_;
  const DistributedDataParallelOptions options_;
  std::vector<Parameter> parameters_;
  std::vector<Bucket> buckets_;
  bool sync_ = true;              // false under no_sync
  bool expect_backward_ = false;  // a synchronized forward ran and its backward has not finished
  bool backward_started_ = false;
  size_t next_bucket_ = 0;  // the next bucket to launch
  BackwardTimeline timeline_;
};

}  // namespace distgrad::ddp
