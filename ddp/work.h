// Work: the handle of one asynchronous collective (torch.distributed's Work, what
// `async_op=True` returns). The backend finishes it, with an error or without; wait() blocks
// until then and rethrows the error.
//
//   std::shared_ptr<ddp::Work> work = pg->all_reduce_async(grads);
//   ...                                   // overlap other work with the all-reduce
//   work->wait();                         // throws if the all-reduce failed
//
// Every wait is bounded: a backend finishes its work within the group's timeout (an operation
// that takes longer fails with a timeout error), and wait() itself gives up at the deadline the
// backend set when it made the Work, with an error naming the collective.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"

namespace distgrad::ddp {

class Work {
 public:
  using Clock = std::chrono::steady_clock;

  // `description` names the collective in errors: "all_reduce(sum) of float32[1000] in group
  // 'world' (rank 1 of 2, gloo)". wait() gives up at `deadline`.
  Work(std::string description, Clock::time_point deadline);
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the collective finished (or the deadline passed) and rethrows its error.
  void wait();
  bool is_completed() const;
  // True once finished with an error.
  bool failed() const;
  const std::string& description() const { return description_; }

  // Called by the backend, once: the collective finished, successfully when `error` is null.
  void finish(std::exception_ptr error = nullptr);

 private:
  const std::string description_;
  const Clock::time_point deadline_;
  mutable std::mutex mutex_;  // guards finished_ and error_
  std::condition_variable finished_changed_;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
  std::exception_ptr error_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace distgrad::ddp
