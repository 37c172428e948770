#include "rpc/trace_clock.h"

#include <cstdio>
#include <limits>

#include "rpc/rpc.h"
#include "trace/merge.h"
#include "trace/trace.h"

namespace distgrad::rpc::detail {
namespace {

constexpr int kClockSamples = 16;
constexpr std::chrono::seconds kClockCallTimeout(10);

int64_t trace_clock_reading() { return trace::now_ns(); }
DISTGRAD_REMOTE_NAMED(trace_clock_reading, "__distgrad.trace.clock");

}  // namespace

void measure_trace_clock() {
  if (!trace::enabled()) return;
  if (get_rank() == 0) {
    trace::set_clock_offset(0, 0, trace::now_ns());
    return;
  }
  int64_t best_round_trip = std::numeric_limits<int64_t>::max(), best_offset = 0, measured_at = 0;
  try {
    for (int i = 0; i < kClockSamples; ++i) {
      const int64_t sent = trace::now_ns();
      const int64_t reading = rpc_sync_with_timeout(0, kClockCallTimeout, &trace_clock_reading);
      const int64_t received = trace::now_ns();
      if (received - sent < best_round_trip) {
        best_round_trip = received - sent;
        best_offset = reading - (sent + (received - sent) / 2);
        measured_at = received;
      }
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "[%s] trace: could not measure the clock offset to rank 0, the timeline may be skewed: %s\n",
                 get_worker_name().c_str(), error.what());
    return;
  }
  trace::set_clock_offset(best_offset, (best_round_trip + 1) / 2, measured_at);
}

void report_trace(const std::string& directory) {
  trace::flush();
  try {
    const trace::MergedTrace merged = trace::merge_trace_directory(directory);
    trace::write_merged_trace(merged, directory);
    std::fprintf(stderr, "%stimeline: %s/trace.json; statistics: %s/stats.json\n",
                 trace::merged_summary(merged).c_str(), directory.c_str(), directory.c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "trace: could not merge %s: %s\n", directory.c_str(), error.what());
  }
}

}  // namespace distgrad::rpc::detail
