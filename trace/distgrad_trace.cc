// distgrad-trace: merges a job's trace files (trace/merge.h) when the job was not run by
// `distgrad-run --trace`, or when it ended before its launcher could.
//
//   distgrad-trace merge DIR       # writes DIR/trace.json and DIR/stats.json, prints the summary
#include <cstdio>
#include <cstring>
#include <exception>

#include "trace/merge.h"

int main(int argc, char** argv) {
  if (argc != 3 || std::strcmp(argv[1], "merge") != 0) {
    std::fprintf(stderr,
                 "usage: distgrad-trace merge DIR\n"
                 "  merges DIR/trace-<pid>.jsonl (written under DISTGRAD_TRACE=DIR) into DIR/trace.json (open it in\n"
                 "  Perfetto UI or chrome://tracing) and DIR/stats.json, and prints the statistics\n");
    return 2;
  }
  try {
    const distgrad::trace::MergedTrace merged = distgrad::trace::merge_trace_directory(argv[2]);
    distgrad::trace::write_merged_trace(merged, argv[2]);
    std::fputs(distgrad::trace::merged_summary(merged).c_str(), stdout);
    std::printf("timeline: %s/trace.json; statistics: %s/stats.json\n", argv[2], argv[2]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "distgrad-trace: %s\n", error.what());
    return 1;
  }
  return 0;
}
