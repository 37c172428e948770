// Map-reduce calls that outlive a lost worker (RemoteCallOptions::reissue_lost_partitions,
// partition/reissue.h), with real processes on loopback on every path: the lost_workers scenario
// of partition_worker (tests/partition/partition_worker.cc), whose rank 0 checks the results; and
// a lost worker that distgrad-run starts again and that rejoins the running world (the rejoin
// scenario).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_PARTITION_WORKER
#error "DISTGRAD_PARTITION_WORKER must name the partition_worker binary (tests/partition/CMakeLists.txt)"
#endif
#ifndef DISTGRAD_RUN
#error "DISTGRAD_RUN must name the distgrad-run binary (tests/partition/CMakeLists.txt)"
#endif

namespace distgrad::rpc::testing {
namespace {

using ::testing::HasSubstr;

TEST(ReissuedPartitions, AStepThatLosesWorkersEqualsTheUndisturbedOneAndTheLostLeaveTheLists) {
  const std::vector<ProcessResult> results =
      run_world(DISTGRAD_PARTITION_WORKER, {"lost_workers"}, 4, Environment{{"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(results.size(), 4u);
  for (int rank : {0, 1}) {
    EXPECT_TRUE(results[rank].succeeded()) << describe(results);
    EXPECT_FALSE(results[rank].timed_out || results[rank].cut_short) << describe(results);
  }
  for (int rank : {2, 3}) {
    EXPECT_EQ(results[rank].signal, SIGKILL) << describe(results);
    EXPECT_THAT(results[rank].output, HasSubstr("adapt_and_eval_or_die: raising SIGKILL")) << results[rank];
  }
  EXPECT_THAT(results[0].output, HasSubstr("with it the step equals the undisturbed one")) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("worker2")) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("(RemoteCallOptions::reissue_lost_partitions)")) << results[0];
}

TEST(ReissuedPartitions, ACallWhoseContextWasReleasedIsNotReissued) {
  const std::vector<ProcessResult> results =
      run_world(DISTGRAD_PARTITION_WORKER, {"abandoned_call"}, 3, Environment{{"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(results.size(), 3u);
  for (int rank : {0, 1}) EXPECT_TRUE(results[rank].succeeded()) << describe(results);
  EXPECT_EQ(results[2].signal, SIGKILL) << describe(results);
  EXPECT_THAT(results[0].output, HasSubstr("abandoned_call: not reissued")) << results[0];
  EXPECT_THAT(results[0].output, ::testing::Not(HasSubstr("the partition goes to"))) << results[0];
}

TEST(RejoinedWorkers, ALostWorkerStartedAgainRejoinsTheRunningWorldAndReceivesCalls) {
  WorldOptions options;
  options.env = {{"OMP_NUM_THREADS", "1"}};
  options.timeout = std::chrono::seconds(150);
  const ProcessResult result =
      run_world(DISTGRAD_RUN,
                {"--standalone", "--nproc-per-node", "4", "--max-rejoins", "1", DISTGRAD_PARTITION_WORKER, "rejoin"}, 1,
                options)
          .at(0);
  EXPECT_EQ(result.exit_code, 0) << result;
  EXPECT_THAT(result.output, HasSubstr("[2] [worker2] adapt_and_eval_or_die: raising SIGKILL")) << result;
  EXPECT_THAT(result.output, HasSubstr("distgrad-run: rank 2 (pid ")) << result;
  EXPECT_THAT(result.output, HasSubstr("was killed by signal 9 (Killed): [worker2] adapt_and_eval_or_die: raising "
                                       "SIGKILL; the other workers go on (--max-rejoins: it starts again)"))
      << result;
  EXPECT_THAT(result.output, HasSubstr("distgrad-run: starting rank 2 again into the running world (rejoin 1 of 1)"))
      << result;
  EXPECT_THAT(result.output, HasSubstr("[0] rejoin: worker2 came back as a new process (incarnation 1)")) << result;
  EXPECT_THAT(result.output, HasSubstr("[2] worker2 rejoined, and refused a barrier: barrier: worker2 rejoined a "
                                       "running world, and barriers are for the workers that started together"))
      << result;
  EXPECT_THAT(result.output, ::testing::Not(HasSubstr("] error: "))) << result;
}

TEST(RejoinedWorkers, RankZeroCannotRejoin) {
  const ProcessResult result =
      run_world(DISTGRAD_PARTITION_WORKER, {"calls"}, 1, Environment{{"DISTGRAD_REJOIN", "1"}}).at(0);
  EXPECT_EQ(result.exit_code, 1) << result;
  EXPECT_THAT(result.output, HasSubstr("init_rpc: rank 0 cannot rejoin a running world (DISTGRAD_REJOIN=1): the "
                                       "world ends with it"))
      << result;
}

}  // namespace
}  // namespace distgrad::rpc::testing
