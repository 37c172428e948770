// For the trace tests: a check of a merged timeline against the trace-event format (the JSON Object Format read by
// Perfetto UI and chrome://tracing), and a search of its events.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace distgrad::trace::testing {

// What in `trace` breaks the format, one line per problem; empty when nothing does. Checked: the
// top level is {"traceEvents": [...]}; every event has a known phase, a name, integer pid and tid
// and (but metadata) a numeric ts; complete events a duration >= 0; metadata events their
// args.name or args.sort_index; a flow arrow's ends (complete events with a string bind_id and
// flow_out or flow_in) pair up, every arrow in having one out; asynchronous begins and ends pair
// up by process, category and process-local id (id2.local).
inline std::vector<std::string> format_problems(const nlohmann::json& trace) {
  std::vector<std::string> problems;
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    return {"the top level is not an object with a traceEvents array"};
  }
  static const std::set<std::string> kPhases = {"X", "M", "C", "b", "e"};
  std::set<std::string> flows_out, flows_in;
  std::map<std::string, int> open_async;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    const std::string where = event.dump().substr(0, 160);
    const std::string phase = event.value("ph", "");
    if (!kPhases.contains(phase)) problems.push_back("unknown phase: " + where);
    if (!event.contains("name") || !event["name"].is_string()) problems.push_back("no name: " + where);
    if (!event.contains("pid") || !event["pid"].is_number_integer()) problems.push_back("no integer pid: " + where);
    if (!event.contains("tid") || !event["tid"].is_number_integer()) problems.push_back("no integer tid: " + where);
    if (phase == "M") {
      const nlohmann::json& args = event.value("args", nlohmann::json::object());
      if (!args.contains("name") && !args.contains("sort_index")) problems.push_back("metadata without args: " + where);
      continue;
    }
    if (!event.contains("ts") || !event["ts"].is_number()) problems.push_back("no numeric ts: " + where);
    if (phase == "X" && (!event.contains("dur") || !event["dur"].is_number() || event["dur"].get<double>() < 0)) {
      problems.push_back("complete event without a duration >= 0: " + where);
    }
    if (event.contains("bind_id")) {
      const bool out = event.value("flow_out", false), in = event.value("flow_in", false);
      if (phase != "X" || !event["bind_id"].is_string() || out == in) {
        problems.push_back("a flow end is not a complete event with a string bind_id and one direction: " + where);
        continue;
      }
      (out ? flows_out : flows_in).insert(event["bind_id"].get<std::string>());
    }
    if (phase == "b" || phase == "e") {
      if (!event.contains("id2") || !event["id2"].contains("local") || !event["id2"]["local"].is_string()) {
        problems.push_back("an asynchronous event without a string id2.local: " + where);
        continue;
      }
      const std::string key = std::to_string(event.value("pid", int64_t{0})) + "/" + event.value("cat", "") + "/" +
                              event["id2"]["local"].get<std::string>();
      open_async[key] += phase == "b" ? 1 : -1;
    }
  }
  for (const std::string& id : flows_in) {
    if (!flows_out.contains(id)) problems.push_back("flow " + id + " arrives but never leaves");
  }
  for (const auto& [key, open] : open_async) {
    if (open != 0) problems.push_back("asynchronous span " + key + " is not closed exactly once");
  }
  return problems;
}

// The rank of each process track ("pid") of a merged trace (trace/merge.h's otherData).
inline std::map<int64_t, int> rank_of_track(const nlohmann::json& trace) {
  std::map<int64_t, int> ranks;
  for (const nlohmann::json& process : trace["otherData"]["processes"]) {
    ranks[process["track"].get<int64_t>()] = process["rank"].get<int>();
  }
  return ranks;
}

// The events of `trace` for which `pick` holds.
template <typename Pick>
std::vector<nlohmann::json> events_where(const nlohmann::json& trace, Pick pick) {
  std::vector<nlohmann::json> picked;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (pick(event)) picked.push_back(event);
  }
  return picked;
}

}  // namespace distgrad::trace::testing
