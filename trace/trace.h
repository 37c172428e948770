// Tracing: spans, counters and flow arrows recorded by every process of a job, for one timeline.
//
// Off by default. `DISTGRAD_TRACE=DIR` (set by `distgrad-run --trace DIR`), or trace::start(DIR),
// makes a process record: each call on both sides (rpc/), each distributed backward pass
// (dist_autograd/), DDP's buckets and collectives (ddp/), shared-memory copies (transport/), and
// the program's own ranges and counters. When tracing is off, each of those points costs one
// relaxed atomic load (trace::enabled()).
//
// Note [Trace files]
// A recording process appends one JSON object per line to DIR/trace-<pid>.jsonl from a background
// thread every 200 ms, so a process that is killed leaves everything recorded until its last
// write. Events wait in a buffer per recording thread (no lock shared between threads), the
// buffers bounded together (DISTGRAD_TRACE_BUFFER events, 1,000,000 by default); events that find
// them full are dropped and counted, and the count is written with the events. Timestamps are
// this process's steady clock in nanoseconds; the agent measures the offset from it to rank 0's
// clock, with its error, when RPC starts and again at its graceful shutdown (Note [Trace clocks]
// in rpc/trace_clock.h), and trace/merge.h puts every process on rank 0's clock. A file holds each
// thread's events in the order they were recorded, the threads' interleaved as they were written.
// The line format is trace/event_format.h's.
//
//   void adapt_all(...) {
//     DISTGRAD_TRACE_SCOPE("inner loop");       // a span from here to the end of the block
//     trace::counter("tasks in flight", n);      // a counter track
//   }
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "absl/container/inlined_vector.h"

namespace distgrad::trace {

namespace detail {
extern std::atomic<bool> recording;
}  // namespace detail

// Whether this process records (the only cost of a trace point when it does not).
inline bool enabled() { return detail::recording.load(std::memory_order_relaxed); }

// This process's trace clock: steady clock, nanoseconds.
int64_t now_ns();

// An event's argument, a number: its key is a string literal (kept by pointer, as categories are).
struct Arg {
  const char* key;
  std::variant<int64_t, double> value;
};
// Events carry a few arguments each, held without an allocation of their own.
using Args = absl::InlinedVector<Arg, 4>;

// Whether a span is an end of a flow arrow (the trace-event format's flow events "v2": the span
// itself carries the arrow's id, so the arrow binds to it and not to whatever else is open).
enum class Flow : uint8_t { kNone, kIn, kOut };

// One recorded event, in the trace-event format's terms: phase 'X' (a complete span), 'C' (a
// counter), 'b' / 'e' (the ends of an asynchronous span, matched by id). The category is a
// string literal.
struct Event {
  char phase = 'X';
  const char* category = "";
  std::string name;
  int64_t start_ns = 0;
  int64_t duration_ns = 0;  // 'X' only
  uint64_t id = 0;          // an asynchronous span's, or the flow arrow's of a span with `flow`
  Args args;
  Flow flow = Flow::kNone;
};

// Records `event` on the calling thread's track; nothing when tracing is off.
void record(Event event);

// A span on the calling thread from its construction to its destruction, with arguments and
// flow arrows added while it is open. Inert (and free beyond enabled()) when tracing is off.
class Span {
 public:
  // `category`: a string literal ("rpc", "user").
  Span(const char* category, std::string_view name);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool active() const { return active_; }
  // Renames the span (a name known only once it started: the function a request calls).
  void set_name(std::string_view name);
  // `key`: a string literal.
  void arg(const char* key, int64_t value);
  // An arrow from this span to the span that calls flow_in with the same id (another thread or
  // process). A span is one end of one arrow: a later call replaces an earlier one; id 0 is none.
  void flow_out(uint64_t id);
  void flow_in(uint64_t id);

 private:
  bool active_;
  Event event_;
};

// A counter's value from now on, drawn as a track of its own.
void counter(std::string_view name, double value);

// An id for a flow arrow or an asynchronous span, unique in the job; even, so that id + 1 is free
// for a second arrow of the same exchange (a call's reply).
uint64_t new_id();

// Names the calling thread's track ("rpc executor", "ddp collectives"); by default "thread N".
void set_thread_name(std::string_view name);

// Starts recording into `directory` (created if missing); a second start is ignored.
// `max_buffered_events`: the bound of Note [Trace files]. Throws naming the directory when it
// cannot be written.
void start(const std::string& directory, size_t max_buffered_events = 1'000'000);
// start(DISTGRAD_TRACE, DISTGRAD_TRACE_BUFFER) when DISTGRAD_TRACE is set; returns whether this
// process records.
bool start_from_environment();
// Writes what is buffered and waits until it is written, at most `timeout`; returns whether it was
// (a late write is reported on stderr).
bool flush(std::chrono::milliseconds timeout = std::chrono::seconds(10));
// Stops recording and writes everything; also run at exit.
void stop();
// The directory this process records into; empty when it does not.
std::string directory();

// Who this process is in the job, written into its file (the merged timeline's track names).
void set_process(int rank, std::string_view name);
// The offset to add to this process's clock to read rank 0's, and its error bound, measured at
// this process's clock reading `measured_at_ns`.
void set_clock_offset(int64_t offset_ns, int64_t error_ns, int64_t measured_at_ns);

// Events dropped so far because the buffer was full.
uint64_t dropped_events();

}  // namespace distgrad::trace

#define DISTGRAD_TRACE_CONCAT_INNER(a, b) a##b
#define DISTGRAD_TRACE_CONCAT(a, b) DISTGRAD_TRACE_CONCAT_INNER(a, b)
// A span named `name` (category "user") from here to the end of the enclosing block.
#define DISTGRAD_TRACE_SCOPE(name) \
  ::distgrad::trace::Span DISTGRAD_TRACE_CONCAT(distgrad_trace_scope_, __LINE__)("user", name)
