// Tracing a world of real processes on loopback (tests/trace/trace_test_worker.cc): the spans of a
// 3-worker chain land on the right ranks, nested and ordered on one clock, flow arrows join caller
// and callee, the clocks agree within their measured error, the merged file keeps the trace-event
// format, the statistics count the calls (a failed one too) and the backward pass; a worker killed
// mid-call leaves what it had written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/core/test_util.h"
#include "tests/rpc/multiprocess.h"
#include "tests/rpc/world_assertions.h"
#include "tests/trace/trace_testing.h"
#include "trace/merge.h"

#ifndef DISTGRAD_RUN
#error "DISTGRAD_RUN must name the distgrad-run binary (tests/trace/CMakeLists.txt)"
#endif
#ifndef DISTGRAD_TRACE_TEST_WORKER
#error "DISTGRAD_TRACE_TEST_WORKER must name the trace_test_worker binary (tests/trace/CMakeLists.txt)"
#endif

namespace distgrad::trace {
namespace {

using nlohmann::json;
using rpc::testing::ProcessResult;
using ::testing::HasSubstr;

std::vector<ProcessResult> run_traced(const std::string& scenario, int world_size, const std::string& directory) {
  return rpc::testing::run_world(DISTGRAD_TRACE_TEST_WORKER, {scenario}, world_size, {{"DISTGRAD_TRACE", directory}});
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "no " << path;
  return json::parse(in);
}

struct Span {
  int rank = -1;
  int64_t tid = -1;
  double start = 0, end = 0;  // microseconds on rank 0's clock
  json args;
};

int rank_of(const json& trace, const json& event) {
  return testing::rank_of_track(trace).at(event["pid"].get<int64_t>());
}

// The complete spans of `category` named `name`, per rank.
std::vector<Span> spans(const json& trace, const std::string& category, const std::string& name) {
  std::vector<Span> found;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X" || e.value("cat", "") != category || e.value("name", "") != name) continue;
    found.push_back({rank_of(trace, e), e["tid"].get<int64_t>(), e["ts"].get<double>(),
                     e["ts"].get<double>() + e["dur"].get<double>(), e.value("args", json::object())});
  }
  return found;
}

// The caller's asynchronous spans of calls of `function` (begin and end joined by id).
std::vector<Span> calls(const json& trace, const std::string& function) {
  std::map<std::string, Span> by_id;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "rpc.call" || e.value("name", "") != function) continue;
    Span& span = by_id[e["id2"]["local"].get<std::string>()];
    span.rank = rank_of(trace, e);
    if (e["ph"] == "b") {
      span.start = e["ts"].get<double>();
      span.args["to"] = e["args"]["to"];
    } else {
      span.end = e["ts"].get<double>();
      span.args["failed"] = e["args"]["failed"];
    }
  }
  std::vector<Span> found;
  for (auto& [id, span] : by_id) found.push_back(span);
  return found;
}

TEST(TraceWorld, AChainOfThreeWorkersIsOneTimelineWithFlowsAndStatistics) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  const std::vector<ProcessResult> results = run_traced("chain", 3, directory);
  ASSERT_TRUE(rpc::testing::all_succeeded(results));
  EXPECT_THAT(results[0].output, HasSubstr("chain passed"));
  // Rank 0 merged the job's files at its graceful shutdown and printed the statistics.
  EXPECT_THAT(results[0].output, HasSubstr("chain_middle"));
  const json stats = read_json(directory + "/stats.json");
  // The job's trace once every process has exited, as distgrad-run and distgrad-trace merge it.
  const MergedTrace merged = merge_trace_directory(directory);
  const json trace = json::parse(merged.trace_json);
  ASSERT_EQ(testing::format_problems(trace), std::vector<std::string>{});

  // Each process's clock agrees with rank 0's within the error it measured (one host: offset 0).
  const json& processes = trace["otherData"]["processes"];
  ASSERT_EQ(processes.size(), 3u);
  double worst_error_us = 0;
  for (const json& process : processes) {
    EXPECT_TRUE(process["clock_measured"].get<bool>()) << process;
    EXPECT_LE(std::abs(process["clock_offset_ns"].get<int64_t>()), process["clock_error_ns"].get<int64_t>()) << process;
    EXPECT_EQ(process["dropped_events"], 0) << process;
    worst_error_us = std::max(worst_error_us, process["clock_error_ns"].get<double>() / 1e3);
  }
  const double slack = 2 * worst_error_us + 1;

  // The user range on rank 0 holds its calls of chain_middle; each is served on rank 1 inside the
  // call's time, and there calls chain_end, served on rank 2 inside that.
  const std::vector<Span> driver = spans(trace, "user", "driver");
  ASSERT_EQ(driver.size(), 1u);
  EXPECT_EQ(driver[0].rank, 0);
  const std::vector<Span> outer = calls(trace, "chain_middle"), inner = calls(trace, "chain_end");
  const std::vector<Span> middle_served = spans(trace, "rpc.serve", "chain_middle");
  const std::vector<Span> end_served = spans(trace, "rpc.serve", "chain_end");
  const std::vector<Span> end_work = spans(trace, "user", "chain_end's work");
  ASSERT_EQ(outer.size(), 3u);
  ASSERT_EQ(inner.size(), 3u);
  ASSERT_EQ(middle_served.size(), 3u);
  ASSERT_EQ(end_served.size(), 3u);
  ASSERT_EQ(end_work.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(outer[i].rank, 0);
    EXPECT_EQ(outer[i].args["to"], 1);
    EXPECT_EQ(outer[i].args["failed"], 0);
    EXPECT_GE(outer[i].start, driver[0].start);
    EXPECT_LE(outer[i].end, driver[0].end);
    EXPECT_EQ(inner[i].rank, 1);
    EXPECT_EQ(inner[i].args["to"], 2);
    EXPECT_EQ(middle_served[i].rank, 1);
    EXPECT_EQ(middle_served[i].args["from"], 0);
    EXPECT_EQ(end_served[i].rank, 2);
    EXPECT_EQ(end_served[i].args["from"], 1);
    EXPECT_EQ(end_work[i].rank, 2);
  }
  const auto inside = [&](const Span& a, const Span& b) {  // a within b, across clocks
    return a.start >= b.start - slack && a.end <= b.end + slack;
  };
  for (const Span& served : middle_served) {
    EXPECT_EQ(std::count_if(outer.begin(), outer.end(), [&](const Span& c) { return inside(served, c); }), 1);
    EXPECT_EQ(std::count_if(inner.begin(), inner.end(), [&](const Span& c) { return inside(c, served); }), 1);
  }
  for (const Span& served : end_served) {
    EXPECT_EQ(std::count_if(inner.begin(), inner.end(), [&](const Span& c) { return inside(served, c); }), 1);
    // The user's range nests in the serving span, on the same thread.
    EXPECT_EQ(std::count_if(end_work.begin(), end_work.end(),
                            [&](const Span& w) { return w.tid == served.tid && inside(w, served); }),
              1);
  }

  // Flow arrows: each request's arrow leaves the caller's rank and enters the callee's.
  std::map<std::string, int> flow_start_rank, flow_end_rank;
  std::map<std::string, std::string> flow_end_name;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("flow_out", false)) flow_start_rank[e["bind_id"].get<std::string>()] = rank_of(trace, e);
    if (e.value("flow_in", false)) {
      flow_end_rank[e["bind_id"].get<std::string>()] = rank_of(trace, e);
      flow_end_name[e["bind_id"].get<std::string>()] = e.value("cat", "") + ":" + e.value("name", "");
    }
  }
  int zero_to_one = 0, one_to_two = 0, two_to_one = 0;
  for (const auto& [id, from] : flow_start_rank) {
    const auto to = flow_end_rank.find(id);
    ASSERT_NE(to, flow_end_rank.end()) << "flow " << id << " never arrives";
    // A request arrives on its serving span, a reply on the caller's decode span.
    EXPECT_THAT(flow_end_name[id], ::testing::AnyOf(::testing::StartsWith("rpc.serve:"), "rpc:decode reply"));
    zero_to_one += from == 0 && to->second == 1;
    one_to_two += from == 1 && to->second == 2;
    two_to_one += from == 2 && to->second == 1;
  }
  EXPECT_GE(zero_to_one, 3);
  EXPECT_GE(one_to_two, 3);
  EXPECT_GE(two_to_one, 3);  // chain_end's replies

  // The statistics rank 0 wrote: calls per function and pair, the failed call, the backward pass.
  std::map<std::string, json> by_function;
  for (const json& f : stats["functions"]) by_function[f["function"].get<std::string>()] = f;
  ASSERT_TRUE(by_function.contains("chain_middle")) << stats.dump(2);
  EXPECT_EQ(by_function["chain_middle"]["calls"], 3);
  EXPECT_EQ(by_function["chain_middle"]["caller"], 0);
  EXPECT_EQ(by_function["chain_middle"]["callee"], 1);
  EXPECT_EQ(by_function["chain_end"]["calls"], 3);
  EXPECT_EQ(by_function["chain_end"]["caller"], 1);
  EXPECT_GT(by_function["chain_end"]["callee_ms"]["p50"].get<double>(), 1.5);  // it sleeps 2 ms
  EXPECT_GE(by_function["chain_middle"]["caller_ms"]["p50"].get<double>(),
            by_function["chain_end"]["caller_ms"]["p50"].get<double>());
  EXPECT_GT(by_function["chain_middle"]["request_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(by_function["fail_here"]["calls"], 1);
  EXPECT_EQ(by_function["fail_here"]["failures"], 1);
  ASSERT_EQ(stats["backward_passes"].size(), 1u) << stats.dump(2);
  EXPECT_EQ(stats["backward_passes"][0]["driver"], 0);
  EXPECT_EQ(stats["backward_passes"][0]["passes"], 1);
  EXPECT_GE(stats["backward_passes"][0]["messages"].get<int64_t>(), 1);
  EXPECT_EQ(stats["backward_passes"][0]["message_bytes"].get<int64_t>(), 4 * 4);  // one float32 gradient of 4
}

TEST(TraceWorld, ADdpStepShowsItsBucketAndItsAllReduceOnEveryRank) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  const std::vector<ProcessResult> results = run_traced("ddp", 2, directory);
  ASSERT_TRUE(rpc::testing::all_succeeded(results));
  const json trace = json::parse(merge_trace_directory(directory).trace_json);
  EXPECT_EQ(testing::format_problems(trace), std::vector<std::string>{});
  for (int rank = 0; rank < 2; ++rank) {
    const auto on_rank = [&](const std::vector<Span>& found) {
      return std::count_if(found.begin(), found.end(), [&](const Span& s) { return s.rank == rank; });
    };
    const std::vector<Span> launched = spans(trace, "ddp", "launch bucket");
    EXPECT_EQ(on_rank(launched), 1) << "rank " << rank;
    for (const Span& span : launched) EXPECT_EQ(span.args["bytes"], 15 * 4);
    const std::string all_reduce =
        "all_reduce(avg) of float32[15] in group 'world' (rank " + std::to_string(rank) + " of 2)";
    EXPECT_EQ(on_rank(spans(trace, "ddp.collective", all_reduce)), 1) << "rank " << rank << ": " << all_reduce;
  }
}

// Note [Gradient waves] (dist_autograd/backward_pass.h): a leaf sent to three workers gets its
// gradient from one more run of the driver's engine, from all three replies at once, not one run
// per reply (which made k inner steps over W workers cost W^k runs).
TEST(TraceWorld, ADataParallelPassRunsTheDriversEngineOncePerWave) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  const std::vector<ProcessResult> results = run_traced("waves", 4, directory);
  ASSERT_TRUE(rpc::testing::all_succeeded(results));
  const json trace = json::parse(merge_trace_directory(directory).trace_json);
  const std::vector<Span> passes = spans(trace, "dist_autograd.pass", "backward pass");
  ASSERT_EQ(passes.size(), 1u);
  const json pass = passes[0].args["pass"];
  int driver_runs = 0, worker_runs = 0, messages = 0;
  for (const Span& run : spans(trace, "dist_autograd", "local pass")) {
    if (run.args["pass"] != pass) continue;
    (run.rank == 0 ? driver_runs : worker_runs) += 1;
  }
  for (const Span& message : spans(trace, "dist_autograd.message", "gradient message")) {
    messages += message.args["pass"] == pass && message.rank != 0;
  }
  EXPECT_EQ(messages, 3);
  EXPECT_EQ(worker_runs, 3);
  EXPECT_EQ(driver_runs, 2);  // from the root, then one wave of the three replies
}

// distgrad-run --trace on a job that fails: the launcher merges what the workers wrote and, since
// rank 0 never reached its graceful shutdown, prints the summary itself.
TEST(TraceWorld, TheLauncherMergesAFailedJobsTraceAndPrintsItsSummary) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  rpc::testing::WorldOptions options;
  options.timeout = std::chrono::seconds(90);
  const ProcessResult run = rpc::testing::run_world(DISTGRAD_RUN,
                                                    {"--standalone", "--nproc-per-node", "2", "--trace", directory,
                                                     DISTGRAD_TRACE_TEST_WORKER, "killed"},
                                                    1, options)
                                .at(0);
  EXPECT_NE(run.exit_code, 0) << run;
  EXPECT_THAT(run.output, HasSubstr("trace: 2 processes")) << run;
  EXPECT_THAT(run.output, HasSubstr("distgrad-run: timeline " + directory + "/trace.json")) << run;
  const json trace = read_json(directory + "/trace.json");
  EXPECT_EQ(spans(trace, "user", "before dying").size(), 1u);
}

TEST(TraceWorld, AKilledWorkerLeavesWhatItWroteAndTheFailedCall) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  const std::vector<ProcessResult> results = run_traced("killed", 2, directory);
  ASSERT_EQ(results[1].signal, 9) << rpc::testing::describe(results);
  ASSERT_TRUE(results[0].succeeded()) << rpc::testing::describe(results);
  EXPECT_THAT(results[0].output, HasSubstr("killed passed"));
  const MergedTrace merged = merge_trace_directory(directory);
  ASSERT_EQ(merged.processes.size(), 2u);
  const json trace = json::parse(merged.trace_json);
  EXPECT_EQ(testing::format_problems(trace), std::vector<std::string>{});
  const std::vector<Span> before = spans(trace, "user", "before dying");
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(before[0].rank, 1);
  const std::vector<Span> failed = calls(trace, "record_then_die");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].args["failed"], 1);
  const auto counted = std::find_if(merged.statistics.functions.begin(), merged.statistics.functions.end(),
                                    [](const FunctionStatistics& f) { return f.function == "record_then_die"; });
  ASSERT_NE(counted, merged.statistics.functions.end());
  EXPECT_EQ(counted->calls, 1);
  EXPECT_EQ(counted->failures, 1);
}

}  // namespace
}  // namespace distgrad::trace
