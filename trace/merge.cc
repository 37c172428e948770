#include "trace/merge.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include "absl/strings/str_format.h"
#include "core/error.h"
#include "nlohmann/json.hpp"

namespace distgrad::trace {
namespace {

using nlohmann::json;

struct ClockMeasurement {
  int64_t offset_ns = 0, error_ns = 0;
};

// One file as read: its process, its threads' names and its events (times on its own clock).
struct ProcessFile {
  ProcessTrace trace;
  std::map<int64_t, std::string> thread_names;
  std::vector<json> events;
  std::vector<ClockMeasurement> clocks;
};

// Whether `object` is an event line as trace/event_format.h writes them (the fields the merge
// reads, with their types); a line that is not is counted as unreadable, never trusted.
bool is_event(const json& object) {
  static const std::set<std::string> kPhases = {"X", "C", "b", "e"};
  const auto is = [&](const char* key, auto check) { return object.contains(key) && (object[key].*check)(); };
  const auto absent_or = [&](const char* key, auto check) { return !object.contains(key) || (object[key].*check)(); };
  return is("ph", &json::is_string) && kPhases.contains(object["ph"].get<std::string>()) &&
         is("ts", &json::is_number_integer) && is("tid", &json::is_number_integer) && is("name", &json::is_string) &&
         is("cat", &json::is_string) && (object["ph"] != "X" || is("dur", &json::is_number_integer)) &&
         absent_or("id", &json::is_number_unsigned) && absent_or("bind_id", &json::is_number_unsigned) &&
         absent_or("args", &json::is_object);
}

// The integer field `key` of `object`; throws when it is missing or not an integer.
int64_t integer_field(const json& object, const char* key) {
  const json& value = object.at(key);
  if (!value.is_number_integer()) throw std::invalid_argument(std::string(key) + " is not an integer");
  return value.get<int64_t>();
}

// Reads the known lines of a trace file; a line of an unknown type, or a known one with fields of
// the wrong types, counts as unreadable (the caller counts what this throws).
void read_line(json object, ProcessFile& file) {
  const std::string type = object.value("type", "");
  if (type == "process") {
    file.trace.pid = integer_field(object, "pid");
    file.trace.rank = static_cast<int>(integer_field(object, "rank"));
    file.trace.name = object.at("name").get<std::string>();
  } else if (type == "thread") {
    file.thread_names[integer_field(object, "tid")] = object.at("name").get<std::string>();
  } else if (type == "clock") {
    file.clocks.push_back({integer_field(object, "offset_ns"), integer_field(object, "error_ns")});
  } else if (type == "dropped") {
    file.trace.dropped = std::max(file.trace.dropped, static_cast<uint64_t>(integer_field(object, "count")));
  } else if (type.empty() && is_event(object)) {
    file.events.push_back(std::move(object));
  } else {
    ++file.trace.unreadable_lines;
  }
}

ProcessFile read_process_file(const std::filesystem::path& path) {
  ProcessFile file;
  file.trace.file = path.string();
  std::ifstream in(path);
  DISTGRAD_CHECK(in, "trace merge: cannot read ", path.string());
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json object = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded() || !object.is_object()) {
      ++file.trace.unreadable_lines;
      continue;
    }
    try {
      read_line(std::move(object), file);
    } catch (const std::exception&) {  // a known line with a field missing or of the wrong type
      ++file.trace.unreadable_lines;
    }
  }
  file.trace.events = static_cast<int64_t>(file.events.size());
  if (!file.clocks.empty()) {
    const auto best = std::min_element(file.clocks.begin(), file.clocks.end(),
                                       [](const auto& a, const auto& b) { return a.error_ns < b.error_ns; });
    const auto [low, high] = std::minmax_element(
        file.clocks.begin(), file.clocks.end(), [](const auto& a, const auto& b) { return a.offset_ns < b.offset_ns; });
    file.trace.clock_measured = true;
    file.trace.clock_offset_ns = best->offset_ns;
    file.trace.clock_error_ns = best->error_ns;
    file.trace.clock_drift_ns = high->offset_ns - low->offset_ns;
  }
  return file;
}

int64_t integer_arg(const json& event, const char* key, int64_t otherwise) {
  const auto args = event.find("args");
  if (args == event.end() || !args->is_object()) return otherwise;
  const auto value = args->find(key);
  return value != args->end() && value->is_number_integer() ? value->get<int64_t>() : otherwise;
}

// Statistics from the events of every process (trace/statistics.h). The caller's side of a call
// is its asynchronous span (cat "rpc.call": 'b' with the callee and request bytes, 'e' with the
// reply bytes and whether it failed); the callee's its "rpc.serve" span; a backward pass its
// driver's "dist_autograd.pass" span, and its gradient messages the "dist_autograd.message" spans
// of the workers they reached.
Statistics compute_statistics(const std::vector<ProcessFile>& files) {
  struct Side {
    std::vector<double> ms;
    int64_t failures = 0, request_bytes = 0, reply_bytes = 0;
  };
  std::map<std::tuple<std::string, int, int>, std::pair<Side, Side>> calls;  // (function, caller, callee) -> sides
  struct Pass {
    int driver = -1;
    double ms = 0;
    bool failed = false;
    int64_t messages = 0, bytes = 0;
  };
  std::map<int64_t, Pass> passes;  // by pass id
  for (const ProcessFile& file : files) {
    const int rank = file.trace.rank;
    // A call's ends, by id: the file holds each thread's events in order, not the process's, so an
    // end may come before its beginning.
    std::map<uint64_t, std::pair<const json*, const json*>> call_ends;
    for (const json& event : file.events) {
      const std::string category = event.value("cat", "");
      const std::string phase = event.value("ph", "");
      if (category == "rpc.call" && (phase == "b" || phase == "e")) {
        auto& [begin, end] = call_ends[event.value("id", uint64_t{0})];
        (phase == "b" ? begin : end) = &event;
      } else if (category == "rpc.serve" && phase == "X") {
        Side& side = calls[{event.value("name", ""), static_cast<int>(integer_arg(event, "from", -1)), rank}].second;
        side.ms.push_back(static_cast<double>(event.value("dur", int64_t{0})) / 1e6);
        side.failures += integer_arg(event, "failed", 0);
        side.request_bytes += integer_arg(event, "request_bytes", 0);
        side.reply_bytes += integer_arg(event, "reply_bytes", 0);
      } else if (category == "dist_autograd.pass" && phase == "X") {
        Pass& pass = passes[integer_arg(event, "pass", 0)];
        pass.driver = rank;
        pass.ms = static_cast<double>(event.value("dur", int64_t{0})) / 1e6;
        pass.failed = integer_arg(event, "failed", 0) != 0;
      } else if (category == "dist_autograd.message" && phase == "X") {
        Pass& pass = passes[integer_arg(event, "pass", 0)];
        ++pass.messages;
        pass.bytes += integer_arg(event, "bytes", 0);
      }
    }
    for (const auto& [id, ends] : call_ends) {
      const auto [begin, end] = ends;
      if (begin == nullptr || end == nullptr) continue;  // a call the process did not see end
      Side& side = calls[{begin->value("name", ""), rank, static_cast<int>(integer_arg(*begin, "to", -1))}].first;
      side.ms.push_back(static_cast<double>(end->value("ts", int64_t{0}) - begin->value("ts", int64_t{0})) / 1e6);
      side.failures += integer_arg(*end, "failed", 0);
      side.request_bytes += integer_arg(*begin, "request_bytes", 0);
      side.reply_bytes += integer_arg(*end, "reply_bytes", 0);
    }
  }
  Statistics statistics;
  for (const auto& [key, sides] : calls) {
    const auto& [caller_side, callee_side] = sides;
    const bool caller_traced = !caller_side.ms.empty();
    const Side& counted = caller_traced ? caller_side : callee_side;
    FunctionStatistics f;
    std::tie(f.function, f.caller, f.callee) = key;
    f.calls = static_cast<int64_t>(counted.ms.size());
    f.failures = counted.failures;
    f.caller_ms = percentiles(caller_side.ms);
    f.callee_ms = percentiles(callee_side.ms);
    f.request_bytes = counted.request_bytes;
    f.reply_bytes = counted.reply_bytes;
    statistics.functions.push_back(std::move(f));
  }
  std::map<int, std::pair<PassStatistics, std::vector<double>>> by_driver;
  for (const auto& [id, pass] : passes) {
    if (pass.driver < 0) continue;  // messages of a pass whose driver left no trace
    auto& [p, times] = by_driver[pass.driver];
    p.driver = pass.driver;
    ++p.passes;
    p.failures += pass.failed ? 1 : 0;
    p.messages += pass.messages;
    p.message_bytes += pass.bytes;
    times.push_back(pass.ms);
  }
  for (auto& [driver, entry] : by_driver) {
    entry.first.ms = percentiles(entry.second);
    statistics.backward_passes.push_back(entry.first);
  }
  return statistics;
}

// The order of a process's thread tracks: "main" first, then by name with a trailing number read
// as a number ("rpc executor 2" before "rpc executor 10"); returns (sort key, tid) pairs, sorted.
std::vector<std::pair<std::tuple<bool, std::string, int64_t, int64_t>, int64_t>> thread_order(
    const std::map<int64_t, std::string>& names) {
  std::vector<std::pair<std::tuple<bool, std::string, int64_t, int64_t>, int64_t>> order;
  for (const auto& [tid, name] : names) {
    const size_t digits = name.find_last_not_of("0123456789") + 1;
    const bool numbered = digits < name.size() && name.size() - digits <= 9;
    const int64_t number = numbered ? std::stoll(name.substr(digits)) : -1;
    order.push_back({{name != "main", numbered ? name.substr(0, digits) : name, number, tid}, tid});
  }
  std::sort(order.begin(), order.end());
  return order;
}

// The track ids ("pid") of the processes in the merged file: their own pids, which viewers show
// beside the name, unless two processes share one (files of several hosts), when the later ones
// get ids past any pid.
std::vector<int64_t> process_tracks(const std::vector<ProcessFile>& files) {
  std::vector<int64_t> tracks;
  std::set<int64_t> taken;
  for (size_t i = 0; i < files.size(); ++i) {
    const int64_t pid = files[i].trace.pid;
    tracks.push_back(taken.insert(pid).second ? pid : (int64_t{1} << 32) + static_cast<int64_t>(i));
  }
  return tracks;
}

// The trace-event form of one recorded event of a process with track id `pid`: times in
// microseconds from `origin` on rank 0's clock, ids as strings (64-bit numbers lose their low
// bits in a JavaScript viewer), an asynchronous span's id scoped to its process ("id2": {"local"}),
// and the main thread's track id the process's own (viewers put that thread first).
json trace_event(const json& recorded, int64_t pid, int64_t offset_ns, int64_t origin, int64_t main_tid) {
  json out = recorded;
  out["pid"] = pid;
  if (recorded.value("tid", int64_t{-1}) == main_tid) out["tid"] = pid;
  out["ts"] = static_cast<double>(recorded.value("ts", int64_t{0}) + offset_ns - origin) / 1e3;
  if (recorded.contains("dur")) out["dur"] = static_cast<double>(recorded.value("dur", int64_t{0})) / 1e3;
  if (recorded.contains("id")) {
    out.erase("id");
    out["id2"] = {{"local", absl::StrFormat("0x%x", recorded.value("id", uint64_t{0}))}};
  }
  if (recorded.contains("bind_id")) out["bind_id"] = absl::StrFormat("0x%x", recorded.value("bind_id", uint64_t{0}));
  return out;
}

}  // namespace

MergedTrace merge_trace_directory(const std::string& directory) {
  std::vector<std::filesystem::path> paths;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("trace-") && name.ends_with(".jsonl")) paths.push_back(entry.path());
  }
  DISTGRAD_CHECK(!error, "trace merge: cannot list ", directory, ": ", error.message());
  DISTGRAD_CHECK(!paths.empty(), "trace merge: expected trace-<pid>.jsonl files in ", directory,
                 ", found none (was the job run with DISTGRAD_TRACE or --trace pointing there?)");
  std::vector<ProcessFile> files;
  for (const auto& path : paths) files.push_back(read_process_file(path));
  std::sort(files.begin(), files.end(), [](const ProcessFile& a, const ProcessFile& b) {
    return std::make_tuple(a.trace.rank < 0, a.trace.rank, a.trace.pid) <
           std::make_tuple(b.trace.rank < 0, b.trace.rank, b.trace.pid);
  });

  int64_t origin = std::numeric_limits<int64_t>::max();  // the first event, on rank 0's clock
  for (const ProcessFile& file : files) {
    for (const json& event : file.events) {
      origin = std::min(origin, event.value("ts", int64_t{0}) + file.trace.clock_offset_ns);
    }
  }
  json events = json::array();
  const std::vector<int64_t> tracks = process_tracks(files);
  for (size_t i = 0; i < files.size(); ++i) {
    const ProcessFile& file = files[i];
    const int64_t pid = tracks[i];
    const std::string label =
        (file.trace.rank >= 0 ? "rank " + std::to_string(file.trace.rank) : "rank ?") + " (" + file.trace.name + ")";
    const int64_t sort_index = file.trace.rank >= 0 ? file.trace.rank : 1'000'000 + static_cast<int64_t>(i);
    events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", pid}, {"name", "process_name"}, {"args", {{"name", label}}}});
    events.push_back({{"ph", "M"},
                      {"pid", pid},
                      {"tid", pid},
                      {"name", "process_sort_index"},
                      {"args", {{"sort_index", sort_index}}}});
    int64_t main_tid = -1;
    int thread_index = 0;
    for (const auto& [order, tid] : thread_order(file.thread_names)) {
      const std::string& name = file.thread_names.at(tid);
      if (name == "main") main_tid = tid;
      const int64_t track = name == "main" ? pid : tid;
      events.push_back(
          {{"ph", "M"}, {"pid", pid}, {"tid", track}, {"name", "thread_name"}, {"args", {{"name", name}}}});
      events.push_back({{"ph", "M"},
                        {"pid", pid},
                        {"tid", track},
                        {"name", "thread_sort_index"},
                        {"args", {{"sort_index", thread_index++}}}});
    }
    for (const json& event : file.events) {
      events.push_back(trace_event(event, pid, file.trace.clock_offset_ns, origin, main_tid));
    }
  }

  MergedTrace merged;
  merged.statistics = compute_statistics(files);
  json processes = json::array();
  for (size_t i = 0; i < files.size(); ++i) {
    const ProcessFile& file = files[i];
    merged.processes.push_back(file.trace);
    processes.push_back({{"track", tracks[i]},
                         {"rank", file.trace.rank},
                         {"name", file.trace.name},
                         {"pid", file.trace.pid},
                         {"events", file.trace.events},
                         {"dropped_events", file.trace.dropped},
                         {"unreadable_lines", file.trace.unreadable_lines},
                         {"clock_measured", file.trace.clock_measured},
                         {"clock_offset_ns", file.trace.clock_offset_ns},
                         {"clock_error_ns", file.trace.clock_error_ns},
                         {"clock_drift_ns", file.trace.clock_drift_ns}});
  }
  merged.trace_json =
      json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", {{"processes", processes}}}}
          .dump();
  return merged;
}

void write_merged_trace(const MergedTrace& merged, const std::string& directory) {
  const auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = directory + "/" + name;
    std::ofstream out(path, std::ios::trunc);
    out << text;
    out.close();
    DISTGRAD_CHECK(out, "trace merge: cannot write ", path);
  };
  write("trace.json", merged.trace_json);
  write("stats.json", statistics_json(merged.statistics));
}

std::string merged_summary(const MergedTrace& merged) {
  std::string out;
  int64_t events = 0, worst_error = 0;
  uint64_t dropped = 0;
  for (const ProcessTrace& p : merged.processes) {
    events += p.events;
    dropped += p.dropped;
    worst_error = std::max(worst_error, p.clock_error_ns);
  }
  absl::StrAppendFormat(&out, "trace: %d processes, %d events, %d dropped; clocks aligned to rank 0's within %.1f us\n",
                        merged.processes.size(), events, dropped, static_cast<double>(worst_error) / 1e3);
  for (const ProcessTrace& p : merged.processes) {
    absl::StrAppendFormat(
        &out, "  rank %2s %-16s pid %-8d %9d events %6d dropped %3d unreadable lines  clock %s\n",
        p.rank < 0 ? "?" : std::to_string(p.rank), p.name, p.pid, p.events, p.dropped, p.unreadable_lines,
        p.clock_measured
            ? absl::StrFormat("%+.1f us +- %.1f us (drift %.1f us)", static_cast<double>(p.clock_offset_ns) / 1e3,
                              static_cast<double>(p.clock_error_ns) / 1e3, static_cast<double>(p.clock_drift_ns) / 1e3)
            : std::string("not measured"));
  }
  return out + statistics_table(merged.statistics);
}

}  // namespace distgrad::trace
