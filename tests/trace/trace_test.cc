// Tracing in one process: spans and their files (trace/trace.h), the bounded buffer, merging
// files into a trace-event timeline on one clock (trace/merge.h) and the statistics computed from
// it (trace/statistics.h).
#include "trace/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/error.h"
#include "nlohmann/json.hpp"
#include "tests/core/test_util.h"
#include "tests/trace/trace_testing.h"
#include "trace/event_format.h"
#include "trace/merge.h"
#include "trace/statistics.h"

namespace distgrad::trace {
namespace {

using nlohmann::json;

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const std::string& line : lines) out << line << "\n";
}

json merged_json(const MergedTrace& merged) { return json::parse(merged.trace_json); }

TEST(Trace, OffByDefaultSpansAreInert) {
  EXPECT_FALSE(enabled());
  Span span("user", "not recorded");
  EXPECT_FALSE(span.active());
}

TEST(Trace, SpansNestOnTheirThreadWithArgumentsCountersAndFlows) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  start(directory);
  set_process(3, "worker3");
  set_thread_name("main thread");
  {
    DISTGRAD_TRACE_SCOPE("outer");
    Span inner("rpc", "inner");
    inner.arg("bytes", int64_t{42});
    inner.flow_out(new_id());
    counter("tasks", 2.5);
  }
  std::thread([] {
    set_thread_name("helper");
    Span span("user", "on another thread");
  }).join();
  stop();
  EXPECT_FALSE(enabled());

  const MergedTrace merged = merge_trace_directory(directory);
  ASSERT_EQ(merged.processes.size(), 1u);
  EXPECT_EQ(merged.processes[0].rank, 3);
  EXPECT_EQ(merged.processes[0].name, "worker3");
  EXPECT_EQ(merged.processes[0].pid, ::getpid());
  EXPECT_EQ(merged.processes[0].unreadable_lines, 0);
  const json trace = merged_json(merged);
  EXPECT_EQ(testing::format_problems(trace), std::vector<std::string>{});
  const auto named = [&](const std::string& name) {
    auto found = testing::events_where(trace, [&](const json& e) { return e.value("name", "") == name; });
    EXPECT_EQ(found.size(), 1u) << name;
    return found.empty() ? json::object() : found[0];
  };
  const json outer = named("outer"), inner = named("inner"), other = named("on another thread");
  EXPECT_EQ(outer["cat"], "user");
  EXPECT_EQ(outer["pid"], ::getpid());  // the process's own pid is its track
  EXPECT_EQ(testing::rank_of_track(trace).at(::getpid()), 3);
  EXPECT_EQ(inner["tid"], outer["tid"]);
  EXPECT_NE(other["tid"], outer["tid"]);
  EXPECT_LE(outer["ts"].get<double>(), inner["ts"].get<double>());
  EXPECT_GE(outer["ts"].get<double>() + outer["dur"].get<double>(),
            inner["ts"].get<double>() + inner["dur"].get<double>());
  EXPECT_EQ(inner["args"]["bytes"], 42);
  EXPECT_EQ(named("tasks")["args"]["value"], 2.5);
  EXPECT_TRUE(inner.value("flow_out", false));
  EXPECT_TRUE(inner["bind_id"].is_string());
  const auto thread_names =
      testing::events_where(trace, [](const json& e) { return e.value("name", "") == "thread_name"; });
  std::set<std::string> names;
  for (const json& e : thread_names) names.insert(e["args"]["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"main thread", "helper"}));
}

TEST(Trace, AFullBufferDropsEventsAndCountsThem) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  start(directory, /*max_buffered_events=*/10);
  constexpr int kEvents = 2000;
  for (int i = 0; i < kEvents; ++i) Span span("user", "burst");
  const uint64_t dropped = dropped_events();
  stop();
  EXPECT_GT(dropped, 0u);
  const MergedTrace merged = merge_trace_directory(directory);
  ASSERT_EQ(merged.processes.size(), 1u);
  EXPECT_EQ(merged.processes[0].dropped, dropped);
  EXPECT_EQ(merged.processes[0].events + static_cast<int64_t>(dropped), kEvents);
  EXPECT_NE(merged_summary(merged).find(std::to_string(dropped) + " dropped"), std::string::npos)
      << merged_summary(merged);
}

TEST(Trace, FlushWritesWhatWasRecordedWhileStillRecording) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  start(directory);
  { Span span("user", "before the flush"); }
  flush();
  const MergedTrace merged = merge_trace_directory(directory);  // the file as a killed process would leave it
  stop();
  const json trace = merged_json(merged);
  EXPECT_EQ(
      testing::events_where(trace, [](const json& e) { return e.value("name", "") == "before the flush"; }).size(), 1u);
}

TEST(Trace, BadEnvironmentAndDirectoriesAreNamed) {
  setenv("DISTGRAD_TRACE", "/tmp/distgrad_trace_unused", 1);
  setenv("DISTGRAD_TRACE_BUFFER", "lots", 1);
  try {
    start_from_environment();
    FAIL() << "expected an error for DISTGRAD_TRACE_BUFFER=lots";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("DISTGRAD_TRACE_BUFFER"), std::string::npos) << error.what();
  }
  unsetenv("DISTGRAD_TRACE_BUFFER");
  unsetenv("DISTGRAD_TRACE");
  EXPECT_FALSE(start_from_environment());
  try {
    start("/proc/no/such/place");
    FAIL() << "expected an error for a directory that cannot be made";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("trace: cannot write /proc/no/such/place/trace-"), std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(enabled());
  try {
    merge_trace_directory(distgrad::testing::ScratchDir().path());
    FAIL() << "expected an error for a directory without trace files";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("found none"), std::string::npos) << error.what();
  }
}

// Lines a damaged file could hold: not JSON, JSON of the wrong shape, known lines with fields of
// the wrong types. Each is counted and skipped; the good event is kept.
TEST(TraceMerge, GarbageLinesAreCountedNotTrusted) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  const Event good{'X', "user", "good", 1000, 10, 0, {}};
  write_lines(directory + "/trace-7.jsonl",
              {process_line(7, 0, "worker0"), "\x01\xff not json", "[1, 2, 3]", "{\"type\":\"process\",\"pid\":\"x\"}",
               "{\"type\":\"clock\",\"offset_ns\":1.5}", "{\"type\":\"thread\",\"tid\":[]}",
               "{\"ph\":\"X\",\"cat\":\"user\",\"name\":\"late\",\"tid\":1,\"ts\":\"soon\",\"dur\":1}",
               "{\"ph\":\"Q\",\"cat\":\"user\",\"name\":\"odd\",\"tid\":1,\"ts\":5}",
               "{\"ph\":\"b\",\"cat\":\"rpc.call\",\"name\":\"f\",\"tid\":1,\"ts\":5,\"id\":\"x\"}",
               "{\"type\":\"unknown\"}", event_line(good, 1)});
  const MergedTrace merged = merge_trace_directory(directory);
  ASSERT_EQ(merged.processes.size(), 1u);
  EXPECT_EQ(merged.processes[0].unreadable_lines, 9);
  EXPECT_EQ(merged.processes[0].events, 1);
  EXPECT_EQ(merged.processes[0].name, "worker0");
  EXPECT_FALSE(merged.processes[0].clock_measured);
  EXPECT_EQ(testing::format_problems(merged_json(merged)), std::vector<std::string>{});
}

// Two processes' files written by hand: rank 1's clock reads 5 ms behind rank 0's.
TEST(TraceMerge, PutsEveryProcessOnRankZerosClock) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  const Event call{'X', "user", "on rank 0", 10'000'000, 1'000'000, 0, {}};
  const Event served{'X', "user", "on rank 1", 5'500'000, 200'000, 0, {}};
  write_lines(directory + "/trace-100.jsonl",
              {process_line(100, 0, "worker0"), clock_line(0, 0, 0), event_line(call, 1)});
  write_lines(directory + "/trace-200.jsonl",
              {process_line(200, 1, "worker1"), clock_line(5'000'000, 40'000, 0), clock_line(5'010'000, 30'000, 9),
               event_line(served, 1), "{\"ph\":\"X\",\"cat\":\"user\",\"name\":\"cut sh"});
  const MergedTrace merged = merge_trace_directory(directory);
  ASSERT_EQ(merged.processes.size(), 2u);
  EXPECT_EQ(merged.processes[1].clock_offset_ns, 5'010'000);  // the smaller error's
  EXPECT_EQ(merged.processes[1].clock_error_ns, 30'000);
  EXPECT_EQ(merged.processes[1].clock_drift_ns, 10'000);
  EXPECT_EQ(merged.processes[1].unreadable_lines, 1);
  const json trace = merged_json(merged);
  EXPECT_EQ(testing::format_problems(trace), std::vector<std::string>{});
  const auto at = [&](const std::string& name) {
    return testing::events_where(trace, [&](const json& e) { return e.value("name", "") == name; })
        .at(0)["ts"]
        .get<double>();
  };
  // On rank 0's clock rank 1's span starts at 10.51 ms, 0.51 ms after rank 0's; times in microseconds.
  EXPECT_DOUBLE_EQ(at("on rank 0"), 0.0);
  EXPECT_DOUBLE_EQ(at("on rank 1"), 510.0);
  const auto names = testing::events_where(trace, [](const json& e) { return e.value("name", "") == "process_name"; });
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1]["pid"], 200);
  EXPECT_NE(names[1]["args"]["name"].get<std::string>().find("worker1"), std::string::npos);
}

TEST(TraceStatistics, PercentilesAreNearestRank) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i);
  const Percentiles p = percentiles(samples);
  EXPECT_EQ(p.p50, 50);
  EXPECT_EQ(p.p90, 90);
  EXPECT_EQ(p.p99, 99);
  EXPECT_EQ(p.samples, 100);
  EXPECT_EQ(percentiles({7}).p99, 7);
  EXPECT_EQ(percentiles({}).samples, 0);
}

// Calls and passes written by hand: two calls of "adapt" from rank 0 to rank 1, one failed, and
// one backward pass with two gradient messages.
TEST(TraceStatistics, CallsAreCountedOnBothSidesAndPassesWithTheirMessages) {
  const distgrad::testing::ScratchDir scratch;
  const std::string& directory = scratch.path();
  const auto begin = [](uint64_t id, int64_t at) {
    return Event{'b', "rpc.call", "adapt", at, 0, id, {{"to", int64_t{1}}, {"request_bytes", int64_t{100}}}};
  };
  const auto end = [](uint64_t id, int64_t at, int64_t failed) {
    return Event{'e', "rpc.call", "adapt", at, 0, id, {{"reply_bytes", int64_t{10}}, {"failed", failed}}};
  };
  const auto serve = [](int64_t at, int64_t duration, int64_t failed) {
    return Event{'X', "rpc.serve", "adapt", at, duration, 0, {{"from", int64_t{0}}, {"failed", failed}}};
  };
  const Event pass{'X', "dist_autograd.pass", "backward pass", 0, 8'000'000, 0, {{"pass", int64_t{7}}}};
  const Event message{
      'X', "dist_autograd.message", "gradient message", 0, 1, 0, {{"pass", int64_t{7}}, {"bytes", int64_t{64}}}};
  write_lines(directory + "/trace-1.jsonl",
              {process_line(1, 0, "worker0"), event_line(begin(2, 0), 1), event_line(end(2, 4'000'000, 0), 2),
               event_line(end(4, 2'000'000, 1), 2), event_line(begin(4, 0), 1), event_line(pass, 1)});
  write_lines(directory + "/trace-2.jsonl",
              {process_line(2, 1, "worker1"), event_line(serve(0, 3'000'000, 0), 1),
               event_line(serve(0, 1'000'000, 1), 1), event_line(message, 1), event_line(message, 1)});
  Statistics statistics = merge_trace_directory(directory).statistics;
  ASSERT_EQ(statistics.functions.size(), 1u);
  const FunctionStatistics& adapt = statistics.functions[0];
  EXPECT_EQ(adapt.function, "adapt");
  EXPECT_EQ(adapt.caller, 0);
  EXPECT_EQ(adapt.callee, 1);
  EXPECT_EQ(adapt.calls, 2);
  EXPECT_EQ(adapt.failures, 1);
  EXPECT_EQ(adapt.caller_ms.p50, 2.0);
  EXPECT_EQ(adapt.caller_ms.p99, 4.0);
  EXPECT_EQ(adapt.callee_ms.p50, 1.0);
  EXPECT_EQ(adapt.callee_ms.p99, 3.0);
  EXPECT_EQ(adapt.request_bytes, 200);
  EXPECT_EQ(adapt.reply_bytes, 20);
  ASSERT_EQ(statistics.backward_passes.size(), 1u);
  EXPECT_EQ(statistics.backward_passes[0].driver, 0);
  EXPECT_EQ(statistics.backward_passes[0].passes, 1);
  EXPECT_EQ(statistics.backward_passes[0].messages, 2);
  EXPECT_EQ(statistics.backward_passes[0].message_bytes, 128);
  EXPECT_EQ(statistics.backward_passes[0].ms.p50, 8.0);
  const json as_json = json::parse(statistics_json(statistics));
  EXPECT_EQ(as_json["functions"][0]["failures"], 1);
  EXPECT_EQ(as_json["backward_passes"][0]["messages"], 2);
  EXPECT_NE(statistics_table(statistics).find("adapt"), std::string::npos);
  // A side that left no trace is "-" in the table and null in the JSON, not 0.
  statistics.functions[0].callee_ms = {};
  EXPECT_NE(statistics_table(statistics).find("       -        -        -"), std::string::npos)
      << statistics_table(statistics);
  EXPECT_TRUE(json::parse(statistics_json(statistics))["functions"][0]["callee_ms"].is_null());
}

TEST(TraceFormat, JsonStringsEscapeWhatJsonRequires) {
  const std::string text = std::string("a\"b\\c\nd\te") + '\x01';
  EXPECT_EQ(json::parse(json_string(text)).get<std::string>(), text);
}

}  // namespace
}  // namespace distgrad::trace
