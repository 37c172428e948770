// Merging a job's trace files (Note [Trace files] in trace/trace.h) into one timeline: a Chrome /
// Perfetto trace-event JSON file (the JSON Object Format) with one process track per rank and one
// thread track per recording thread, every timestamp on rank 0's clock, and the job's statistics
// (trace/statistics.h). Run by `distgrad-run --trace DIR` when the job ends, by rank 0 at RPC's
// graceful shutdown, and by `distgrad-trace merge DIR`.
//
//   const MergedTrace merged = merge_trace_directory("out");
//   write_merged_trace(merged, "out");   // out/trace.json and out/stats.json
//   std::fputs(merged_summary(merged).c_str(), stderr);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/statistics.h"

namespace distgrad::trace {

// One process's file, as read.
struct ProcessTrace {
  std::string file;
  int64_t pid = 0;
  int rank = -1;  // -1: the process never learned its rank
  std::string name;
  int64_t events = 0;
  uint64_t dropped = 0;          // events its buffer had no room for
  int64_t unreadable_lines = 0;  // a line cut short when the process was killed, say
  bool clock_measured = false;
  int64_t clock_offset_ns = 0;  // added to its timestamps (the measurement with the smallest error)
  int64_t clock_error_ns = 0;   // that measurement's bound
  int64_t clock_drift_ns = 0;   // how far its measurements disagree (0 with one)
};

struct MergedTrace {
  std::vector<ProcessTrace> processes;  // by rank
  std::string trace_json;               // the trace-event file's text
  Statistics statistics;
};

// Reads every trace-*.jsonl file in `directory`. Throws naming the directory when it holds none.
MergedTrace merge_trace_directory(const std::string& directory);
// Writes DIRECTORY/trace.json and DIRECTORY/stats.json; throws naming a file it cannot write.
void write_merged_trace(const MergedTrace& merged, const std::string& directory);
// A few lines on the processes (events, drops, clock errors), then the statistics table.
std::string merged_summary(const MergedTrace& merged);

}  // namespace distgrad::trace
