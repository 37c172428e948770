// Future<T>: the result of an asynchronous call, available later (torch.futures.Future).
//
// A Future is a shared handle to a value or an error that a Promise sets once. get() waits
// and returns the value or rethrows the error; wait_for() waits at most a given time. then(fn)
// returns a Future of fn(this future), run when this one completes, on the completing thread
// (so fn must not block). collect_all and wait_all combine several.
//
// RPC futures always complete: every call has a deadline (rpc/rpc.h), after which the future
// holds a timeout error. A thread of the RPC executor that waits on a future lets the executor
// start another thread meanwhile (Note [Blocking on the executor] in rpc/executor.h), so nested
// calls do not starve it.
//
//   Future<Tensor> f = rpc_async("worker1", my_add, a, b);
//   Future<double> norm = f.then([](const Future<Tensor>& done) { return done.get().sum().item<double>(); });
//   double value = norm.get();
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace distgrad::rpc {

namespace detail {

// Marks the current thread as blocked for its scope, so that an executor running it can
// start a replacement thread (see rpc/executor.h). A no-op on other threads.
class BlockingScope {
 public:
  BlockingScope();
  ~BlockingScope();
  BlockingScope(const BlockingScope&) = delete;
  BlockingScope& operator=(const BlockingScope&) = delete;

 private:
  bool active_;
};

}  // namespace detail

template <typename T>
class Future;
template <typename T>
class Promise;

template <typename T>
class Future {
 public:
  // std::monostate stands in for void.
  using Value = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

  Future() = default;  // invalid: valid() is false

  bool valid() const { return state_ != nullptr; }
  bool is_ready() const {
    std::lock_guard<std::mutex> lock(state().mutex);
    return state_->done;
  }

  // Waits until the future completes.
  void wait() const {
    std::unique_lock<std::mutex> lock(state().mutex);
    if (state_->done) return;
    detail::BlockingScope blocking;
    state_->done_changed.wait(lock, [this] { return state_->done; });
  }
  // Waits at most `timeout`; returns whether the future completed.
  template <typename Rep, typename Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    std::unique_lock<std::mutex> lock(state().mutex);
    if (state_->done) return true;
    detail::BlockingScope blocking;
    return state_->done_changed.wait_for(lock, timeout, [this] { return state_->done; });
  }

  // Waits, then returns the value or rethrows the error.
  T get() const {
    wait();
    if (state_->error) std::rethrow_exception(state_->error);
    if constexpr (!std::is_void_v<T>) return *state_->value;
  }
  // The error of a completed future, or null.
  std::exception_ptr error() const {
    wait();
    return state_->error;
  }

  // A future of fn(*this), run once this one completes (at once when it already has). An
  // exception thrown by fn becomes the new future's error.
  template <typename F>
  auto then(F fn) const -> Future<std::invoke_result_t<F, const Future<T>&>> {
    using U = std::invoke_result_t<F, const Future<T>&>;
    Promise<U> promise;
    Future<U> result = promise.future();
    add_callback([self = *this, fn = std::move(fn), promise]() mutable {
      try {
        if constexpr (std::is_void_v<U>) {
          fn(self);
          promise.set_value();
        } else {
          promise.set_value(fn(self));
        }
      } catch (...) {
        promise.set_error(std::current_exception());
      }
    });
    return result;
  }

  // A completed future holding `value`.
  template <typename V = Value>
  static Future ready(V value) {
    Promise<T> promise;
    if constexpr (std::is_void_v<T>) {
      promise.set_value();
    } else {
      promise.set_value(std::move(value));
    }
    return promise.future();
  }

 private:
  friend class Promise<T>;
  template <typename>
  friend class Future;

  struct State {
    mutable std::mutex mutex;
    std::condition_variable done_changed;
    bool done = false;
    std::optional<Value> value;
    std::exception_ptr error;
    std::vector<std::function<void()>> callbacks;
  };

  explicit Future(std::shared_ptr<State> state) : state_(std::move(state)) {}

  State& state() const {
    DISTGRAD_CHECK(state_ != nullptr, "Future: this future is invalid (default-constructed)");
    return *state_;
  }

  void add_callback(std::function<void()> callback) const {
    {
      std::lock_guard<std::mutex> lock(state().mutex);
      if (!state_->done) {
        state_->callbacks.push_back(std::move(callback));
        return;
      }
    }
    callback();
  }

  std::shared_ptr<State> state_;
};

// Sets a Future's outcome once; later attempts are errors.
template <typename T>
class Promise {
 public:
  Promise() : state_(std::make_shared<typename Future<T>::State>()) {}

  Future<T> future() const { return Future<T>(state_); }

  template <typename V = typename Future<T>::Value>
  void set_value(V value = {}) {
    complete([&](auto& state) { state.value.emplace(std::move(value)); });
  }
  void set_error(std::exception_ptr error) {
    complete([&](auto& state) { state.error = std::move(error); });
  }

 private:
  template <typename Set>
  void complete(Set set) {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      DISTGRAD_CHECK(!state_->done, "Promise: the future was already completed");
      set(*state_);
      state_->done = true;
      callbacks.swap(state_->callbacks);
    }
    state_->done_changed.notify_all();
    for (auto& callback : callbacks) callback();
  }

  std::shared_ptr<typename Future<T>::State> state_;
};

// A future that completes when all of `futures` have, holding them (errors stay inside them).
template <typename T>
Future<std::vector<Future<T>>> collect_all(std::vector<Future<T>> futures) {
  struct Pending {
    std::mutex mutex;
    size_t left;
    std::vector<Future<T>> futures;
    Promise<std::vector<Future<T>>> promise;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = futures.size();
  pending->futures = futures;
  Future<std::vector<Future<T>>> result = pending->promise.future();
  if (futures.empty()) {
    pending->promise.set_value({});
    return result;
  }
  for (const Future<T>& future : futures) {
    future.then([pending](const Future<T>&) {
      bool last;
      {
        std::lock_guard<std::mutex> lock(pending->mutex);
        last = --pending->left == 0;
      }
      if (last) pending->promise.set_value(pending->futures);
    });
  }
  return result;
}

// Waits for every future and returns their values in order; rethrows the first error (after
// all have completed, so none is left running unobserved).
template <typename T>
std::vector<typename Future<T>::Value> wait_all(const std::vector<Future<T>>& futures) {
  for (const Future<T>& future : futures) future.wait();
  std::vector<typename Future<T>::Value> values;
  values.reserve(futures.size());
  for (const Future<T>& future : futures) {
    if constexpr (std::is_void_v<T>) {
      future.get();
      values.emplace_back();
    } else {
      values.push_back(future.get());
    }
  }
  return values;
}

}  // namespace distgrad::rpc
