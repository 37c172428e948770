// Tests of remote references (rpc/rref.h) with real processes on loopback: every test runs a
// scenario of tests/rpc/rref_test_worker.cc as each rank of a world (tests/rpc/multiprocess.h);
// the scenarios check inside the workers, and a failure shows every rank's output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/rpc/multiprocess.h"
#include "tests/rpc/world_assertions.h"

#ifndef DISTGRAD_RREF_TEST_WORKER
#error "DISTGRAD_RREF_TEST_WORKER must name the rref_test_worker binary (tests/rpc/CMakeLists.txt)"
#endif

namespace distgrad::rpc::testing {
namespace {

using ::testing::HasSubstr;

std::vector<ProcessResult> run_scenario(const std::string& scenario, int world_size) {
  return run_world(DISTGRAD_RREF_TEST_WORKER, {scenario}, world_size);
}

// Runs `scenario` in a world of `world_size`; every rank must succeed and rank 0 print `passed`.
std::vector<ProcessResult> expect_passes(const std::string& scenario, int world_size, const std::string& passed) {
  std::vector<ProcessResult> results = run_scenario(scenario, world_size);
  EXPECT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr(passed)) << describe(results);
  return results;
}

TEST(RRef, RemoteToHereAndPassingToOtherWorkersAndBackToTheOwner) { expect_passes("basics", 3, "basics passed"); }

TEST(RRef, ValuesLiveWhileAnyWorkerHoldsAnRRefAndNoLonger) { expect_passes("lifetime", 4, "lifetime passed"); }

TEST(RRef, CreationErrorsSurfaceAtToHereAndAreLoggedWhenNeverFetched) {
  const std::vector<ProcessResult> results = expect_passes("errors", 3, "errors passed");
  EXPECT_THAT(results[1].output, HasSubstr("nobody fetched it: never fetched"));
}

TEST(RRef, RemoteObjectMethodsRunOnTheOwnerInTheOrderTheyWereMade) { expect_passes("objects", 3, "objects passed"); }

TEST(RRef, TenThousandRRefsLeaveNoValueAndNoMemoryBehind) { expect_passes("churn", 4, "churn passed"); }

TEST(RRef, ADeadOwnerFailsToHereAndMethodCallsNamingIt) {
  // worker2's graceful shutdown may fail once the driver stops without waiting for worker1.
  const std::vector<ProcessResult> results = run_scenario("owner_killed", 3);
  EXPECT_TRUE(results[0].succeeded()) << describe(results);
  EXPECT_EQ(results[1].signal, 9) << describe(results);
}

TEST(RRef, TheOwnerFreesWhatADeadUserHeld) {
  const std::vector<ProcessResult> results = run_scenario("user_killed", 3);
  EXPECT_TRUE(results[0].succeeded()) << describe(results);
  EXPECT_EQ(results[2].signal, 9) << describe(results);
  EXPECT_THAT(results[1].output, HasSubstr("worker2 exited holding 1 RRefs"));
}

TEST(RRef, GradientsThroughRemoteValuesAndObjectsEqualLocalAutograd) {
  expect_passes("gradients", 3, "gradients passed");
}

TEST(RRef, DistributedOptimizerStepsEachOwnerAsALocalOptimizerWould) {
  expect_passes("distributed_optimizer", 3, "distributed optimizer passed");
}

TEST(RRef, TwoTrainersDistributedOptimizersStepOneOwnerWithoutInterleaving) {
  expect_passes("trainers_sharing_an_owner", 2, "trainers sharing an owner passed");
}

// TorchOpt's RRef-per-iteration MAML pattern in fresh worlds: none may hang (each has a minute)
// or fail. DISTGRAD_RREF_FRESH_WORLDS sets how many (10 by default; docs/rpc.md records a run of
// 1,000).
TEST(RRef, TorchOptsRRefPerIterationPatternNeverHangsInFreshWorlds) {
  const char* set = std::getenv("DISTGRAD_RREF_FRESH_WORLDS");
  const int worlds = set != nullptr ? std::atoi(set) : 10;
  WorldOptions options;
  options.timeout = std::chrono::seconds(60);
  for (int world = 0; world < worlds; ++world) {
    const std::vector<ProcessResult> results = run_world(DISTGRAD_RREF_TEST_WORKER, {"rref_per_iteration"}, 3, options);
    ASSERT_TRUE(all_succeeded(results)) << "world " << world;
  }
}

}  // namespace
}  // namespace distgrad::rpc::testing
