// DistributedSampler: each rank's share of a dataset for an epoch
// (torch.utils.data.distributed.DistributedSampler).
//
// The sample order of an epoch (shuffled from seed + epoch, the same on every rank; or in
// order) is padded by repeating its first samples until its length divides by num_replicas
// (or, with drop_last, cut down to a multiple of it); rank r takes every num_replicas-th
// sample starting at r. So every rank gets the same number of samples, and an epoch covers
// every sample exactly once (plus the padding). Feed the indices to a DataLoader without its
// own shuffle:
//
//   dg::ddp::DistributedSampler sampler(train.labels.numel(), *pg, {.shuffle = true, .seed = 42});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);
//     dg::data::DataLoader loader(train.images, train.labels, sampler.indices(), {.batch_size = 32});
//     for (const dg::data::Batch& batch : loader) ...
//   }
//
// With the same seed, the union of batch k over the ranks (batch size B each) is batch k of
// a single process that draws batches of num_replicas * B from DistributedSampler(n, 1, 0):
// DDP then takes the same steps as that single process (docs/ddp.md).
#pragma once

#include <cstdint>
#include <vector>

#include "ddp/process_group.h"

namespace distgrad::ddp {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;       // the same on every rank
  bool drop_last = false;  // cut the tail instead of padding
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, DistributedSamplerOptions options = {});
  // num_replicas and rank from the group.
  DistributedSampler(int64_t dataset_size, const ProcessGroup& group, DistributedSamplerOptions options = {});

  // Selects the order of epoch `epoch` (>= 0) for the following indices() calls.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // This rank's samples for the current epoch, num_samples() of them.
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace distgrad::ddp
