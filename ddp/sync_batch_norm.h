// SyncBatchNorm: batch normalisation with statistics over every rank's batch
// (torch.nn.SyncBatchNorm), a drop-in for BatchNorm1d/2d in DistributedDataParallel.
//
// In training mode each rank sums its per-channel values, squares and count; one all-reduce
// (differentiable: its backward all-reduces the gradients) gives the mean and biased variance
// of the whole global batch, which normalise the local batch and update the running
// statistics. The result and its gradients (to any order) are those of BatchNorm on the
// concatenated batch of all ranks. Evaluation mode uses the running statistics, as BatchNorm.
// Every rank of the group must run the layer the same number of times, in the same order.
//
//   auto bn = std::make_shared<dg::ddp::SyncBatchNorm>(64);   // the default process group
#pragma once

#include <memory>

#include "ddp/process_group.h"
#include "nn/batch_norm.h"

namespace distgrad::ddp {

class SyncBatchNorm : public nn::BatchNorm {
 public:
  // Over [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W] input. `group` null: the default
  // process group, looked up at the first forward.
  explicit SyncBatchNorm(int64_t num_features, nn::BatchNormOptions options = {}, TensorOptions tensor_options = {},
                         std::shared_ptr<ProcessGroup> group = nullptr)
      : BatchNorm("SyncBatchNorm", 2, 5, num_features, options, tensor_options), group_(std::move(group)) {}

 protected:
  NormalizedBatch normalize_batch(const Tensor& input, const Shape& dims) override;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace distgrad::ddp
