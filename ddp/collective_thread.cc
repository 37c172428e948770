#include "ddp/collective_thread.h"

#include <utility>

#include "trace/trace.h"

namespace distgrad::ddp {

CollectiveThread::CollectiveThread(std::function<std::string(const std::string&)> explain)
    : explain_(std::move(explain)), thread_([this] { run(); }) {}

CollectiveThread::~CollectiveThread() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
    queue_changed_.notify_all();
  }
  thread_.join();
}

void CollectiveThread::submit(std::shared_ptr<Work> work, bool caller_waits, std::function<void()> collective) {
  Task task{std::move(work), std::move(collective)};
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (stopping_) {  // the thread may be gone: nothing would run it
      task.work->finish(std::make_exception_ptr(
          Error(task.work->description() + " did not run: the process group is being destroyed")));
      return;
    }
    if (!caller_waits || running_ || !queue_.empty()) {
      queue_.push_back(std::move(task));
      queue_changed_.notify_all();
      return;
    }
    running_ = true;
  }
  execute(task);
  std::lock_guard<std::mutex> lock(queue_mutex_);
  running_ = false;
  queue_changed_.notify_all();  // for what was queued meanwhile
}

void CollectiveThread::execute(Task& task) {
  if (!first_failure_.empty()) {
    task.work->finish(std::make_exception_ptr(Error(
        task.work->description() + " did not run: the group is unusable after an earlier failure: " + first_failure_)));
    return;
  }
  try {
    trace::Span span("ddp.collective", task.work->description());
    task.collective();
    task.work->finish();
  } catch (const CallMismatch& error) {
    task.work->finish(std::make_exception_ptr(Error(task.work->description() + " failed: " + error.what())));
  } catch (const std::exception& error) {
    first_failure_ = task.work->description() + " failed: " + explain_(error.what());
    task.work->finish(std::make_exception_ptr(Error(first_failure_)));
  } catch (...) {
    first_failure_ = task.work->description() + " failed: an exception that is not a std::exception";
    task.work->finish(std::make_exception_ptr(Error(first_failure_)));
  }
}

void CollectiveThread::run() {
  trace::set_thread_name("ddp collectives");
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_changed_.wait(lock, [this] { return stopping_ || (!queue_.empty() && !running_); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      if (stopping_) {
        task.work->finish(std::make_exception_ptr(
            Error(task.work->description() + " did not run: the process group was destroyed first")));
        continue;
      }
      running_ = true;
    }
    execute(task);
    std::lock_guard<std::mutex> lock(queue_mutex_);
    running_ = false;
  }
}

}  // namespace distgrad::ddp
