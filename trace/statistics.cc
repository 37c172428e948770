#include "trace/statistics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace distgrad::trace {
namespace {

// null for a side that was not traced.
nlohmann::json to_json(const Percentiles& p) {
  if (p.samples == 0) return nullptr;
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
}

std::string format_ms(const Percentiles& p) {
  if (p.samples == 0) return absl::StrFormat("%8s %8s %8s", "-", "-", "-");
  return absl::StrFormat("%8.3f %8.3f %8.3f", p.p50, p.p90, p.p99);
}

std::string rank_text(int rank) { return rank < 0 ? "?" : std::to_string(rank); }

}  // namespace

Percentiles percentiles(std::vector<double> samples) {
  if (samples.empty()) return {};
  std::sort(samples.begin(), samples.end());
  const auto at = [&](double percent) {
    const auto rank = static_cast<size_t>(std::ceil(percent / 100.0 * static_cast<double>(samples.size())));
    return samples[std::max<size_t>(rank, 1) - 1];
  };
  return {at(50), at(90), at(99), static_cast<int64_t>(samples.size())};
}

std::string statistics_table(const Statistics& statistics) {
  std::string out;
  if (!statistics.functions.empty()) {
    absl::StrAppendFormat(&out, "%-32s %9s %8s %6s | %-26s | %-26s | %12s %12s\n", "function", "from->to", "calls",
                          "failed", "caller ms  p50      p90      p99", "callee ms  p50      p90      p99", "request B",
                          "reply B");
    for (const FunctionStatistics& f : statistics.functions) {
      absl::StrAppendFormat(&out, "%-32s %9s %8d %6d | %s | %s | %12d %12d\n", f.function,
                            rank_text(f.caller) + "->" + rank_text(f.callee), f.calls, f.failures,
                            format_ms(f.caller_ms), format_ms(f.callee_ms), f.request_bytes, f.reply_bytes);
    }
  }
  if (!statistics.backward_passes.empty()) {
    absl::StrAppendFormat(&out, "%-32s %9s %8s %6s | %-26s | %12s %12s\n", "distributed backward passes", "driver",
                          "passes", "failed", "time ms    p50      p90      p99", "messages", "message B");
    for (const PassStatistics& p : statistics.backward_passes) {
      absl::StrAppendFormat(&out, "%-32s %9s %8d %6d | %s | %12d %12d\n", "", rank_text(p.driver), p.passes, p.failures,
                            format_ms(p.ms), p.messages, p.message_bytes);
    }
  }
  return out.empty() ? "no calls and no distributed backward passes were traced\n" : out;
}

std::string statistics_json(const Statistics& statistics) {
  nlohmann::json functions = nlohmann::json::array();
  for (const FunctionStatistics& f : statistics.functions) {
    functions.push_back({{"function", f.function},
                         {"caller", f.caller},
                         {"callee", f.callee},
                         {"calls", f.calls},
                         {"failures", f.failures},
                         {"caller_ms", to_json(f.caller_ms)},
                         {"callee_ms", to_json(f.callee_ms)},
                         {"request_bytes", f.request_bytes},
                         {"reply_bytes", f.reply_bytes}});
  }
  nlohmann::json passes = nlohmann::json::array();
  for (const PassStatistics& p : statistics.backward_passes) {
    passes.push_back({{"driver", p.driver},
                      {"passes", p.passes},
                      {"failures", p.failures},
                      {"messages", p.messages},
                      {"message_bytes", p.message_bytes},
                      {"ms", to_json(p.ms)}});
  }
  return nlohmann::json{{"functions", functions}, {"backward_passes", passes}}.dump(2);
}

}  // namespace distgrad::trace
