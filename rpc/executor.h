// Executor: the thread pool that runs registered functions on a worker.
//
// gRPC's callback threads only hand requests over; user functions run here, so a slow or
// blocking function (a nested rpc_sync, a long computation) never stalls the transport.
//
// Note [Blocking on the executor]
// The pool keeps `num_threads` threads busy. A function that waits on a Future (a nested call)
// marks its thread as blocked (detail::BlockingScope, rpc/future.h); while tasks are queued and
// every unblocked thread is busy, the executor starts an extra thread, up to `max_threads`.
// Chains of nested calls (A calls B calls A ...) therefore progress instead of deadlocking
// once every thread waits on a reply that needs a thread of its own.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace distgrad::rpc {

class Executor {
 public:
  Executor(int num_threads, int max_threads);
  ~Executor();  // runs the queued tasks, then joins every thread
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void submit(std::function<void()> task);
  // Tasks queued or running.
  size_t pending() const;
  int num_threads() const;

  // Called through detail::BlockingScope by a thread of this executor that is about to block.
  void begin_blocking();
  void end_blocking();

 private:
  void run(int index);      // `index`: the thread's, for its name in a trace
  void maybe_add_thread();  // requires mutex_

  const int num_threads_;
  const int max_threads_;
  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable task_added_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  int idle_ = 0;     // threads waiting for a task
  int running_ = 0;  // threads running a task
  int blocked_ = 0;  // running threads blocked on a future
  bool stopping_ = false;
};

}  // namespace distgrad::rpc
