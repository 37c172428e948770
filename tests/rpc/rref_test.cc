// Tests of remote references (rpc/rref.h) with real processes on loopback: every test runs a
// scenario of tests/rpc/rref_test_worker.cc as each rank of a world (tests/rpc/multiprocess.h);
// the scenarios check inside the workers, and a failure shows every rank's output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_RREF_TEST_WORKER
#error "DISTGRAD_RREF_TEST_WORKER must name the rref_test_worker binary (tests/rpc/CMakeLists.txt)"
#endif

namespace distgrad::rpc::testing {
namespace {

using ::testing::HasSubstr;

std::vector<ProcessResult> run_scenario(const std::string& scenario, int world_size) {
  return run_world(DISTGRAD_RREF_TEST_WORKER, {scenario}, world_size);
}

::testing::AssertionResult all_succeeded(const std::vector<ProcessResult>& results) {
  for (const ProcessResult& result : results) {
    if (!result.succeeded()) return ::testing::AssertionFailure() << "\n" << describe(results);
  }
  return ::testing::AssertionSuccess();
}

TEST(RRef, RemoteToHereAndPassingToOtherWorkersAndBackToTheOwner) {
  const std::vector<ProcessResult> results = run_scenario("basics", 3);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("basics passed"));
}

TEST(RRef, ValuesLiveWhileAnyWorkerHoldsAnRRefAndNoLonger) {
  const std::vector<ProcessResult> results = run_scenario("lifetime", 4);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("lifetime passed"));
}

TEST(RRef, CreationErrorsSurfaceAtToHereAndAreLoggedWhenNeverFetched) {
  const std::vector<ProcessResult> results = run_scenario("errors", 3);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("errors passed"));
  EXPECT_THAT(results[1].output, HasSubstr("nobody fetched it: never fetched"));
}

TEST(RRef, RemoteObjectMethodsRunOnTheOwnerInTheOrderTheyWereMade) {
  const std::vector<ProcessResult> results = run_scenario("objects", 3);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("objects passed"));
}

TEST(RRef, TenThousandRRefsLeaveNoValueAndNoMemoryBehind) {
  const std::vector<ProcessResult> results = run_scenario("churn", 4);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("churn passed"));
}

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
  const std::vector<ProcessResult> results = run_scenario("gradients", 3);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("gradients passed"));
}

TEST(RRef, DistributedOptimizerStepsEachOwnerAsALocalOptimizerWould) {
  const std::vector<ProcessResult> results = run_scenario("distributed_optimizer", 3);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("distributed optimizer passed"));
}

}  // namespace
}  // namespace distgrad::rpc::testing
