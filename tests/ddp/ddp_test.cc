// Process groups and DDP across real processes on loopback: each test runs a scenario of
// ddp_worker (tests/ddp/ddp_worker.cc) as every rank of a world of 1, 2 or 4.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/cuda.h"
#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_DDP_WORKER
#error "DISTGRAD_DDP_WORKER must name the ddp_worker binary (tests/ddp/CMakeLists.txt)"
#endif

namespace distgrad::rpc::testing {
namespace {

std::vector<ProcessResult> run_scenario(const std::string& scenario, int world_size,
                                        const Environment& extra_env = {}) {
  WorldOptions options;
  options.env = {{"OMP_NUM_THREADS", "1"}};
  options.env.insert(extra_env.begin(), extra_env.end());
  options.timeout = std::chrono::seconds(120);
  return run_world(DISTGRAD_DDP_WORKER, {scenario}, world_size, options);
}

void expect_scenario(const std::string& scenario, int world_size, const Environment& extra_env = {}) {
  const std::vector<ProcessResult> results = run_scenario(scenario, world_size, extra_env);
  for (const ProcessResult& result : results) EXPECT_TRUE(result.succeeded()) << "\n" << describe(results);
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, EveryOpDtypeAndUnevenSizeMatchesTheClosedForm) { expect_scenario("collectives", GetParam()); }
TEST_P(Collectives, SubgroupsRunTheirOwnCollectives) { expect_scenario("subgroups", GetParam()); }

class DataParallel : public ::testing::TestWithParam<int> {};

TEST_P(DataParallel, GradientsEqualTheSingleProcessGradientsOfTheWholeBatch) {
  expect_scenario("ddp_gradients", GetParam());
}
TEST_P(DataParallel, HalfPrecisionGradientsAndAutocastAverageOverTheRanks) { expect_scenario("ddp_half", GetParam()); }
TEST_P(DataParallel, NoSyncAccumulatesLocallyThenAveragesTheSum) { expect_scenario("ddp_no_sync", GetParam()); }
TEST_P(DataParallel, UnusedParametersAreNamedOrAveragedOverTheRanksThatUsedThem) {
  expect_scenario("ddp_unused", GetParam());
}
TEST_P(DataParallel, SyncBatchNormGivesTheWholeBatchGradientsAndStatistics) {
  expect_scenario("sync_batch_norm", GetParam());
}
TEST_P(DataParallel, BuffersFollowRankZeroAndAnotherModelIsRefused) { expect_scenario("ddp_buffers", GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallel, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return std::to_string(info.param); });

TEST(ProcessGroups, ShareTheJobStoreWithRpcAndOutliveIt) { expect_scenario("with_rpc", 3); }

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return std::to_string(info.param); });

TEST(CollectiveFailures, ARankDyingMidAllReduceFailsTheOthersBeforeTheTimeout) {
  const std::vector<ProcessResult> results = run_scenario("rank_dies", 3);
  for (const ProcessResult& result : results) {
    if (result.rank == 1) {
      EXPECT_EQ(result.exit_code, 3) << "\n" << describe(results);
    } else {
      EXPECT_TRUE(result.succeeded()) << "\n" << describe(results);
    }
  }
}

TEST(CollectiveFailures, RanksPassingDifferentSizesDtypesOrRootsFailAlikeAndTheGroupGoesOn) {
  expect_scenario("mismatched_sizes", 3);
}

TEST(CollectiveFailures, ARankThatNeverJoinsFailsTheOthersAtTheTimeout) { expect_scenario("rank_stalls", 2); }

TEST(CollectiveFailures, ARankThatDestroysItsGroupFailsTheOthersBeforeTheTimeout) { expect_scenario("rank_leaves", 2); }

TEST(SharedMemory, OffWhenTheRanksAreTakenForOtherHosts) {
  expect_scenario("same_host_off", 2, {{"DISTGRAD_SAME_HOST", "0"}});
}

TEST(SharedMemory, ABadSwitchInTheEnvironmentIsRefusedNamingIt) {
  expect_scenario("bad_switch", 1, {{"DISTGRAD_SHM", "yes"}});
}

// Only the default variant can check the choice (".gloo" turns shared memory off everywhere).
TEST(SharedMemory, OnlyWhenEveryRankOffersIt) {
  if (std::getenv("DISTGRAD_SHM") != nullptr) GTEST_SKIP() << "DISTGRAD_SHM is set";
  expect_scenario("shm_agreement", 4);
}

// NCCL needs one GPU per rank: one rank on the machine's first GPU (the CPU tests cover the
// multi-rank logic).
TEST(Nccl, EveryCollectiveAndADdpStepOnCudaTensors) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  expect_scenario("nccl", 1);
}

}  // namespace
}  // namespace distgrad::rpc::testing
