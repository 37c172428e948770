#include "data/data_loader.h"

#include <algorithm>
#include <numeric>
#include <ranges>

#include "core/copy.h"
#include "core/creation.h"
#include "core/error.h"
#include "core/indexing.h"
#include "core/random.h"
#include "core/views.h"

namespace distgrad::data {
namespace {

static_assert(std::input_iterator<DataLoader::Iterator>);
static_assert(std::ranges::input_range<DataLoader>);

// The number of samples: the first dim that inputs and targets share.
int64_t check_rows(const Tensor& inputs, const Tensor& targets) {
  inputs.check_defined("DataLoader");
  targets.check_defined("DataLoader");
  DISTGRAD_CHECK(inputs.dim() > 0 && targets.dim() > 0,
                 "DataLoader: expected inputs and targets with at least one dimension (one row per sample), found "
                 "inputs of shape ",
                 shape_str(inputs.sizes()), " and targets of shape ", shape_str(targets.sizes()));
  DISTGRAD_CHECK(inputs.size(0) == targets.size(0),
                 "DataLoader: expected inputs and targets with the same first dimension (one row per sample), found "
                 "inputs of shape ",
                 shape_str(inputs.sizes()), " and targets of shape ", shape_str(targets.sizes()));
  return inputs.size(0);
}

std::vector<int64_t> all_rows(const Tensor& inputs, const Tensor& targets) {
  std::vector<int64_t> rows(check_rows(inputs, targets));
  std::iota(rows.begin(), rows.end(), 0);
  return rows;
}

}  // namespace

// Generator has no randperm, hence the shuffle here.
std::vector<int64_t> shuffled(std::vector<int64_t> indices, uint64_t seed) {
  Generator generator(seed);
  for (size_t remaining = indices.size(); remaining > 1; --remaining) {
    int64_t pick = 0;  // uniform in [0, remaining)
    generator.fill_integers(&pick, kInt64, 1, 0, static_cast<int64_t>(remaining));
    std::swap(indices[remaining - 1], indices[pick]);
  }
  return indices;
}

DataLoader::DataLoader(Tensor inputs, Tensor targets, DataLoaderOptions options)
    : DataLoader(inputs, targets, all_rows(inputs, targets), options) {}

DataLoader::DataLoader(Tensor inputs, Tensor targets, std::span<const int64_t> indices, DataLoaderOptions options)
    : inputs_(std::move(inputs)),
      targets_(std::move(targets)),
      options_(options),
      indices_(indices.begin(), indices.end()) {
  const int64_t rows = check_rows(inputs_, targets_);
  DISTGRAD_CHECK(options_.batch_size > 0, "DataLoader: expected a positive batch_size, found ", options_.batch_size);
  for (size_t i = 0; i < indices_.size(); ++i) {
    DISTGRAD_CHECK(indices_[i] >= 0 && indices_[i] < rows, "DataLoader: expected sample indices in [0, ", rows,
                   ") (the first dimension of inputs of shape ", shape_str(inputs_.sizes()), "), found ", indices_[i],
                   " at position ", i);
  }
  const bool all_rows_in_order =
      static_cast<int64_t>(indices_.size()) == rows && std::ranges::equal(indices_, std::views::iota(int64_t{0}, rows));
  batches_are_views_ = all_rows_in_order && !options_.shuffle;
  set_epoch(0);
}

void DataLoader::set_epoch(int64_t epoch) {
  DISTGRAD_CHECK(epoch >= 0, "DataLoader::set_epoch: expected a non-negative epoch, found ", epoch);
  epoch_ = epoch;
  if (options_.shuffle) {
    order_ =
        std::make_shared<const std::vector<int64_t>>(shuffled(indices_, options_.seed + static_cast<uint64_t>(epoch)));
  } else if (order_ == nullptr) {
    order_ = std::make_shared<const std::vector<int64_t>>(indices_);
  }
}

int64_t DataLoader::size() const {
  const int64_t samples = num_samples();
  const int64_t batch_size = options_.batch_size;
  return options_.drop_last ? samples / batch_size : (samples + batch_size - 1) / batch_size;
}

DataLoader::Iterator DataLoader::begin() const { return Iterator(this, order_, 0); }

DataLoader::Iterator DataLoader::end() const { return Iterator(this, order_, size()); }

Batch DataLoader::make_batch(const std::vector<int64_t>& order, int64_t begin, int64_t end) const {
  if (batches_are_views_) {
    return {.inputs = untracked::narrow(inputs_, 0, begin, end - begin),
            .targets = untracked::narrow(targets_, 0, begin, end - begin)};
  }
  const Tensor index = from_vector(std::vector<int64_t>(order.begin() + begin, order.begin() + end));
  return {.inputs = untracked::index_select(inputs_, 0, untracked::to(index, inputs_.device())),
          .targets = untracked::index_select(targets_, 0, untracked::to(index, targets_.device()))};
}

Batch DataLoader::Iterator::operator*() const {
  const int64_t batch_size = loader_->options_.batch_size;
  const auto samples = static_cast<int64_t>(order_->size());
  const int64_t begin = batch_ * batch_size;
  DISTGRAD_CHECK(begin < samples, "DataLoader: dereferenced batch ", batch_, " of an epoch of ", loader_->size(),
                 " batches");
  return loader_->make_batch(*order_, begin, std::min(begin + batch_size, samples));
}

}  // namespace distgrad::data
