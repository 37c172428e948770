#include "ddp/work.h"

#include <utility>

#include "core/error.h"

namespace distgrad::ddp {

Work::Work(std::string description, Clock::time_point deadline)
    : description_(std::move(description)), deadline_(deadline) {}

void Work::wait() {
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!finished_changed_.wait_until(lock, deadline_, [this] { return finished_; })) {
      DISTGRAD_FAIL(description_, " did not finish by its deadline (the group's timeout): a rank may have died, or ",
                    "the ranks called collectives in different orders");
    }
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

bool Work::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_ && error_ != nullptr;
}

void Work::finish(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  error_ = std::move(error);
  finished_changed_.notify_all();
}

}  // namespace distgrad::ddp
