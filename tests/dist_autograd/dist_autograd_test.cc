// Tests of distributed autograd with real processes on loopback: every test runs a scenario of
// tests/dist_autograd/dist_autograd_worker.cc as each rank of a world of 4 (tests/rpc/multiprocess.h)
// and checks how every rank ended and what the driver printed. The scenarios compare every
// gradient with the same computation done locally inside the driver, and end by requiring that no
// rank holds a context; a failed check ends the driver with "[workerN] error: ..." and a non-zero
// code, which the failure message here shows with every rank's output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_DIST_AUTOGRAD_WORKER
#error "DISTGRAD_DIST_AUTOGRAD_WORKER must name the dist_autograd_worker binary (tests/dist_autograd/CMakeLists.txt)"
#endif

namespace distgrad::rpc::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kWorker[] = DISTGRAD_DIST_AUTOGRAD_WORKER;
constexpr int kWorldSize = 4;

std::vector<ProcessResult> run_scenario(const std::string& scenario) {
  WorldOptions options;
  options.timeout = std::chrono::seconds(60);
  return run_world(kWorker, {scenario}, kWorldSize, options);
}

::testing::AssertionResult all_succeeded(const std::vector<ProcessResult>& results) {
  for (const ProcessResult& result : results) {
    if (!result.succeeded()) return ::testing::AssertionFailure() << "\n" << describe(results);
  }
  return ::testing::AssertionSuccess();
}

// Runs `scenario`, which every rank must finish successfully; the driver (rank 0) must have
// printed each of `driver_says` and found no live context on any worker at the end.
void expect_scenario(const std::string& scenario, const std::vector<std::string>& driver_says) {
  const std::vector<ProcessResult> results = run_scenario(scenario);
  ASSERT_TRUE(all_succeeded(results));
  for (const std::string& fragment : driver_says) EXPECT_THAT(results[0].output, HasSubstr(fragment)) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr(scenario + ": no live contexts on any worker")) << results[0];
}

// ---------------------------------------------------------------------------------------------
// Graphs across workers.

TEST(DistAutogradGraphs, PyTorchDocsExampleGivesTheGradientsOfT1T2T4) {
  expect_scenario("docs_example", {"docs example: t1, t2, t4 match the local reference; get_gradients has 3 entries"});
}

TEST(DistAutogradGraphs, ChainThroughTwoWorkersAndBackToTheDriver) {
  expect_scenario("chain", {"chain worker0->worker1->worker2->worker0 (3 hops): every gradient matches"});
}

TEST(DistAutogradHigherOrder, SecondAndThirdDerivativesAcrossWorkersMatchTheLocalEngine) {
  expect_scenario(
      "higher_order",
      {"chain: first, second and third derivatives match", "fan-out: first, second and third derivatives match",
       "nested: first, second and third derivatives match", "sent twice: first, second and third derivatives match"});
}

TEST(DistAutogradGraphs, TenHopsRoundARingOfFour) {
  expect_scenario("ring", {"(10 hops): every gradient matches the local reference"});
}

TEST(DistAutogradGraphs, RemoteFunctionCallingAnotherWorker) {
  expect_scenario("nested", {"nested: a remote function calling another worker matches the local reference"});
}

TEST(DistAutogradGraphs, SeveralResultsOnlySomeUsed) {
  expect_scenario("several_results", {"several results: only the used ones carry gradients"});
}

TEST(DistAutogradGraphs, ArgumentsWithoutGradMixedWithOnesThatRequireIt) {
  expect_scenario("mixed_requires_grad", {"mixed arguments: a and c match the local reference"});
}

TEST(DistAutogradGraphs, CallsWithoutGradTensorsCarryTheContextAndGradModeOffCarriesNothing) {
  expect_scenario("no_grad", {"no grad: calls without grad tensors carry the context but record nothing; under "
                              "NoGradGuard nothing reaches a worker and results do not require grad"});
}

TEST(DistAutogradGraphs, WorkerParametersGetGradientsFromCallsWithoutGradTensors) {
  expect_scenario("worker_params_only",
                  {"worker params only: the parameters of worker1, worker2 and worker3 got their gradients"});
}

TEST(DistAutogradGraphs, SumsAcrossWorkersFollowTheOrderOfTheCallsBitForBit) {
  expect_scenario("call_order_sums",
                  {"call order sums: five passes summed the gradients of 12 and 8 calls in call order, bit for bit"});
}

TEST(DistAutogradGraphs, SameTensorSentToTwoWorkersSumsTheGradients) {
  expect_scenario("same_tensor_two_workers", {"same tensor to two workers: the gradients are summed"});
}

TEST(DistAutogradGraphs, DebugInfoCountsBothSidesAndAnyWorkerRunsABackwardByContextId) {
  expect_scenario("debug_info_and_backward_by_id", {"debug info and backward by id: counts match on both sides"});
}

TEST(DistAutogradGraphs, TheBackwardPartsOfSeveralWorkersRunAtTheSameTime) {
  expect_scenario("overlapping_backwards",
                  {"overlapping backwards: the backward parts of workers 1-3 ran at the same time"});
}

TEST(DistAutogradGraphs, LeavesOnAWorkerGetTheirGradientsThere) {
  expect_scenario("worker_leaves", {"leaves on a worker: their gradients are in the worker's context"});
}

// ---------------------------------------------------------------------------------------------
// backward and grad.

TEST(DistAutogradPasses, MultipleRoots) {
  expect_scenario("multiple_roots", {"multiple roots: the gradients of three roots match the local reference"});
}

TEST(DistAutogradPasses, RetainGraphAccumulatesAndAPassOverAFreedGraphFails) {
  const std::vector<ProcessResult> results = run_scenario("retain_graph");
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("retain_graph: gradients accumulate over two passes")) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("pass 3, the graph freed by pass 2: ")) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("backward through the graph a second time")) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("a second pass over worker1's freed graph: ")) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("60 second passes over freed worker graphs all failed")) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr("retain_graph: no live contexts on any worker")) << results[0];
}

TEST(DistAutogradPasses, GradWithAllowUnusedLeavesGradAlone) {
  expect_scenario("grad_allow_unused", {"grad: t1 and t4 match the local reference, the unused input is undefined"});
}

TEST(DistAutogradPasses, GradAtANonLeafLeavesTheLeavesBelowItWithoutGradient) {
  expect_scenario("grad_below_inputs",
                  {"grad below inputs: phi's gradient is right and theta, below it, has none in the context"});
}

TEST(DistAutogradPasses, BackwardWritesGradOnlyOfTheInputsAndRefusesInputsWithoutGrad) {
  expect_scenario("inputs_filter", {"inputs: only t1 and t4 got .grad(); the context holds all three; inputs without "
                                    "grad are refused"});
}

TEST(DistAutogradPasses, ContextsDoNotNest) {
  expect_scenario("nested_contexts",
                  {"nested contexts: refused on the driver and in a remote function; a context opens after them"});
}

TEST(DistAutogradPasses, NonScalarRootsAreRefused) {
  expect_scenario("non_scalar_roots", {"roots must be scalars", "the context stays usable"});
}

// ---------------------------------------------------------------------------------------------
// Concurrency and cleanup.

TEST(DistAutogradConcurrency, FourThreadsOnTheDriver) {
  expect_scenario("concurrent_contexts", {"concurrent contexts: 4 threads x 24 contexts matched the local reference"});
}

TEST(DistAutogradConcurrency, TwoDriversAtOnce) {
  const std::vector<ProcessResult> results = run_scenario("two_drivers");
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("driver worker0: 30 contexts against worker2 and worker3 matched"))
      << results[0];
  EXPECT_THAT(results[1].output, HasSubstr("driver worker1: 30 contexts against worker2 and worker3 matched"))
      << results[1];
  EXPECT_THAT(results[0].output, HasSubstr("two_drivers: no live contexts on any worker")) << results[0];
}

TEST(DistAutogradCleanup, AThousandContextsLeaveNoContextAndFlatMemory) {
  expect_scenario("context_loop", {"flat memory on every rank"});
}

TEST(DistAutogradCleanup, AThousandSecondOrderPassesLeaveNoContextAndFlatMemory) {
  expect_scenario("second_order_loop", {"1000 Hessian-vector products in", "flat memory on every rank"});
}

// ---------------------------------------------------------------------------------------------
// Failures.

TEST(DistAutogradErrors, ForwardExceptionNamesTheWorkerAndTheFunction) {
  expect_scenario("forward_error",
                  {"remote exception in failing_forward on worker1: failing_forward: refused a float64 tensor"});
}

TEST(DistAutogradErrors, BackwardExceptionReachesTheDriverNamingTheWorkerAndTheContextStaysUsable) {
  expect_scenario("backward_error",
                  {"ThrowingBackward: this formula always fails", "throwing_hook: this hook refuses every gradient",
                   "a further pass in the context succeeded"});
}

// Runs `scenario`, in which worker1 dies printing `last_words`, and requires the survivors to have
// finished in time, the driver to have printed `driver_lines`.
void expect_worker1_killed(const std::string& scenario, const std::string& last_words,
                           const std::vector<std::string>& driver_lines) {
  const std::vector<ProcessResult> results = run_scenario(scenario);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[1].signal, SIGKILL) << describe(results);
  EXPECT_THAT(results[1].output, HasSubstr(last_words)) << results[1];
  for (int rank : {0, 2, 3}) {
    EXPECT_TRUE(results[rank].succeeded()) << describe(results);
    EXPECT_FALSE(results[rank].timed_out || results[rank].cut_short) << describe(results);
  }
  for (const std::string& line : driver_lines) EXPECT_THAT(results[0].output, HasSubstr(line)) << results[0];
  EXPECT_THAT(results[0].output, HasSubstr(scenario + ": no live contexts on the survivors")) << results[0];
}

TEST(DistAutogradErrors, WorkerKilledMidBackwardFailsThePassWithoutAHang) {
  expect_worker1_killed("killed_worker", "dies_in_backward: the gradient arrived, raising SIGKILL",
                        {"worker killed mid-backward: error at the driver after"});
}

TEST(DistAutogradErrors, WorkerKilledInASecondOrderPassFailsItWithoutAHang) {
  expect_worker1_killed("killed_in_second_order",
                        "dies_in_second_order: the second-order pass arrived, raising SIGKILL",
                        {"worker killed in a second-order pass: error at the driver after"});
}

TEST(DistAutogradSetup, AContextIsRefusedWhenRpcRunsWithoutTheInterceptor) {
  const std::vector<ProcessResult> results = run_scenario("without_interceptor");
  ASSERT_TRUE(all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("without the interceptor: autograd::Context refused")) << results[0];
}

}  // namespace
}  // namespace distgrad::rpc::testing
