// DataLoader: batch counts and sizes, views when in order, every sample once per epoch, the
// deterministic shuffle of Note [Deterministic shuffle], explicit index lists, and errors.
//
// Sample i has inputs row [2i, 2i + 1] and target 100 + i, so a batch shows which samples it
// holds and whether its inputs and targets stay paired.
#include "data/data_loader.h"

#include <algorithm>
#include <numeric>

#include "tests/core/test_util.h"

namespace distgrad::data {
namespace {

Tensor inputs_of(int64_t samples) { return untracked::reshape(arange(2 * samples), {samples, 2}); }
Tensor targets_of(int64_t samples) { return arange(100, 100 + samples); }

// The sample numbers of every batch of one epoch, checking that inputs and targets agree.
std::vector<std::vector<int64_t>> epoch_samples(const DataLoader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (const Batch& batch : loader) {
    const std::vector<int64_t> inputs = batch.inputs.to_vector<int64_t>();
    const std::vector<int64_t> targets = batch.targets.to_vector<int64_t>();
    EXPECT_EQ(inputs.size(), 2 * targets.size());
    std::vector<int64_t> samples;
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t sample = targets[i] - 100;
      EXPECT_EQ(inputs[2 * i], 2 * sample);
      EXPECT_EQ(inputs[2 * i + 1], 2 * sample + 1);
      samples.push_back(sample);
    }
    batches.push_back(samples);
  }
  return batches;
}

std::vector<int64_t> flattened(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& batch : batches) all.insert(all.end(), batch.begin(), batch.end());
  return all;
}

std::vector<int64_t> sorted(std::vector<int64_t> values) {
  std::sort(values.begin(), values.end());
  return values;
}

std::vector<int64_t> range_of(int64_t n) {
  std::vector<int64_t> values(n);
  std::iota(values.begin(), values.end(), 0);
  return values;
}

TEST(DataLoader, BatchCountWithAndWithoutDropLast) {
  const Tensor x = inputs_of(10), y = targets_of(10);
  EXPECT_EQ(DataLoader(x, y, {.batch_size = 3}).size(), 4);
  EXPECT_EQ(DataLoader(x, y, {.batch_size = 3, .drop_last = true}).size(), 3);
  EXPECT_EQ(DataLoader(x, y, {.batch_size = 5}).size(), 2);
  EXPECT_EQ(DataLoader(x, y, {.batch_size = 5, .drop_last = true}).size(), 2);
  EXPECT_EQ(DataLoader(x, y, {.batch_size = 64}).size(), 1);
  EXPECT_EQ(DataLoader(x, y, {.batch_size = 64, .drop_last = true}).size(), 0);
  EXPECT_EQ(DataLoader(x, y).options().batch_size, 64);
  EXPECT_EQ(DataLoader(x, y).num_samples(), 10);
}

TEST(DataLoader, LastBatchIsPartialUnlessDropped) {
  const Tensor x = inputs_of(10), y = targets_of(10);
  const DataLoader loader(x, y, {.batch_size = 4});
  const auto batches = epoch_samples(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], std::vector<int64_t>({0, 1, 2, 3}));
  EXPECT_EQ(batches[2], std::vector<int64_t>({8, 9}));
  std::vector<Shape> shapes;
  for (const Batch& batch : loader) shapes.push_back(batch.inputs.sizes());
  EXPECT_EQ(shapes, std::vector<Shape>({{4, 2}, {4, 2}, {2, 2}}));

  const auto kept = epoch_samples(DataLoader(x, y, {.batch_size = 4, .drop_last = true}));
  EXPECT_EQ(kept, std::vector<std::vector<int64_t>>({{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(DataLoader, InOrderBatchesAreViews) {
  const Tensor x = inputs_of(10), y = targets_of(10);
  int64_t start = 0;
  for (const Batch& batch : DataLoader(x, y, {.batch_size = 3})) {
    EXPECT_EQ(batch.inputs.data_ptr(), x.data<int64_t>() + 2 * start);
    EXPECT_EQ(batch.targets.data_ptr(), y.data<int64_t>() + start);
    start += batch.targets.size(0);
  }
  EXPECT_EQ(start, 10);
}

TEST(DataLoader, EverySampleOncePerShuffledEpoch) {
  DataLoader loader(inputs_of(50), targets_of(50), {.batch_size = 8, .shuffle = true, .seed = 3});
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    loader.set_epoch(epoch);
    EXPECT_EQ(loader.epoch(), epoch);
    const auto batches = epoch_samples(loader);
    ASSERT_EQ(batches.size(), 7u);
    EXPECT_EQ(batches.back().size(), 2u);
    EXPECT_EQ(sorted(flattened(batches)), range_of(50)) << "epoch " << epoch;
  }
}

TEST(DataLoader, ShuffledBatchesAreCopies) {
  const Tensor x = inputs_of(6), y = targets_of(6);
  for (const Batch& batch : DataLoader(x, y, {.batch_size = 6, .shuffle = true})) {
    EXPECT_NE(batch.inputs.storage().data(), x.storage().data());
    EXPECT_TRUE(batch.inputs.is_contiguous());
  }
}

TEST(DataLoader, ShuffleIsFixedBySeedAndEpoch) {
  // Golden orders, computed independently by a Python transcription of std::mt19937_64 and of
  // the Fisher-Yates shuffle (Note [Deterministic shuffle]): they hold on every machine.
  const Tensor x = inputs_of(10), y = targets_of(10);
  DataLoader loader(x, y, {.batch_size = 10, .shuffle = true, .seed = 0});
  EXPECT_EQ(flattened(epoch_samples(loader)), std::vector<int64_t>({7, 2, 0, 8, 3, 9, 6, 1, 5, 4}));
  loader.set_epoch(1);
  EXPECT_EQ(flattened(epoch_samples(loader)), std::vector<int64_t>({1, 7, 3, 9, 4, 0, 5, 2, 6, 8}));
  DataLoader other(x, y, {.batch_size = 4, .shuffle = true, .seed = 42});
  other.set_epoch(3);  // seeded by 42 + 3
  EXPECT_EQ(flattened(epoch_samples(other)), std::vector<int64_t>({4, 7, 2, 8, 0, 5, 6, 3, 9, 1}));
}

TEST(DataLoader, SameSeedAndEpochGiveTheSameOrderAndOthersDiffer) {
  const Tensor x = inputs_of(100), y = targets_of(100);
  const DataLoaderOptions options = {.batch_size = 16, .shuffle = true, .seed = 1234};
  DataLoader a(x, y, options), b(x, y, options);
  a.set_epoch(5);
  b.set_epoch(5);
  const std::vector<int64_t> order = flattened(epoch_samples(a));
  EXPECT_EQ(flattened(epoch_samples(b)), order);
  EXPECT_EQ(flattened(epoch_samples(a)), order) << "iterating again repeats the epoch";
  a.set_epoch(6);
  EXPECT_NE(flattened(epoch_samples(a)), order);
  a.set_epoch(5);
  EXPECT_EQ(flattened(epoch_samples(a)), order);
  DataLoader c(x, y, {.batch_size = 16, .shuffle = true, .seed = 1235});
  c.set_epoch(5);
  EXPECT_NE(flattened(epoch_samples(c)), order);
}

TEST(DataLoader, UnshuffledOrderIgnoresTheEpoch) {
  DataLoader loader(inputs_of(7), targets_of(7), {.batch_size = 3});
  loader.set_epoch(9);
  EXPECT_EQ(flattened(epoch_samples(loader)), range_of(7));
}

TEST(DataLoader, SetEpochDoesNotDisturbARunningIteration) {
  DataLoader loader(inputs_of(10), targets_of(10), {.batch_size = 5, .shuffle = true});
  const std::vector<int64_t> epoch0 = flattened(epoch_samples(loader));
  std::vector<int64_t> seen;
  for (const Batch& batch : loader) {
    loader.set_epoch(1);
    for (int64_t target : batch.targets.to_vector<int64_t>()) seen.push_back(target - 100);
  }
  EXPECT_EQ(seen, epoch0);
}

TEST(DataLoader, ExplicitIndicesAreVisitedInOrder) {
  const DataLoader loader(inputs_of(10), targets_of(10), std::vector<int64_t>{7, 2, 2, 9}, {.batch_size = 3});
  EXPECT_EQ(loader.size(), 2);
  EXPECT_EQ(loader.num_samples(), 4);
  EXPECT_EQ(epoch_samples(loader), std::vector<std::vector<int64_t>>({{7, 2, 2}, {9}}));
}

TEST(DataLoader, ExplicitIndicesAreShuffledAmongThemselves) {
  // The shuffle permutes positions in the list (Python transcription, as above).
  const DataLoader loader(inputs_of(10), targets_of(10), std::vector<int64_t>{7, 2, 2, 9, 4},
                          {.batch_size = 2, .shuffle = true, .seed = 5});
  EXPECT_EQ(flattened(epoch_samples(loader)), std::vector<int64_t>({2, 9, 4, 7, 2}));
}

TEST(DataLoader, ExplicitIndicesSplitAcrossRanksCoverEverySample) {
  // What a distributed sampler will do: rank r of 3 takes samples r, r + 3, ...
  const Tensor x = inputs_of(11), y = targets_of(11);
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 3; ++rank) {
    std::vector<int64_t> share;
    for (int64_t i = rank; i < 11; i += 3) share.push_back(i);
    const auto samples = flattened(epoch_samples(DataLoader(x, y, share, {.batch_size = 2})));
    EXPECT_EQ(samples, share);
    all.insert(all.end(), samples.begin(), samples.end());
  }
  EXPECT_EQ(sorted(all), range_of(11));
}

TEST(DataLoader, EmptyDatasetHasNoBatches) {
  const DataLoader loader(inputs_of(0), targets_of(0), {.batch_size = 4, .shuffle = true});
  EXPECT_EQ(loader.size(), 0);
  EXPECT_TRUE(loader.begin() == loader.end());
  const DataLoader no_indices(inputs_of(5), targets_of(5), std::vector<int64_t>{}, {.batch_size = 4});
  EXPECT_EQ(no_indices.size(), 0);
}

TEST(DataLoader, WorksWithStandardAlgorithms) {
  const DataLoader loader(inputs_of(10), targets_of(10), {.batch_size = 3});
  EXPECT_EQ(std::distance(loader.begin(), loader.end()), loader.size());
}

TEST(DataLoader, NonPositiveBatchSizeIsAnError) {
  EXPECT_ERROR_CONTAINS(DataLoader(inputs_of(4), targets_of(4), {.batch_size = 0}),
                        "DataLoader: expected a positive batch_size, found 0");
  EXPECT_ERROR_CONTAINS(DataLoader(inputs_of(4), targets_of(4), {.batch_size = -2}), "found -2");
}

TEST(DataLoader, MismatchedFirstDimNamesBothShapes) {
  EXPECT_ERROR_CONTAINS(DataLoader(inputs_of(10), targets_of(9)),
                        "DataLoader: expected inputs and targets with the same first dimension (one row per sample), "
                        "found inputs of shape [10, 2] and targets of shape [9]");
  EXPECT_ERROR_CONTAINS(DataLoader(scalar_tensor(1), targets_of(1)),
                        "expected inputs and targets with at least one dimension",
                        "found inputs of shape [] and targets of shape [1]");
  EXPECT_ERROR_CONTAINS(DataLoader(Tensor(), targets_of(1)), "DataLoader: expected a defined tensor");
}

TEST(DataLoader, OutOfRangeIndexIsAnError) {
  EXPECT_ERROR_CONTAINS(DataLoader(inputs_of(10), targets_of(10), std::vector<int64_t>{1, 10}),
                        "DataLoader: expected sample indices in [0, 10) (the first dimension of inputs of shape "
                        "[10, 2]), found 10 at position 1");
  EXPECT_ERROR_CONTAINS(DataLoader(inputs_of(10), targets_of(10), std::vector<int64_t>{-1}), "found -1 at position 0");
}

TEST(DataLoader, NegativeEpochIsAnError) {
  DataLoader loader(inputs_of(4), targets_of(4));
  EXPECT_ERROR_CONTAINS(loader.set_epoch(-1), "DataLoader::set_epoch: expected a non-negative epoch, found -1");
}

}  // namespace
}  // namespace distgrad::data
