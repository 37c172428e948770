// CollectiveThread: runs one group's CPU collectives in the order they were called, on a thread
// of its own or on the caller's (internal to ddp/).
//
// Note [One thread per group]
// A CPU backend's collectives block the thread that runs them, and the ranks stay in step only
// if every rank runs them in the same order. Each group therefore has one thread that runs its
// collectives in call order (as PyTorch's ProcessGroupGloo does with one thread), and the _async
// calls only queue them: DDP's bucket all-reduces run while backward goes on. A blocking call
// that finds nothing queued or running runs on the caller's thread instead, which saves two
// thread wake-ups (tens of microseconds each on a busy machine) per small collective. Every collective
// is bounded by the group's timeout, so the thread never blocks longer than that. A collective
// that throws CallMismatch (the ranks agreed it cannot run) fails its Work alone; any other
// error leaves the backend in an unknown state, and every later collective fails at once with
// the first failure's message.
//
//   CollectiveThread thread(explain);
//   thread.submit(work, /*caller_waits=*/false, [=] { run_the_all_reduce(tensor); });  // finishes `work`
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "core/error.h"
#include "ddp/work.h"

namespace distgrad::ddp {

// Thrown by a collective when the ranks agreed, before sending anything, that it cannot run (they
// passed different sizes, dtypes, ops or roots): its Work fails and the group stays usable.
struct CallMismatch : Error {
  using Error::Error;
};

class CollectiveThread {
 public:
  // `explain` turns a collective's error message into what the user reads after "failed: ".
  explicit CollectiveThread(std::function<std::string(const std::string&)> explain);
  // Fails the collectives still queued ("the process group was destroyed first") and joins.
  ~CollectiveThread();
  CollectiveThread(const CollectiveThread&) = delete;
  CollectiveThread& operator=(const CollectiveThread&) = delete;

  // Runs `collective` after those submitted before it; `work` finishes when it returned or threw.
  // When `caller_waits` (the caller blocks on `work` next) and nothing is queued or running, it
  // runs here, on the caller's thread; else it is queued for the group's thread.
  void submit(std::shared_ptr<Work> work, bool caller_waits, std::function<void()> collective);

 private:
  struct Task {
    std::shared_ptr<Work> work;
    std::function<void()> collective;
  };

  // Runs one task and finishes its Work; called by the holder of the running token (running_).
  void execute(Task& task);
  void run();

  const std::function<std::string(const std::string&)> explain_;
  std::string first_failure_;  // only the holder of the running token reads and writes it
  std::mutex queue_mutex_;     // guards queue_, running_ and stopping_
  std::condition_variable queue_changed_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(queue_mutex_);
  bool running_ ABSL_GUARDED_BY(queue_mutex_) = false;  // the token: a collective is running
  bool stopping_ ABSL_GUARDED_BY(queue_mutex_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace distgrad::ddp
