// The lines of a trace file (Note [Trace files] in trace/trace.h): one JSON object per line,
// written by trace.cc and read by trace/merge.h.
//
//   {"type":"process","pid":4711,"rank":1,"name":"worker1"}
//   {"type":"thread","tid":2,"name":"rpc executor"}
//   {"ph":"X","cat":"rpc.serve","name":"adapt","tid":2,"ts":81234567,"dur":5230,"bind_id":77,"flow_in":true,"args":{"from":0}}
//   {"type":"clock","offset_ns":-1200,"error_ns":35000,"at_ns":81000000}
//   {"type":"dropped","count":12}
//
// Event lines are trace-event events (trace.h's Event) with times in nanoseconds on the writing
// process's clock; a "process" line may come again (the rank is known only once RPC starts), and
// the last one holds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trace/trace.h"

namespace distgrad::trace {

std::string process_line(int64_t pid, int rank, std::string_view name);
std::string thread_line(int tid, std::string_view name);
std::string event_line(const Event& event, int tid);
std::string clock_line(int64_t offset_ns, int64_t error_ns, int64_t measured_at_ns);
std::string dropped_line(uint64_t count);

// `text` as a JSON string literal, quotes included.
std::string json_string(std::string_view text);

}  // namespace distgrad::trace
