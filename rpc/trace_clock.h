// Putting a job's trace on one clock (internal to rpc/): the agent measures, when RPC starts and
// again at its graceful shutdown, how far this process's trace clock is from rank 0's, and writes
// the offset with its error into the trace (trace::set_clock_offset), which the merge applies.
//
// Note [Trace clocks]
// Each rank but 0 calls rank 0 for its clock reading kClockSamples times and keeps the round trip
// that took least: rank 0 read its clock between the call's send and its reply's arrival, so the
// offset (rank 0's reading minus the round trip's midpoint on this clock) is wrong by at most half
// that round trip, the error written beside it. Ranks on one host share the steady clock, so
// their offsets are 0 within that error (tests/trace checks it); across hosts the offset is
// whatever separates the machines' boot times. A second measurement at the graceful shutdown
// shows the drift between them (reported by the merge); the merge uses the one with the smaller
// error.
#pragma once

#include <string>

namespace distgrad::rpc::detail {

// Measures and records this process's clock offset (rank 0 records itself as the reference); a
// no-op when the process does not record a trace. A failed measurement is reported on stderr and
// leaves the offset unmeasured.
void measure_trace_clock();

// After a graceful shutdown, on rank 0 of a job that recorded: writes its own file, merges the trace
// directory's files (every rank wrote its file between the shutdown's barriers, once every rank's
// calls were answered) into
// trace.json and stats.json there, and prints the summary and statistics table on stderr. What the
// other ranks recorded after that write (the shutdown's own calls) is missing from this merge and
// present in the one run once every process has exited (distgrad-run --trace, distgrad-trace).
void report_trace(const std::string& directory);

}  // namespace distgrad::rpc::detail
