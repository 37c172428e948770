#include "rpc/loopback.h"

#include <absl/base/thread_annotations.h>

#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace distgrad::rpc {
namespace {

using Clock = std::chrono::steady_clock;

// The bytes of `frame` in one buffer of their own (Note [Calls to oneself]).
grpc::ByteBuffer copy_of(const grpc::ByteBuffer& frame) {
  std::vector<grpc::Slice> slices;
  if (!frame.Dump(&slices).ok()) return {};
  grpc::Slice copy(frame.Length());
  auto* out = const_cast<uint8_t*>(copy.begin());
  for (const grpc::Slice& slice : slices) {
    std::memcpy(out, slice.begin(), slice.size());
    out += slice.size();
  }
  return grpc::ByteBuffer(&copy, 1);
}

grpc::Status deadline_exceeded() { return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"); }

}  // namespace

struct Loopback::Calls {
  // Where the reply of a blocking call goes.
  struct Slot {
    bool done = false;
    grpc::Status status;
    grpc::ByteBuffer reply;
  };
  struct Pending {
    call_socket::Completion done;                    // a call(); null for a blocking call
    Slot* slot = nullptr;                            // a blocking call's
    std::optional<Clock::time_point> deadline = {};  // a call()'s, kept by the timer
  };

  // Registers a call (taking `call` over); nullopt when closed (then `closed` says why and `call`
  // is left as it was).
  std::optional<uint64_t> add(Pending& call, grpc::Status* closed) {
    std::lock_guard<std::mutex> lock(calls_mutex);
    if (!open) {
      *closed = closed_because;
      return std::nullopt;
    }
    const uint64_t id = next_id++;
    const std::optional<Clock::time_point> deadline = call.deadline;
    pending.emplace(id, std::move(call));
    ++serving;  // the caller goes on to serve it: serve() ends that
    if (deadline) {
      deadlines.emplace(*deadline, id);
      if (!timer.joinable()) timer = std::thread([this] { keep_deadlines(); });
      changed.notify_all();
    }
    return id;
  }

  // Completes call `id` with `status` if it is still in flight.
  void complete(uint64_t id, const grpc::Status& status, grpc::ByteBuffer reply) {
    call_socket::Completion done;
    {
      std::lock_guard<std::mutex> lock(calls_mutex);
      const auto found = pending.find(id);
      if (found == pending.end()) return;  // ended already: past its deadline, or closed
      if (found->second.deadline) deadlines.erase({*found->second.deadline, id});
      if (Slot* slot = found->second.slot) {
        slot->done = true;
        slot->status = status;
        slot->reply = std::move(reply);
        pending.erase(found);
        changed.notify_all();
        return;
      }
      done = std::move(found->second.done);
      pending.erase(found);
    }
    done(status, std::move(reply));
  }

  // Hands request `id` to `serve`; a server that cannot take it (its executor stopped) fails
  // the call instead of its caller.
  void serve(const call_socket::Server::Handler& serve, const std::shared_ptr<Calls>& self, uint64_t id,
             const grpc::ByteBuffer& request) {
    try {
      serve(copy_of(request), [calls = self, id](grpc::Status status, grpc::ByteBuffer reply) {
        calls->complete(id, status, status.ok() ? copy_of(reply) : grpc::ByteBuffer());
      });
    } catch (const std::exception& error) {
      complete(id,
               grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string("this worker cannot serve it: ") + error.what()),
               {});
    }
    std::lock_guard<std::mutex> lock(calls_mutex);
    if (--serving == 0) changed.notify_all();
  }

  // A blocking call `id` whose deadline passed: out of pending_ unless its reply came first.
  bool give_up(uint64_t id) {
    std::lock_guard<std::mutex> lock(calls_mutex);
    return pending.erase(id) > 0;
  }

  // Fails every call in flight, then waits until no caller is still handing one to the server
  // (after close() returns, the server is never called again).
  void close(const grpc::Status& why) {
    std::vector<call_socket::Completion> to_fail;
    {
      std::unique_lock<std::mutex> lock(calls_mutex);
      if (!open) {
        changed.wait(lock, [this] { return serving == 0; });
        return;
      }
      open = false;
      closed_because = why;
      for (auto& [id, call] : pending) {
        if (call.slot != nullptr) {
          call.slot->done = true;
          call.slot->status = why;
        } else {
          to_fail.push_back(std::move(call.done));
        }
      }
      pending.clear();
      deadlines.clear();
      changed.notify_all();
    }
    for (call_socket::Completion& done : to_fail) done(why, {});
    std::unique_lock<std::mutex> lock(calls_mutex);
    changed.wait(lock, [this] { return serving == 0; });
  }

  // The timer thread: fails the call()s whose deadline passed, sleeping until the earliest.
  void keep_deadlines() {
    std::unique_lock<std::mutex> lock(calls_mutex);
    while (open) {
      if (deadlines.empty()) {
        changed.wait(lock);
        continue;
      }
      const auto [deadline, id] = *deadlines.begin();
      if (Clock::now() < deadline) {
        changed.wait_until(lock, deadline);
        continue;
      }
      deadlines.erase(deadlines.begin());
      lock.unlock();
      complete(id, deadline_exceeded(), {});
      lock.lock();
    }
  }

  std::mutex calls_mutex;  // guards everything below
  std::map<uint64_t, Pending> pending ABSL_GUARDED_BY(calls_mutex);
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines ABSL_GUARDED_BY(calls_mutex);  // of call()s
  uint64_t next_id ABSL_GUARDED_BY(calls_mutex) = 1;
  int serving ABSL_GUARDED_BY(calls_mutex) = 0;  // callers between add() and the end of serve()
  bool open ABSL_GUARDED_BY(calls_mutex) = true;
  grpc::Status closed_because ABSL_GUARDED_BY(calls_mutex);
  // Notified when a blocking call's slot fills, a deadline is added, it closes, or the last
  // caller handing a request to the server is done.
  std::condition_variable changed;
  std::thread timer ABSL_GUARDED_BY(calls_mutex);  // started by the first call() with a deadline
};

Loopback::Loopback(call_socket::Server::Handler serve) : serve_(std::move(serve)), calls_(std::make_shared<Calls>()) {}

Loopback::~Loopback() {
  close(grpc::Status(grpc::StatusCode::CANCELLED, "the caller stopped"));
  std::thread timer;
  {
    std::lock_guard<std::mutex> lock(calls_->calls_mutex);
    timer.swap(calls_->timer);
  }
  if (timer.joinable()) timer.join();
}

void Loopback::call(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout, call_socket::Completion done) {
  grpc::Status closed;
  Calls::Pending call{.done = std::move(done)};
  if (timeout.count() > 0) call.deadline = Clock::now() + timeout;
  const std::optional<uint64_t> id = calls_->add(call, &closed);
  if (!id) return call.done(closed, {});
  calls_->serve(serve_, calls_, *id, request);
}

grpc::Status Loopback::call_sync(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout,
                                 grpc::ByteBuffer* reply) {
  Calls::Slot slot;
  Calls::Pending call{.slot = &slot};
  grpc::Status closed;
  const std::optional<uint64_t> id = calls_->add(call, &closed);
  if (!id) return closed;
  calls_->serve(serve_, calls_, *id, request);
  std::unique_lock<std::mutex> lock(calls_->calls_mutex);
  const auto arrived = [&slot] { return slot.done; };
  if (timeout.count() > 0) {
    if (!calls_->changed.wait_for(lock, timeout, arrived)) {
      lock.unlock();
      if (calls_->give_up(*id)) return deadline_exceeded();
      lock.lock();  // the reply came in between: it is in the slot
    }
  } else {
    calls_->changed.wait(lock, arrived);
  }
  *reply = std::move(slot.reply);
  return slot.status;
}

bool Loopback::is_open() const {
  std::lock_guard<std::mutex> lock(calls_->calls_mutex);
  return calls_->open;
}

void Loopback::close(const grpc::Status& why) { calls_->close(why); }

}  // namespace distgrad::rpc
