#include "ddp/distributed_sampler.h"

#include <numeric>

#include "core/error.h"
#include "data/data_loader.h"

namespace distgrad::ddp {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  DISTGRAD_CHECK(dataset_size >= 0, "DistributedSampler: the dataset size must be >= 0, found ", dataset_size);
  DISTGRAD_CHECK(num_replicas > 0, "DistributedSampler: num_replicas must be positive, found ", num_replicas);
  DISTGRAD_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " is not in [0, ", num_replicas,
                 ")");
  num_samples_ = options.drop_last ? dataset_size / num_replicas : (dataset_size + num_replicas - 1) / num_replicas;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, const ProcessGroup& group,
                                       DistributedSamplerOptions options)
    : DistributedSampler(dataset_size, group.size(), group.rank(), options) {}

void DistributedSampler::set_epoch(int64_t epoch) {
  DISTGRAD_CHECK(epoch >= 0, "DistributedSampler::set_epoch: expected an epoch >= 0, found ", epoch);
  epoch_ = epoch;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(dataset_size_);
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) order = data::shuffled(std::move(order), options_.seed + static_cast<uint64_t>(epoch_));
  const int64_t total = total_size();
  for (int64_t i = dataset_size_; i < total; ++i) order.push_back(order[(i - dataset_size_) % dataset_size_]);
  order.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(order[i]);
  return mine;
}

}  // namespace distgrad::ddp
