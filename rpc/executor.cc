#include "rpc/executor.h"

#include <cstdio>
#include <exception>

#include "core/error.h"
#include "rpc/future.h"
#include "trace/trace.h"

namespace distgrad::rpc {
namespace {

thread_local Executor* current_executor = nullptr;

}  // namespace

namespace detail {

BlockingScope::BlockingScope() : active_(current_executor != nullptr) {
  if (active_) current_executor->begin_blocking();
}

BlockingScope::~BlockingScope() {
  if (active_) current_executor->end_blocking();
}

}  // namespace detail

Executor::Executor(int num_threads, int max_threads) : num_threads_(num_threads), max_threads_(max_threads) {
  DISTGRAD_CHECK(num_threads > 0 && max_threads >= num_threads, "Executor: expected 0 < num_threads <= max_threads, ",
                 "found ", num_threads, " and ", max_threads);
  std::lock_guard<std::mutex> lock(mutex_);
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this, i] { run(i); });
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  task_added_.notify_all();
  // Threads may still be added while draining; join until none is left.
  for (;;) {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      threads.swap(threads_);
    }
    if (threads.empty()) break;
    for (std::thread& thread : threads) thread.join();
  }
}

void Executor::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    DISTGRAD_CHECK(!stopping_, "Executor: submit after shutdown");
    tasks_.push_back(std::move(task));
    maybe_add_thread();
  }
  task_added_.notify_one();
}

size_t Executor::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tasks_.size() + static_cast<size_t>(running_);
}

int Executor::num_threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(threads_.size());
}

void Executor::begin_blocking() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++blocked_;
  maybe_add_thread();
}

void Executor::end_blocking() {
  std::lock_guard<std::mutex> lock(mutex_);
  --blocked_;
}

void Executor::maybe_add_thread() {
  const bool starved = idle_ == 0 && !tasks_.empty() && running_ - blocked_ < num_threads_;
  if (starved && static_cast<int>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this, index = static_cast<int>(threads_.size())] { run(index); });
  }
}

void Executor::run(int index) {
  current_executor = this;
  trace::set_thread_name("rpc executor " + std::to_string(index));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    task_added_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) break;  // stopping, and nothing left to run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    ++running_;
    lock.unlock();
    try {
      task();
    } catch (const std::exception& error) {  // tasks report their own errors; this is a last resort
      std::fprintf(stderr, "distgrad rpc executor: a task threw: %s\n", error.what());
    } catch (...) {
      std::fprintf(stderr, "distgrad rpc executor: a task threw something that is not a std::exception\n");
    }
    task = nullptr;
    lock.lock();
    --running_;
  }
}

}  // namespace distgrad::rpc
