// Tests of the RPC agent with real processes on loopback: every test runs a scenario of
// tests/rpc/rpc_test_worker.cc as each rank of a world (tests/rpc/multiprocess.h) and checks
// how every rank ended and what it printed. The scenarios do the checking inside the workers;
// a failed check ends the worker with "[workerN] error: ..." and a non-zero code, which the
// failure message here shows with every rank's output.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>

#include <optional>
#include <string>
#include <vector>

#include "core/cuda.h"
#include "tests/core/test_util.h"
#include "tests/rpc/multiprocess.h"
#include "tests/rpc/world_assertions.h"

#ifndef DISTGRAD_RPC_TEST_WORKER
#error "DISTGRAD_RPC_TEST_WORKER must name the rpc_test_worker binary (tests/rpc/CMakeLists.txt)"
#endif

namespace distgrad::rpc::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kWorker[] = DISTGRAD_RPC_TEST_WORKER;
constexpr char kDuplicateWorker[] = DISTGRAD_RPC_DUPLICATE_WORKER;

std::vector<ProcessResult> run_scenario(const std::string& scenario, int world_size, const WorldOptions& options = {}) {
  return run_world(kWorker, {scenario}, world_size, options);
}

// The first IPv4 address of this machine outside 127.0.0.0/8, if any.
std::optional<std::string> non_loopback_ipv4() {
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* entry = interfaces; entry != nullptr && !found; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    const in_addr address = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr;
    if ((ntohl(address.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &address, text, sizeof text) != nullptr) found = text;
  }
  ::freeifaddrs(interfaces);
  return found;
}

// ---------------------------------------------------------------------------------------------
// Rendezvous and lifecycle.

void expect_rendezvous(int world_size) {
  const std::vector<ProcessResult> results = run_scenario("rendezvous", world_size);
  ASSERT_TRUE(all_succeeded(results));
  for (const ProcessResult& result : results) {
    EXPECT_THAT(result.output, HasSubstr("worker_init_fn ran")) << result;
    if (result.rank == 0) {
      EXPECT_THAT(result.output, HasSubstr("main ran")) << result;
      EXPECT_THAT(result.output, HasSubstr("every worker answered")) << result;
    } else {
      EXPECT_THAT(result.output, Not(HasSubstr("main ran"))) << result;
    }
  }
}

TEST(AgentRendezvous, TwoWorkersMeetRunInitEverywhereAndMainOnRankZero) { expect_rendezvous(2); }
TEST(AgentRendezvous, FourWorkers) { expect_rendezvous(4); }
TEST(AgentRendezvous, SixteenWorkers) { expect_rendezvous(16); }

TEST(AgentLifecycle, BarrierTimeoutNamesTheMissingWorker) {
  EXPECT_TRUE(all_succeeded(run_scenario("barrier_timeout", 2)));
}

TEST(AgentLifecycle, GracefulShutdownAnswersEveryCallInFlight) {
  const std::vector<ProcessResult> results = run_scenario("shutdown_in_flight", 2);
  ASSERT_TRUE(all_succeeded(results));
  for (const ProcessResult& result : results) {
    EXPECT_THAT(result.output, HasSubstr("graceful shutdown with 200 calls in flight")) << result;
  }
}

// ---------------------------------------------------------------------------------------------
// Calls.

TEST(AgentCalls, EveryCodecTypeRoundTripsThroughAnotherWorkerAndItself) {
  const std::vector<ProcessResult> results = run_scenario("codecs", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("values round-tripped through worker1 and worker0")) << results[0];
}

TEST(AgentCalls, CallsToItselfAnswerWithArgumentsOfTheirOwnAndKeepDeadlines) {
  const std::vector<ProcessResult> results = run_scenario("self_calls", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("calls to itself:")) << results[0];
}

TEST(AgentCalls, AsyncFanOutOfTenThousandCalls) {
  const std::vector<ProcessResult> results = run_scenario("fanout", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("10000 async calls answered")) << results[0];
}

TEST(AgentCalls, NestedCallsThreeDeepAcrossThreeWorkers) {
  const std::vector<ProcessResult> results = run_scenario("nested", 3);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("worker0->worker1->worker2->worker0")) << results[0];
}

TEST(AgentCalls, CallsArrivingBeforeTheCalleesInitRpcReturnsWaitForIt) {
  const std::vector<ProcessResult> results = run_scenario("early_calls", 4);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("early calls: every nested call found RPC running")) << results[0];
}

TEST(AgentCalls, InterceptorBytesArriveWithTheTensorCountsOnBothSides) {
  const std::vector<ProcessResult> results = run_scenario("interceptors", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("ids and tensor counts arrived on both sides")) << results[0];
}

TEST(AgentCalls, ACalleeWithoutTheCallersInterceptorRefusesItsCallsNamingIt) {
  const std::vector<ProcessResult> results = run_scenario("interceptor_missing_on_the_callee", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("carries bytes for the call interceptor 'recording'")) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("on worker1")) << results[0];
}

TEST(AgentCalls, DeviceMapsKeepCudaTensorsOnTheMappedDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_TRUE(all_succeeded(run_scenario("device_maps", 3)));
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(AgentErrors, RemoteExceptionNamesTheWorkerTheFunctionAndTheMessage) {
  const std::vector<ProcessResult> results = run_scenario("remote_exception", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("remote exception in raise_error on worker1: the original message"))
      << results[0];
}

TEST(AgentErrors, UnknownFunctionIsNotFoundNamingIt) {
  const std::vector<ProcessResult> results = run_scenario("unknown_function", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("NOT_FOUND")) << results[0];
}

TEST(AgentErrors, WrongArgumentTypesAndCountsAreInvalidArgument) {
  const std::vector<ProcessResult> results = run_scenario("bad_arguments", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("INVALID_ARGUMENT")) << results[0];
}

TEST(AgentErrors, CallTimeoutIsDeadlineExceededWithinASecond) {
  const std::vector<ProcessResult> results = run_scenario("timeouts", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("DEADLINE_EXCEEDED")) << results[0];
}

TEST(AgentErrors, DuplicateFunctionNamesRefuseToStart) {
  const std::vector<ProcessResult> results = run_world(kDuplicateWorker, {}, 2, {}, std::chrono::seconds(60));
  for (const ProcessResult& result : results) {
    EXPECT_EQ(result.exit_code, 1) << result;
    EXPECT_THAT(result.output, HasSubstr("the function name 'twice_named' is registered twice")) << result;
  }
}

// ---------------------------------------------------------------------------------------------
// Failures of workers.

TEST(AgentFailures, PeerKilledMidCallFailsTheCallWithoutAHang) {
  const std::vector<ProcessResult> results = run_scenario("peer_killed", 2);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].succeeded()) << describe(results);
  EXPECT_EQ(results[1].signal, SIGKILL) << describe(results);
  EXPECT_FALSE(results[1].timed_out || results[1].cut_short) << describe(results);
  EXPECT_THAT(results[0].output, HasSubstr("the killed peer's call failed")) << results[0];
}

TEST(AgentFailures, GracefulShutdownReportsAWorkerThatExitedWithoutIt) {
  const std::vector<ProcessResult> results = run_scenario("dead_at_shutdown", 2);
  EXPECT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("worker1 exited before reaching it")) << results[0];
}

TEST(AgentFailures, GracefulShutdownReportsAFrozenWorkerWithinTheLivenessTimeout) {
  const std::vector<ProcessResult> results = run_scenario("frozen_at_shutdown", 2);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].succeeded()) << describe(results);
  EXPECT_EQ(results[1].signal, SIGKILL) << describe(results);
  EXPECT_FALSE(results[1].timed_out) << describe(results);
  EXPECT_THAT(results[0].output, HasSubstr("worker1 did not answer within 2000 ms")) << results[0];
}

// ---------------------------------------------------------------------------------------------
// Security and malformed input.

TEST(AgentSecurity, ABigCallWithAWrongTokenIsRefusedBeforeItsMessageIsRead) {
  WorldOptions options;
  options.env["DISTGRAD_TOKEN"] = "agent-test-token-0123456789";
  options.env["DISTGRAD_SOCKET_CALLS"] = "0";  // the raw call goes to the gRPC server in any case
  const std::vector<ProcessResult> results = run_scenario("big_call_with_a_wrong_token", 2, options);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("a 256 MB call with a wrong token: refused")) << results[0];
}

TEST(AgentSecurity, ABigStoreWriteWithAWrongTokenIsRefusedBeforeItsMessageIsRead) {
  WorldOptions options;
  options.env["DISTGRAD_TOKEN"] = "agent-test-token-0123456789";
  const std::vector<ProcessResult> results = run_scenario("big_store_write_with_a_wrong_token", 2, options);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("a 256 MB store write with a wrong token: refused")) << results[0];
}

// Over the call socket (the default between workers on one host) and over gRPC alone.
TEST(AgentSecurity, MessagesOverTheConfiguredLimitFailTheirCallsNamingIt) {
  for (const char* grpc_only : {"0", "1"}) {
    WorldOptions options;
    options.env["DISTGRAD_MAX_MESSAGE_BYTES"] = "1048576";
    options.env["DISTGRAD_GRPC_ONLY"] = grpc_only;
    const std::vector<ProcessResult> results = run_scenario("message_size_limit", 2, options);
    ASSERT_TRUE(all_succeeded(results)) << "DISTGRAD_GRPC_ONLY=" << grpc_only;
    EXPECT_THAT(results[0].output, HasSubstr("messages over the limit refused")) << results[0];
  }
}

TEST(AgentSecurity, RawCallsWithoutTheJobTokenAreUnauthenticated) {
  WorldOptions options;
  options.env["DISTGRAD_TOKEN"] = "agent-test-token-0123456789";
  const std::vector<ProcessResult> results = run_scenario("security_token", 2, options);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("no token: UNAUTHENTICATED")) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("a wrong token: UNAUTHENTICATED")) << results[0];
}

TEST(AgentSecurity, TlsCarriesTheJobAndRefusesPlaintextClients) {
  if (std::system("command -v openssl > /dev/null 2>&1") != 0) GTEST_SKIP() << "openssl is not installed";
  const distgrad::testing::ScratchDir dir;
  const std::string cert = dir.file("cert.pem"), key = dir.file("key.pem");
  const std::string command =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=distgrad -addext "
      "subjectAltName=DNS:distgrad -keyout " +
      key + " -out " + cert + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  WorldOptions options;
  options.env["DISTGRAD_TLS_CERT"] = cert;
  options.env["DISTGRAD_TLS_KEY"] = key;
  options.env["DISTGRAD_TOKEN"] = "agent-test-token-tls";
  const std::vector<ProcessResult> results = run_scenario("tls", 2, options);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("plaintext client: UNAVAILABLE")) << results[0];
}

TEST(AgentSecurity, NonLoopbackMasterWithoutATokenIsRefused) {
  const std::optional<std::string> address = non_loopback_ipv4();
  if (!address) GTEST_SKIP() << "this machine has no IPv4 address outside 127.0.0.0/8";
  WorldOptions options;
  options.env["MASTER_ADDR"] = *address;
  const std::vector<ProcessResult> results = run_scenario("insecure_refused", 1, options);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("DISTGRAD_TOKEN")) << results[0];
}

TEST(AgentSecurity, NonLoopbackMasterWorksWithInsecureOptInOrAToken) {
  const std::optional<std::string> address = non_loopback_ipv4();
  if (!address) GTEST_SKIP() << "this machine has no IPv4 address outside 127.0.0.0/8";
  WorldOptions insecure;
  insecure.env = {{"MASTER_ADDR", *address}, {"DISTGRAD_INSECURE", "1"}};
  EXPECT_TRUE(all_succeeded(run_scenario("simple_call", 2, insecure)));
  WorldOptions with_token;
  with_token.env = {{"MASTER_ADDR", *address}, {"DISTGRAD_TOKEN", "agent-test-token"}};
  EXPECT_TRUE(all_succeeded(run_scenario("simple_call", 2, with_token)));
}

TEST(AgentSecurity, GarbageAndTruncatedFramesAreInvalidArgumentAndTheWorkerSurvives) {
  const std::vector<ProcessResult> results = run_scenario("garbage_frames", 2);
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("malformed calls refused")) << results[0];
}

// ---------------------------------------------------------------------------------------------
// The harness itself.

TEST(RunWorld, ReportsExitCodesSignalsOutputAndTimeouts) {
  const std::vector<ProcessResult> results = run_world(
      "/bin/sh",
      {"-c",
       "echo rank=$RANK of $WORLD_SIZE at $MASTER_ADDR $EXTRA; "
       "echo to-stderr >&2; "
       "if [ $RANK = 1 ]; then kill -9 $$; fi; "
       "if [ $RANK = 2 ]; then sleep 30; fi; exit $RANK"},
      3, WorldOptions{{{"EXTRA", "x"}}, {{0, {{"EXTRA", "y"}}}}, std::chrono::seconds(2), std::chrono::seconds(0)});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_THAT(results[0].output, HasSubstr("rank=0 of 3 at 127.0.0.1 y\nto-stderr"));
  EXPECT_EQ(results[1].signal, SIGKILL);
  EXPECT_THAT(results[1].output, HasSubstr("rank=1 of 3 at 127.0.0.1 x"));
  EXPECT_TRUE(results[2].timed_out);
  EXPECT_EQ(results[2].signal, SIGKILL);
  EXPECT_LT(results[2].seconds, 10);
  EXPECT_THAT(describe(results), HasSubstr("rank 2: timed out and was killed"));
}

// The children lose the parent's launcher variables (here the job token) but keep where the
// dataset is: a machine without the dataset package sets DISTGRAD_FASHION_MNIST_DIR for them too.
TEST(RunWorld, DropsLauncherVariablesAndKeepsTheDatasetDirectory) {
  ::setenv("DISTGRAD_TOKEN", "parent-token", 1);
  ::setenv("DISTGRAD_FASHION_MNIST_DIR", "/data/fmnist", 1);
  const std::vector<ProcessResult> results =
      run_world("/bin/sh", {"-c", "echo token=${DISTGRAD_TOKEN:-none} data=$DISTGRAD_FASHION_MNIST_DIR"}, 1);
  ::unsetenv("DISTGRAD_TOKEN");
  ::unsetenv("DISTGRAD_FASHION_MNIST_DIR");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].succeeded()) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("token=none data=/data/fmnist")) << results[0];
}

TEST(RunWorld, KillsTheOthersAfterAFailureAndItsGrace) {
  const std::vector<ProcessResult> results =
      run_world("/bin/sh", {"-c", "if [ $RANK = 0 ]; then exit 3; fi; sleep 30"}, 2,
                WorldOptions{{}, {}, std::chrono::seconds(60), std::chrono::seconds(1)});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].exit_code, 3);
  EXPECT_TRUE(results[1].cut_short);
  EXPECT_LT(results[1].seconds, 10);
}

}  // namespace
}  // namespace distgrad::rpc::testing
