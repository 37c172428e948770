#include "trace/trace.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "core/error.h"
#include "trace/event_format.h"

namespace distgrad::trace {

namespace detail {
std::atomic<bool> recording{false};
}  // namespace detail

namespace {

constexpr std::chrono::milliseconds kWriteInterval(200);

std::atomic<int> next_thread_id{1};

// One thread's events waiting to be written: the thread appends, the writer takes them out.
struct ThreadBuffer {
  std::mutex mutex;  // guards events: the owning thread and the writer, nobody else
  std::vector<Event> events ABSL_GUARDED_BY(mutex);
  int tid = 0;
  std::atomic<bool> thread_ended{false};  // the writer forgets the buffer once it is empty
};

// The calling thread's track: its id in this process, its name (announced to the file with its
// first event) and its buffer, registered with the recorder at its first event of a recording.
struct ThreadTrack {
  int tid = next_thread_id.fetch_add(1, std::memory_order_relaxed);
  std::string name = "thread " + std::to_string(tid);
  bool named = false;  // by set_thread_name
  std::shared_ptr<ThreadBuffer> buffer;
  uint64_t recording = 0;  // the recording (Recorder::recording_) the buffer is registered with

  ~ThreadTrack() {
    if (buffer) buffer->thread_ended.store(true, std::memory_order_release);
  }
};

ThreadTrack& this_thread_track() {
  thread_local ThreadTrack track;
  return track;
}

std::string program_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "process" : name;
}

// The process's recorder (Note [Trace files] in trace/trace.h). Each thread adds events to a
// buffer of its own, so recording threads never wait for each other; a count shared by all the
// buffers bounds them. The writer thread takes the events out every kWriteInterval and appends
// their lines to the file.
class Recorder {
 public:
  // Never destroyed: threads may still record while the process exits (stop() runs at exit).
  static Recorder& instance() {
    static Recorder* recorder = new Recorder;
    return *recorder;
  }

  void start(const std::string& directory, size_t max_buffered_events) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (file_ != nullptr) return;
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    const std::string path = directory + "/trace-" + std::to_string(::getpid()) + ".jsonl";
    // The first start in a process truncates a file left by an earlier process with the same pid.
    file_ = std::fopen(path.c_str(), ever_started_ ? "a" : "w");
    DISTGRAD_CHECK(file_ != nullptr, "trace: cannot write ", path, " (DISTGRAD_TRACE names the directory): ",
                   error ? error.message() : std::string(std::strerror(errno)));
    if (!ever_started_) std::atexit([] { Recorder::instance().stop(); });
    ever_started_ = true;
    directory_ = directory;
    capacity_.store(std::max<size_t>(max_buffered_events, 1), std::memory_order_relaxed);
    buffered_.store(0, std::memory_order_relaxed);  // what a late thread added after the last stop is gone
    stopping_ = false;
    recording_.fetch_add(1, std::memory_order_relaxed);
    if (process_name_.empty()) process_name_ = program_name();  // until set_process names it
    pending_lines_.push_back(process_line(::getpid(), rank_, process_name_));
    ThreadTrack& track = this_thread_track();
    if (!track.named) track.name = "main";  // the thread that starts recording, as a rule the program's
    detail::recording.store(true, std::memory_order_relaxed);
    writer_ = std::thread([this] { write_loop(); });
  }

  void add(Event event) {
    ThreadTrack& track = this_thread_track();
    if (track.recording != recording_.load(std::memory_order_relaxed) && !register_thread(track)) return;
    if (buffered_.fetch_add(1, std::memory_order_relaxed) >= capacity_.load(std::memory_order_relaxed)) {
      buffered_.fetch_sub(1, std::memory_order_relaxed);
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    std::lock_guard<std::mutex> lock(track.buffer->mutex);
    track.buffer->events.push_back(std::move(event));
  }

  void rename_thread(std::string_view name) {
    ThreadTrack& track = this_thread_track();
    track.name = name;
    track.named = true;
    std::lock_guard<std::mutex> lock(mutex_);
    if (track.buffer && track.recording == recording_.load(std::memory_order_relaxed) && file_ != nullptr) {
      pending_lines_.push_back(thread_line(track.tid, track.name));
    }
  }

  void add_line(std::string line) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (file_ != nullptr) pending_lines_.push_back(std::move(line));
  }

  void set_process(int rank, std::string_view name) {
    std::lock_guard<std::mutex> lock(mutex_);
    rank_ = rank;
    process_name_ = name;
    if (file_ != nullptr) pending_lines_.push_back(process_line(::getpid(), rank_, process_name_));
  }

  bool flush(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (file_ == nullptr) return true;
    const uint64_t wanted = ++flushes_requested_;
    work_added_.notify_one();
    return written_.wait_for(lock, timeout, [&] { return flushes_done_ >= wanted || file_ == nullptr; });
  }

  void stop() {
    std::thread writer;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (file_ == nullptr) return;
      detail::recording.store(false, std::memory_order_relaxed);
      stopping_ = true;
      writer.swap(writer_);
    }
    work_added_.notify_one();
    if (writer.joinable()) writer.join();
    std::lock_guard<std::mutex> lock(mutex_);
    std::fclose(file_);
    file_ = nullptr;
    directory_.clear();
    buffers_.clear();
    buffered_.store(0, std::memory_order_relaxed);
    written_.notify_all();
  }

  std::string directory() {
    std::lock_guard<std::mutex> lock(mutex_);
    return directory_;
  }

  uint64_t dropped() { return dropped_.load(std::memory_order_relaxed); }

 private:
  Recorder() = default;

  // Gives the calling thread a buffer in this recording and announces its track; false when the
  // recorder has stopped.
  bool register_thread(ThreadTrack& track) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (file_ == nullptr || stopping_) return false;
    if (track.buffer) track.buffer->thread_ended.store(true, std::memory_order_release);  // an earlier recording's
    track.buffer = std::make_shared<ThreadBuffer>();
    track.buffer->tid = track.tid;
    track.recording = recording_.load(std::memory_order_relaxed);
    buffers_.push_back(track.buffer);
    pending_lines_.push_back(thread_line(track.tid, track.name));
    return true;
  }

  // Until stop(): takes out what was added and writes it, every kWriteInterval or on flush().
  void write_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_added_.wait_for(lock, kWriteInterval, [&] { return stopping_ || flushes_requested_ > flushes_done_; });
      const uint64_t flushes = flushes_requested_;
      const bool last = stopping_;
      std::vector<std::string> lines;
      lines.swap(pending_lines_);
      // Buffers of threads that ended are written one last time, then forgotten.
      std::vector<std::shared_ptr<ThreadBuffer>> buffers = buffers_;
      std::erase_if(buffers_, [](const auto& buffer) { return buffer->thread_ended.load(std::memory_order_acquire); });
      FILE* file = file_;
      lock.unlock();
      for (const std::string& line : lines) std::fprintf(file, "%s\n", line.c_str());
      for (const std::shared_ptr<ThreadBuffer>& buffer : buffers) {
        std::vector<Event> events;
        {
          std::lock_guard<std::mutex> buffer_lock(buffer->mutex);
          events.swap(buffer->events);
        }
        buffered_.fetch_sub(events.size(), std::memory_order_relaxed);
        for (const Event& event : events) std::fprintf(file, "%s\n", event_line(event, buffer->tid).c_str());
      }
      const uint64_t dropped = dropped_.load(std::memory_order_relaxed);
      if (dropped != dropped_written_) {
        dropped_written_ = dropped;
        std::fprintf(file, "%s\n", dropped_line(dropped).c_str());
      }
      std::fflush(file);
      lock.lock();
      flushes_done_ = flushes;
      written_.notify_all();
      if (last) return;
    }
  }

  std::mutex mutex_;  // guards what is marked so; never held while a buffer's mutex is
  std::condition_variable work_added_, written_;
  FILE* file_ ABSL_GUARDED_BY(mutex_) = nullptr;  // null when not recording
  std::string directory_ ABSL_GUARDED_BY(mutex_);
  bool ever_started_ ABSL_GUARDED_BY(mutex_) = false;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  int rank_ ABSL_GUARDED_BY(mutex_) = -1;
  std::string process_name_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> pending_lines_ ABSL_GUARDED_BY(mutex_);  // process, thread and clock lines: never dropped
  std::vector<std::shared_ptr<ThreadBuffer>> buffers_ ABSL_GUARDED_BY(mutex_);  // this recording's threads'
  uint64_t flushes_requested_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t flushes_done_ ABSL_GUARDED_BY(mutex_) = 0;
  std::thread writer_ ABSL_GUARDED_BY(mutex_);
  std::atomic<uint64_t> recording_{0};  // counts start()s: a thread registers again in a new recording
  std::atomic<size_t> capacity_{1};     // events the buffers may hold together
  std::atomic<size_t> buffered_{0};     // events in the buffers now
  std::atomic<uint64_t> dropped_{0};
  uint64_t dropped_written_ = 0;  // the writer's
};

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void record(Event event) {
  if (enabled()) Recorder::instance().add(std::move(event));
}

Span::Span(const char* category, std::string_view name) : active_(enabled()) {
  if (!active_) return;
  event_.category = category;
  event_.name = name;
  event_.start_ns = now_ns();
}

Span::~Span() {
  if (!active_) return;
  event_.duration_ns = now_ns() - event_.start_ns;
  record(std::move(event_));
}

void Span::set_name(std::string_view name) {
  if (active_) event_.name = name;
}

void Span::arg(const char* key, int64_t value) {
  if (active_) event_.args.push_back({key, value});
}

void Span::flow_out(uint64_t id) {
  if (!active_ || id == 0) return;
  event_.id = id;
  event_.flow = Flow::kOut;
}

void Span::flow_in(uint64_t id) {
  if (!active_ || id == 0) return;
  event_.id = id;
  event_.flow = Flow::kIn;
}

void counter(std::string_view name, double value) {
  if (enabled()) record(Event{'C', "counter", std::string(name), now_ns(), 0, 0, {{"value", value}}});
}

uint64_t new_id() {
  // The high half tells processes apart (a random draw per process), the low half counts in twos.
  static const uint64_t process_bits = static_cast<uint64_t>(std::random_device{}() | 1u) << 32;
  static std::atomic<uint32_t> next{2};
  return process_bits | next.fetch_add(2, std::memory_order_relaxed);
}

void set_thread_name(std::string_view name) { Recorder::instance().rename_thread(name); }

void start(const std::string& directory, size_t max_buffered_events) {
  DISTGRAD_CHECK(!directory.empty(), "trace::start: expected a directory to record into, found an empty path");
  Recorder::instance().start(directory, max_buffered_events);
}

bool start_from_environment() {
  const char* directory = std::getenv("DISTGRAD_TRACE");
  if (directory == nullptr || *directory == '\0') return enabled();
  size_t max_buffered_events = 1'000'000;
  if (const char* buffer = std::getenv("DISTGRAD_TRACE_BUFFER")) {
    char* end = nullptr;
    const long long parsed = std::strtoll(buffer, &end, 10);
    DISTGRAD_CHECK(end != buffer && *end == '\0' && parsed > 0,
                   "DISTGRAD_TRACE_BUFFER: expected a positive number of events, found '", buffer, "'");
    max_buffered_events = static_cast<size_t>(parsed);
  }
  start(directory, max_buffered_events);
  return true;
}

bool flush(std::chrono::milliseconds timeout) {
  if (Recorder::instance().flush(timeout)) return true;
  std::fprintf(stderr, "trace: what was recorded was not written within %lld ms (is %s on a slow disk?)\n",
               static_cast<long long>(timeout.count()), directory().c_str());
  return false;
}

void stop() { Recorder::instance().stop(); }

std::string directory() { return Recorder::instance().directory(); }

void set_process(int rank, std::string_view name) { Recorder::instance().set_process(rank, name); }

void set_clock_offset(int64_t offset_ns, int64_t error_ns, int64_t measured_at_ns) {
  Recorder::instance().add_line(clock_line(offset_ns, error_ns, measured_at_ns));
}

uint64_t dropped_events() { return Recorder::instance().dropped(); }

}  // namespace distgrad::trace
