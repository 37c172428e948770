// Map-reduce calls across real processes on loopback: each test runs a scenario of
// partition_worker (tests/partition/partition_worker.cc) as every rank of a world; rank 0 checks
// what comes back and exits non-zero, naming the failed check, when something is wrong.
#include <gtest/gtest.h>

#include <string>

#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_PARTITION_WORKER
#error "DISTGRAD_PARTITION_WORKER must name the partition_worker binary (tests/partition/CMakeLists.txt)"
#endif

namespace distgrad::rpc::testing {
namespace {

void expect_scenario(const std::string& scenario, int world_size) {
  const std::vector<ProcessResult> results =
      run_world(DISTGRAD_PARTITION_WORKER, {scenario}, world_size, Environment{{"OMP_NUM_THREADS", "1"}});
  for (const ProcessResult& result : results) EXPECT_TRUE(result.succeeded()) << "\n" << describe(results);
}

TEST(RemoteCall, EveryPartitionerWithAndWithoutReducers) { expect_scenario("calls", 3); }
TEST(RemoteCall, AsyncCallsAndManyInFlight) { expect_scenario("async", 2); }
TEST(RemoteCall, NestedParallelizeCarriesGradientsThroughBothLevels) { expect_scenario("nested", 3); }
TEST(RemoteCall, AnEmptyBatchGivesAnEmptyListAndCannotBeReduced) { expect_scenario("empty_batch", 2); }
TEST(RemoteCall, AFailedPartitionFailsTheCallNamingTheWorker) { expect_scenario("failure", 3); }
TEST(RemoteCall, ATimeoutGivenByNameFailsTheCallNamingTheWorker) { expect_scenario("timeout", 3); }
TEST(RemoteCall, ParallelizedMamlStepGivesTheLocalGradients) { expect_scenario("maml_gradients", 3); }

}  // namespace
}  // namespace distgrad::rpc::testing
