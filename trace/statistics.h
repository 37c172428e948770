// Statistics of a job's calls and distributed backward passes, computed from its merged trace
// (trace/merge.h): per registered function and per (caller, callee) pair, the calls, failures,
// time on both sides (p50/p90/p99) and bytes each way; per backward pass, its gradient messages,
// their bytes and its time. Printed as a table by rank 0 at RPC's graceful shutdown and by
// `distgrad-trace merge`, and written as JSON (DIR/stats.json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distgrad::trace {

// Milliseconds at the 50th, 90th and 99th percentiles (nearest rank) of `samples` times; all 0
// when there are none (a side that was not traced).
struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
  int64_t samples = 0;
};
Percentiles percentiles(std::vector<double> samples);

// One registered function called from one rank on another. The caller's time runs from the call's
// issue to its reply decoded; the callee's from taking the request off its queue to its reply
// encoded; -1 for a side whose process left no trace.
struct FunctionStatistics {
  std::string function;
  int caller = -1, callee = -1;
  int64_t calls = 0;     // seen by the caller (or the callee, when the caller left no trace)
  int64_t failures = 0;  // calls that ended in an error, on either side
  Percentiles caller_ms, callee_ms;
  int64_t request_bytes = 0, reply_bytes = 0;  // in all, the frames' sizes
};

// The distributed backward passes one driver ran.
struct PassStatistics {
  int driver = -1;
  int64_t passes = 0, failures = 0;
  int64_t messages = 0;       // gradient messages in all its passes, on every worker
  int64_t message_bytes = 0;  // their gradients' bytes
  Percentiles ms;
};

struct Statistics {
  std::vector<FunctionStatistics> functions;    // by function, caller, callee
  std::vector<PassStatistics> backward_passes;  // by driver
};

// A fixed-width table for people.
std::string statistics_table(const Statistics& statistics);
// The same as a JSON object: {"functions": [...], "backward_passes": [...]}.
std::string statistics_json(const Statistics& statistics);

}  // namespace distgrad::trace
