// The same-host shared-memory path with real processes on loopback: the scenarios of
// tests/rpc/shm_test_worker.cc run as every rank of a world (tests/rpc/multiprocess.h). ctest runs
// this binary with the fast paths on, as if every peer were on another host, and with gRPC alone
// (the scenarios expect each).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_SHM_TEST_WORKER
#error "DISTGRAD_SHM_TEST_WORKER must name the shm_test_worker binary (tests/rpc/CMakeLists.txt)"
#endif

namespace distgrad::rpc::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kWorker[] = DISTGRAD_SHM_TEST_WORKER;

std::set<std::string> dev_shm_entries() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) names.insert(entry.path().string());
  return names;
}

TEST(SharedMemoryPath, EchoesArriveIntactAndAThousandLargeCallsLeaveMemoryFlat) {
  const std::set<std::string> before = dev_shm_entries();
  const std::vector<ProcessResult> results = run_world(kWorker, {"echo"}, 2);
  for (const ProcessResult& result : results) EXPECT_TRUE(result.succeeded()) << describe(results);
  EXPECT_THAT(results[0].output, HasSubstr("1000 calls of 4 MB")) << results[0];
  EXPECT_EQ(dev_shm_entries(), before) << "the world left files in /dev/shm";
}

TEST(SharedMemoryPath, APeerKilledWhileHoldingASegmentFailsItsCallOnlyAndLeavesNothingBehind) {
  const std::set<std::string> before = dev_shm_entries();
  const std::vector<ProcessResult> results = run_world(kWorker, {"peer_killed"}, 3);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].succeeded()) << describe(results);
  EXPECT_EQ(results[1].signal, SIGKILL) << describe(results);
  EXPECT_TRUE(results[2].succeeded()) << describe(results);
  EXPECT_THAT(results[0].output, HasSubstr("the tensor from the dead worker is intact")) << results[0];
  EXPECT_EQ(dev_shm_entries(), before) << "the world left files in /dev/shm";
}

TEST(SharedMemoryPath, TensorsInSharedMemoryTravelByReferenceAndNothingStaysOpen) {
  const std::vector<ProcessResult> results = run_world(kWorker, {"shared_tensors"}, 3);
  for (const ProcessResult& result : results) EXPECT_TRUE(result.succeeded()) << describe(results);
  EXPECT_THAT(results[0].output, HasSubstr("no descriptor left open")) << results[0];
}

TEST(CallSocket, RefusesAWrongTokenAndGarbageAndKeepsServing) {
  for (const char* off : {"DISTGRAD_SAME_HOST", "DISTGRAD_SOCKET_CALLS"}) {
    const char* setting = std::getenv(off);
    if (setting != nullptr && std::string(setting) == "0") GTEST_SKIP() << off << "=0: no Unix socket here";
  }
  if (const char* grpc_only = std::getenv("DISTGRAD_GRPC_ONLY");
      grpc_only != nullptr && std::string(grpc_only) == "1") {
    GTEST_SKIP() << "DISTGRAD_GRPC_ONLY=1: no Unix socket here";
  }
  WorldOptions options;
  options.env["DISTGRAD_TOKEN"] = "local-socket-test-token";
  const std::vector<ProcessResult> results = run_world(kWorker, {"local_socket_security"}, 2, options);
  for (const ProcessResult& result : results) EXPECT_TRUE(result.succeeded()) << describe(results);
  EXPECT_THAT(results[0].output, HasSubstr("refused the job token")) << results[0];
}

TEST(FastPathSettings, BadValuesAreRefusedNamingTheVariable) {
  const std::vector<std::pair<Environment, std::string>> cases = {
      {{{"DISTGRAD_SHM", "yes"}}, "init_rpc: DISTGRAD_SHM=yes is not 0 or 1"},
      {{{"DISTGRAD_SOCKET_CALLS", "2"}}, "init_rpc: DISTGRAD_SOCKET_CALLS=2 is not 0 or 1"},
      {{{"DISTGRAD_SHM_THRESHOLD", "64k"}}, "init_rpc: DISTGRAD_SHM_THRESHOLD=64k is not a number of bytes"},
      {{{"DISTGRAD_MAX_MESSAGE_BYTES", "1MB"}}, "init_rpc: DISTGRAD_MAX_MESSAGE_BYTES=1MB is not a number of bytes"},
  };
  for (const auto& [env, message] : cases) {
    WorldOptions options;
    options.env = env;
    const std::vector<ProcessResult> results = run_world(kWorker, {"bad_settings"}, 1, options);
    EXPECT_TRUE(results[0].succeeded()) << results[0];
    EXPECT_THAT(results[0].output, HasSubstr(message)) << results[0];
  }
}

}  // namespace
}  // namespace distgrad::rpc::testing
