// DistributedSampler: shares that cover an epoch exactly once, padding, drop_last, set_epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "ddp/distributed_sampler.h"
#include "tests/core/test_util.h"

namespace distgrad::ddp {
namespace {

// Every rank's indices for the sampler's epoch, concatenated rank after rank.
std::vector<std::vector<int64_t>> shares(int64_t n, int replicas, int64_t epoch, DistributedSamplerOptions options) {
  std::vector<std::vector<int64_t>> result;
  for (int rank = 0; rank < replicas; ++rank) {
    DistributedSampler sampler(n, replicas, rank, options);
    sampler.set_epoch(epoch);
    result.push_back(sampler.indices());
  }
  return result;
}

TEST(DistributedSampler, SharesCoverTheDatasetExactlyOncePerEpoch) {
  for (int replicas : {1, 2, 3, 4}) {
    const auto parts = shares(120, replicas, 0, {.seed = 5});
    std::vector<int64_t> all;
    for (const auto& part : parts) {
      EXPECT_EQ(part.size(), 120u / replicas);
      all.insert(all.end(), part.begin(), part.end());
    }
    std::sort(all.begin(), all.end());
    for (int64_t i = 0; i < 120; ++i) EXPECT_EQ(all[i], i) << "with " << replicas << " replicas";
  }
}

TEST(DistributedSampler, PadsWithTheFirstSamplesOrDropsTheTail) {
  const auto padded = shares(10, 4, 0, {.shuffle = false});
  EXPECT_EQ(padded[0], (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(padded[1], (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(padded[2], (std::vector<int64_t>{2, 6, 0}));  // padding repeats sample 0, then 1
  EXPECT_EQ(padded[3], (std::vector<int64_t>{3, 7, 1}));
  const auto dropped = shares(10, 4, 0, {.shuffle = false, .drop_last = true});
  EXPECT_EQ(dropped[0], (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(dropped[3], (std::vector<int64_t>{3, 7}));
  const auto tiny = shares(1, 3, 0, {.shuffle = false});  // padding wraps more than once
  for (const auto& part : tiny) EXPECT_EQ(part, (std::vector<int64_t>{0}));
  EXPECT_TRUE(shares(0, 2, 0, {})[1].empty());
}

TEST(DistributedSampler, SetEpochChangesTheOrderAndTheSeedFixesIt) {
  const auto epoch0 = shares(64, 2, 0, {.seed = 1});
  EXPECT_EQ(epoch0, shares(64, 2, 0, {.seed = 1}));
  EXPECT_NE(epoch0, shares(64, 2, 1, {.seed = 1}));
  EXPECT_NE(epoch0, shares(64, 2, 0, {.seed = 2}));
}

TEST(DistributedSampler, TheUnionOfRankBatchesIsTheSingleProcessBatch) {
  // Batch k of B per rank over R ranks holds the samples of batch k of R * B in one process.
  const int replicas = 4, per_rank = 3;
  const auto parts = shares(96, replicas, 2, {.seed = 9});
  const std::vector<int64_t> single = shares(96, 1, 2, {.seed = 9})[0];
  for (int k = 0; k < 96 / (replicas * per_rank); ++k) {
    std::vector<int64_t> joined,
        expected(single.begin() + k * replicas * per_rank, single.begin() + (k + 1) * replicas * per_rank);
    for (const auto& part : parts)
      joined.insert(joined.end(), part.begin() + k * per_rank, part.begin() + (k + 1) * per_rank);
    std::sort(joined.begin(), joined.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(joined, expected) << "batch " << k;
  }
}

TEST(DistributedSampler, BadArgumentsAreNamed) {
  EXPECT_ERROR_CONTAINS(DistributedSampler(10, 0, 0), "num_replicas must be positive, found 0");
  EXPECT_ERROR_CONTAINS(DistributedSampler(10, 2, 2), "rank 2 is not in [0, 2)");
  EXPECT_ERROR_CONTAINS(DistributedSampler(-1, 2, 0), "dataset size must be >= 0, found -1");
  DistributedSampler sampler(10, 2, 0);
  EXPECT_ERROR_CONTAINS(sampler.set_epoch(-1), "expected an epoch >= 0, found -1");
}

}  // namespace
}  // namespace distgrad::ddp
