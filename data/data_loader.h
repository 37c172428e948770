// DataLoader: mini-batches over in-memory tensors, in order or shuffled, as PyTorch's
// DataLoader over a TensorDataset.
//
// Sample i is row i (along dim 0) of both `inputs` and `targets`. A loader visits every
// sample of its index list (all rows by default) once per epoch, in batches of
// `batch_size`; the last batch is smaller unless `drop_last` drops it. In order and over all
// rows, batches are views (untracked::narrow) of the tensors; otherwise they are copies
// (untracked::index_select).
//
// Note [Deterministic shuffle]
// The order of epoch e is a permutation of the index list drawn by a Fisher-Yates shuffle
// from distgrad::Generator(seed + e), as torch's DistributedSampler seeds with seed + epoch.
// The Generator is a Mersenne Twister and the shuffle draws integers by rejection with
// unsigned arithmetic, so a (seed, epoch) pair gives the same order on every run, compiler
// and machine (std::shuffle would not: its algorithm is implementation-defined). Ranks that
// share a seed and call set_epoch(e) alike shuffle alike.
//
//   DataLoader loader(images, labels, {.batch_size = 64, .shuffle = true, .seed = 42});
//   for (int64_t epoch = 0; epoch < 10; ++epoch) {
//     loader.set_epoch(epoch);
//     for (const Batch& batch : loader) train_step(batch.inputs, batch.targets);
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace distgrad::data {

// `indices` permuted by a Fisher-Yates shuffle drawing from Generator(seed), the same on every
// run and machine (Note [Deterministic shuffle]); the loaders and DistributedSampler use it.
std::vector<int64_t> shuffled(std::vector<int64_t> indices, uint64_t seed);

struct DataLoaderOptions {
  int64_t batch_size = 64;  // must be positive
  bool shuffle = false;     // a new order each epoch (see Note [Deterministic shuffle])
  bool drop_last = false;   // drop the last batch when it is smaller than batch_size
  uint64_t seed = 0;        // with the epoch, seeds the shuffle
};

// One mini-batch: rows of the loader's inputs and targets, in matching order.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

class DataLoader {
 public:
  class Iterator;

  // Batches over every row of inputs and targets, which must share their first dim.
  DataLoader(Tensor inputs, Tensor targets, DataLoaderOptions options = {});
  // Batches over the rows in `indices` only (each in [0, rows); repeats allowed; copied), in
  // that order unless shuffled: for example the share of one rank under a distributed
  // sampler. A span rather than a vector, so that `{.batch_size = 8}` can only mean options
  // (GCC finds a vector parameter ambiguous with it); pass a std::vector<int64_t>.
  DataLoader(Tensor inputs, Tensor targets, std::span<const int64_t> indices, DataLoaderOptions options = {});

  // Selects the shuffle of epoch `epoch` (>= 0) for the iterations that begin after this call.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // Number of batches in an epoch.
  int64_t size() const;
  // Number of samples in an epoch, counting those of a dropped last batch.
  int64_t num_samples() const { return static_cast<int64_t>(indices_.size()); }
  const DataLoaderOptions& options() const { return options_; }

  // An iteration visits the order of the epoch current at begin(); set_epoch during it does
  // not change it.
  Iterator begin() const;
  Iterator end() const;

  // Walks the batches of one epoch; each dereference builds that batch.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;

    Iterator() = default;

    Batch operator*() const;
    Iterator& operator++() {
      ++batch_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator previous = *this;
      ++batch_;
      return previous;
    }
    bool operator==(const Iterator& other) const { return batch_ == other.batch_; }

   private:
    friend class DataLoader;
    Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order, int64_t batch)
        : loader_(loader), order_(std::move(order)), batch_(batch) {}

    const DataLoader* loader_ = nullptr;
    std::shared_ptr<const std::vector<int64_t>> order_;  // the epoch's sample order
    int64_t batch_ = 0;
  };

 private:
  // Rows order[begin, end) of inputs and targets.
  Batch make_batch(const std::vector<int64_t>& order, int64_t begin, int64_t end) const;

  Tensor inputs_;
  Tensor targets_;
  DataLoaderOptions options_;
  std::vector<int64_t> indices_;  // the samples of an epoch, unshuffled
  bool batches_are_views_;        // unshuffled over 0..rows-1: batches narrow the tensors
  int64_t epoch_ = 0;
  std::shared_ptr<const std::vector<int64_t>> order_;  // indices_ in the order of epoch_
};

}  // namespace distgrad::data
