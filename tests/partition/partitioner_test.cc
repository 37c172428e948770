// Partitioners and reducers in one process, in a world of 4 (set below, before the world is read):
// every row of the edge-case table of docs/map-reduce.md, workers by rank and by name, nested
// tensors, differentiable splits, and reducers over tensors, numbers, tuples and structs.
#include "partition/partitioner.h"

#include <stdlib.h>

#include "autograd/autograd.h"
#include "partition/reducer.h"
#include "tests/core/test_util.h"

namespace partition_test {

struct Batch {
  distgrad::Tensor x;
  std::vector<distgrad::Tensor> extras;
  int shots = 0;
};
DISTGRAD_CODEC(Batch, x, extras, shots);

struct Metrics {
  distgrad::Tensor loss;
  double accuracy = 0;
  int64_t count = 0;
};
DISTGRAD_CODEC(Metrics, loss, accuracy, count);

}  // namespace partition_test

namespace distgrad {
namespace {

using testing::values;

// The world these tests run in: rank 0 of 4 (world info is read on first use, after this).
const bool kWorldOfFour = (setenv("RANK", "0", 1), setenv("WORLD_SIZE", "4", 1), true);

Tensor batch_of(int64_t size, Shape rest = {}) {
  Shape sizes{size};
  sizes.insert(sizes.end(), rest.begin(), rest.end());
  return untracked::reshape(arange(0.0, static_cast<double>(shape_numel(sizes)), 1.0, {.dtype = kFloat64}), sizes);
}

template <typename... Args>
std::vector<int64_t> sizes_on_dim0(const Partitions<Args...>& calls) {
  std::vector<int64_t> sizes;
  for (const auto& [worker, arguments] : calls) sizes.push_back(std::get<0>(arguments).size(0));
  return sizes;
}

template <typename... Args>
std::vector<int> workers_of(const Partitions<Args...>& calls) {
  std::vector<int> workers;
  for (const auto& [worker, arguments] : calls) workers.push_back(worker);
  return workers;
}

TEST(DimPartitioner, MoreSamplesThanWorkersMakesChunksWithTheRemainderLast) {
  const auto calls = batch_partitioner(args(batch_of(10)));
  EXPECT_EQ(sizes_on_dim0(calls), (std::vector<int64_t>{2, 2, 2, 4}));
  EXPECT_EQ(workers_of(calls), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(values(std::get<0>(calls[3].second)), (std::vector<double>{6, 7, 8, 9}));
}

TEST(DimPartitioner, AtMostOneSamplePerWorkerKeepsTheDim) {
  const auto calls = batch_partitioner(args(batch_of(3, {2})));
  EXPECT_EQ(sizes_on_dim0(calls), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(workers_of(calls), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(std::get<0>(calls[2].second).sizes(), (Shape{1, 2}));
}

TEST(DimPartitioner, ExclusiveMakesOneCallPerSampleRoundRobin) {
  const auto dropped = dim_partitioner(0, {.exclusive = true, .keepdim = false})(args(batch_of(6, {3})));
  EXPECT_EQ(workers_of(dropped), (std::vector<int>{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(std::get<0>(dropped[5].second).sizes(), (Shape{3}));
  EXPECT_EQ(values(std::get<0>(dropped[5].second)), (std::vector<double>{15, 16, 17}));
  const auto kept = dim_partitioner(0, {.exclusive = true})(args(batch_of(6, {3})));
  EXPECT_EQ(std::get<0>(kept[5].second).sizes(), (Shape{1, 3}));
}

TEST(DimPartitioner, ExclusiveBatchPartitionerKeepsTheDimAsTorchOpts) {
  // TorchOpt: exclusive_batch_partitioner = dim_partitioner(dim=0, keepdim=True, exclusive=True).
  const auto calls = exclusive_batch_partitioner(args(batch_of(6, {3})));
  EXPECT_EQ(workers_of(calls), (std::vector<int>{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(std::get<0>(calls[5].second).sizes(), (Shape{1, 3}));
  EXPECT_EQ(values(std::get<0>(calls[5].second)), (std::vector<double>{15, 16, 17}));
  EXPECT_TRUE(exclusive_batch_partitioner.options().exclusive);
  EXPECT_TRUE(exclusive_batch_partitioner.options().keepdim);
}

TEST(DimPartitioner, KeepdimFalseWithoutExclusiveIsAnErrorAtConstruction) {
  EXPECT_ERROR_CONTAINS(dim_partitioner(0, {.keepdim = false}), "keepdim=false should be used with exclusive=true");
}

TEST(DimPartitioner, NoTensorsMeansOneCallOnTheCallersRank) {
  const auto calls = batch_partitioner(args(std::string("no tensors"), 7));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].first, 0);
  EXPECT_EQ(std::get<1>(calls[0].second), 7);
}

TEST(DimPartitioner, NegativeDimsCountFromTheEndAndWorkersCanBeChosen) {
  const auto calls = dim_partitioner(-1, {.workers = {3, 1}})(args(batch_of(2, {5})));
  EXPECT_EQ(workers_of(calls), (std::vector<int>{3, 1}));
  EXPECT_EQ(std::get<0>(calls[0].second).sizes(), (Shape{2, 2}));
  EXPECT_EQ(std::get<0>(calls[1].second).sizes(), (Shape{2, 3}));
  EXPECT_ERROR_CONTAINS(dim_partitioner(0, {.workers = {4}})(args(batch_of(2))),
                        "dim_partitioner: worker 4 is not a rank of this world of 4 (expected 0..3 or a name "
                        "worker0..worker3)");
}

TEST(DimPartitioner, WorkersCanBeGivenByNameOrRank) {
  const auto named = dim_partitioner(0, {.workers = {"worker1"}})(args(batch_of(3)));
  EXPECT_EQ(workers_of(named), (std::vector<int>{1}));
  EXPECT_EQ(sizes_on_dim0(named), (std::vector<int64_t>{3}));
  const auto mixed = dim_partitioner(0, {.workers = {1, "worker2", std::string("worker3")}})(args(batch_of(7)));
  EXPECT_EQ(workers_of(mixed), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(sizes_on_dim0(mixed), (std::vector<int64_t>{2, 2, 3}));
  const auto round_robin = dim_partitioner(0, {.exclusive = true, .workers = {"worker3", 0}})(args(batch_of(3)));
  EXPECT_EQ(workers_of(round_robin), (std::vector<int>{3, 0, 3}));
}

TEST(DimPartitioner, AnUnknownWorkerNameIsAnErrorNamingIt) {
  const DimPartitioner partitioner = dim_partitioner(0, {.workers = {1, "worker4"}});  // names resolve at the call
  EXPECT_ERROR_CONTAINS(partitioner(args(batch_of(2))),
                        "dim_partitioner: worker \"worker4\" is not a rank of this world of 4 (expected 0..3 or a "
                        "name worker0..worker3)");
  EXPECT_ERROR_CONTAINS(dim_partitioner(0, {.workers = {"worker01"}})(args(batch_of(2))), "worker \"worker01\"");
  EXPECT_ERROR_CONTAINS(dim_partitioner(0, {.workers = {"trainer1"}})(args(batch_of(2))), "worker \"trainer1\"");
}

TEST(DimPartitioner, AnEmptyBatchMakesNoCalls) {
  EXPECT_TRUE(batch_partitioner(args(batch_of(0, {3}))).empty());
  EXPECT_TRUE(exclusive_batch_partitioner(args(batch_of(0))).empty());
}

TEST(DimPartitioner, BatchSizeMismatchNamesTheDimAndTheShape) {
  EXPECT_ERROR_CONTAINS(batch_partitioner(args(batch_of(4), batch_of(3, {2}))),
                        "Batch size mismatch on dim=0. Expected 4, got 3 (shape: [3, 2]).");
  EXPECT_ERROR_CONTAINS(batch_partitioner(args(scalar_tensor(1))), "cannot split a 0-dim tensor");
}

TEST(DimPartitioner, SplitsTensorsNestedAnywhereAndBroadcastsParamDicts) {
  const nn::ParamDict params({{"w", ones({3, 3})}});
  const partition_test::Batch batch{batch_of(4), {batch_of(4, {2})}, 5};
  const std::map<std::string, std::optional<Tensor>> named = {{"y", batch_of(4)}, {"none", std::nullopt}};
  const Split per_sample{nn::ParamDict({{"z", batch_of(4, {1})}})};
  const auto calls = batch_partitioner(args(params, batch, named, per_sample, std::make_tuple(batch_of(4), 1.5)));
  ASSERT_EQ(calls.size(), 4u);
  const auto& [worker, arguments] = calls[1];
  EXPECT_TRUE(std::get<0>(arguments).at("w").is_same(params.at("w")));  // model parameters: the same tensors
  EXPECT_EQ(values(std::get<1>(arguments).x), (std::vector<double>{1}));
  EXPECT_EQ(std::get<1>(arguments).extras[0].sizes(), (Shape{1, 2}));
  EXPECT_EQ(std::get<1>(arguments).shots, 5);
  EXPECT_EQ(values(*std::get<2>(arguments).at("y")), (std::vector<double>{1}));
  EXPECT_FALSE(std::get<2>(arguments).at("none").has_value());
  EXPECT_EQ(std::get<3>(arguments).tensors.at("z").sizes(), (Shape{1, 1}));
  EXPECT_EQ(std::get<1>(std::get<4>(arguments)), 1.5);
}

TEST(DimPartitioner, SplitsAreViewsThatCarryGradientsBack) {
  const Tensor x = batch_of(10, {2});
  x.requires_grad_();
  Tensor total = zeros({}, {.dtype = kFloat64});
  for (const auto& [worker, arguments] : batch_partitioner(args(x))) {
    const Tensor& part = std::get<0>(arguments);
    EXPECT_EQ(part.storage().data(), x.storage().data());
    total = total + (part * static_cast<double>(worker + 1)).sum();
  }
  total.backward();
  // Rows 0-1 went to worker 0, 2-3 to 1, 4-5 to 2, 6-9 to 3.
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4}));
}

TEST(DimPartitioner, IsAPlainCopyableValue) {
  const DimPartitioner original = dim_partitioner(1, {.exclusive = true});
  DimPartitioner copy = original;
  copy = batch_partitioner;
  EXPECT_EQ(original.dim(), 1);
  EXPECT_TRUE(original.options().exclusive);
  EXPECT_EQ(copy.dim(), 0);
}

TEST(Reducers, TensorsAreStackedAndFoldedDifferentiably) {
  const Tensor a = from_vector<double>({1, 2}), b = from_vector<double>({3, 6});
  a.requires_grad_();
  const Tensor mean = mean_reducer(std::vector<Tensor>{a, b});
  EXPECT_EQ(values(mean), (std::vector<double>{2, 4}));
  EXPECT_EQ(values(sum_reducer(std::vector<Tensor>{a, b})), (std::vector<double>{4, 8}));
  mean.sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{0.5, 0.5}));
}

TEST(Reducers, NumbersTuplesAndStructsFoldFieldByField) {
  EXPECT_DOUBLE_EQ(mean_reducer(std::vector<int>{1, 2}), 1.5);
  EXPECT_EQ(sum_reducer(std::vector<int64_t>{1, 2, 3}), 6);
  const auto [loss, accuracy] = mean_reducer(std::vector<std::tuple<Tensor, double>>{
      {scalar_tensor(1.0, {.dtype = kFloat64}), 0.5}, {scalar_tensor(3.0, {.dtype = kFloat64}), 1.0}});
  EXPECT_DOUBLE_EQ(loss.item<double>(), 2);
  EXPECT_DOUBLE_EQ(accuracy, 0.75);
  const partition_test::Metrics metrics =
      sum_reducer(std::vector<partition_test::Metrics>{{scalar_tensor(1.0), 0.25, 3}, {scalar_tensor(2.0), 0.5, 4}});
  EXPECT_FLOAT_EQ(metrics.loss.item<float>(), 3);
  EXPECT_DOUBLE_EQ(metrics.accuracy, 0.75);
  EXPECT_EQ(metrics.count, 7);
  EXPECT_ERROR_CONTAINS(mean_reducer(std::vector<double>{}), "mean_reducer: no results to reduce");
}

}  // namespace
}  // namespace distgrad
