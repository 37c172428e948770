// A worker's calls to itself without a socket (Note [Calls to oneself], rpc/loopback.h), against a
// server handler on a thread of its own: replies, deadlines of both kinds of call, close(), and
// frames whose bytes are the callee's own.
#include "rpc/loopback.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/rpc/frame_text.h"

namespace distgrad::rpc {
namespace {

using namespace std::chrono_literals;

using testing::bytes_of;
using testing::text_of;

// A server that answers each request on its own thread with "reply to <request>", after `delay`;
// requests reading "silent" are never answered. Records the first byte's address of each request.
class ThreadServer {
 public:
  explicit ThreadServer(std::chrono::milliseconds delay = 0ms) : delay_(delay), thread_([this] { run(); }) {}
  ~ThreadServer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  call_socket::Server::Handler handler() {
    return [this](grpc::ByteBuffer request, call_socket::Completion respond) {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_.emplace_back(std::move(request), std::move(respond));
      changed_.notify_all();
    };
  }
  std::vector<const void*> request_addresses() {
    std::lock_guard<std::mutex> lock(mutex_);
    return addresses_;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      changed_.wait(lock, [this] { return stopping_ || !requests_.empty(); });
      if (stopping_) return;
      auto [request, respond] = std::move(requests_.front());
      requests_.pop_front();
      std::vector<grpc::Slice> slices;
      EXPECT_TRUE(request.Dump(&slices).ok());
      addresses_.push_back(slices.front().begin());
      lock.unlock();
      std::this_thread::sleep_for(delay_);
      const std::string text = text_of(request);
      if (text != "silent") respond(grpc::Status::OK, bytes_of("reply to " + text));
      lock.lock();
    }
  }

  const std::chrono::milliseconds delay_;
  std::mutex mutex_;  // guards the fields below
  std::condition_variable changed_;
  std::deque<std::pair<grpc::ByteBuffer, call_socket::Completion>> requests_;
  std::vector<const void*> addresses_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

TEST(Loopback, CallsGetTheirRepliesWithBytesOfTheirOwn) {
  ThreadServer server;
  Loopback loopback(server.handler());
  const grpc::ByteBuffer request = bytes_of(std::string(100, 'x'));
  std::vector<grpc::Slice> sent;
  ASSERT_TRUE(request.Dump(&sent).ok());
  grpc::ByteBuffer reply;
  ASSERT_TRUE(loopback.call_sync(request, 5s, &reply).ok());
  EXPECT_EQ(text_of(reply), "reply to " + std::string(100, 'x'));

  std::promise<std::string> replied;
  loopback.call(bytes_of("async"), 5s, [&](grpc::Status status, grpc::ByteBuffer reply) {
    replied.set_value(status.ok() ? text_of(reply) : status.error_message());
  });
  EXPECT_EQ(replied.get_future().get(), "reply to async");
  ASSERT_EQ(server.request_addresses().size(), 2u);
  EXPECT_NE(server.request_addresses()[0], static_cast<const void*>(sent.front().begin()))
      << "the server was handed the caller's own bytes";
}

TEST(Loopback, DeadlinesEndCallsWhoseRepliesDoNotCome) {
  ThreadServer server;
  Loopback loopback(server.handler());
  grpc::ByteBuffer reply;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(loopback.call_sync(bytes_of("silent"), 100ms, &reply).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  std::promise<grpc::StatusCode> ended;
  loopback.call(bytes_of("silent"), 100ms,
                [&](grpc::Status status, grpc::ByteBuffer) { ended.set_value(status.error_code()); });
  EXPECT_EQ(ended.get_future().get(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  // A late reply to a call that ended is dropped; the loopback still serves.
  ThreadServer slow(300ms);
  Loopback late(slow.handler());
  EXPECT_EQ(late.call_sync(bytes_of("late"), 50ms, &reply).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  ASSERT_TRUE(late.call_sync(bytes_of("in time"), 5s, &reply).ok());
  EXPECT_EQ(text_of(reply), "reply to in time");
}

TEST(Loopback, CloseFailsTheCallsInFlightAndLaterOnesAtOnce) {
  ThreadServer server;
  Loopback loopback(server.handler());
  std::promise<grpc::Status> in_flight;
  loopback.call(bytes_of("silent"), 0ms, [&](grpc::Status status, grpc::ByteBuffer) { in_flight.set_value(status); });
  std::thread closer([&] {
    std::this_thread::sleep_for(50ms);
    loopback.close(grpc::Status(grpc::StatusCode::CANCELLED, "RPC is shutting down"));
  });
  grpc::ByteBuffer reply;
  const grpc::Status blocked = loopback.call_sync(bytes_of("silent"), 0ms, &reply);
  closer.join();
  EXPECT_EQ(blocked.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(in_flight.get_future().get().error_message(), "RPC is shutting down");
  EXPECT_FALSE(loopback.is_open());
  std::promise<grpc::StatusCode> later;
  loopback.call(bytes_of("after"), 5s,
                [&](grpc::Status status, grpc::ByteBuffer) { later.set_value(status.error_code()); });
  EXPECT_EQ(later.get_future().get(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(loopback.call_sync(bytes_of("after"), 5s, &reply).error_code(), grpc::StatusCode::CANCELLED);
}

TEST(Loopback, AServerThatCannotTakeACallFailsItAndCloseWaitsForTheHandOver) {
  Loopback refusing(
      [](grpc::ByteBuffer, call_socket::Completion) { throw std::runtime_error("submit after shutdown"); });
  grpc::ByteBuffer reply;
  const grpc::Status refused = refusing.call_sync(bytes_of("x"), 5s, &reply);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("submit after shutdown"));
  std::promise<grpc::StatusCode> failed;
  refusing.call(bytes_of("x"), 5s,
                [&](grpc::Status status, grpc::ByteBuffer) { failed.set_value(status.error_code()); });
  EXPECT_EQ(failed.get_future().get(), grpc::StatusCode::UNAVAILABLE);

  // close() returns only once the caller handing a request over is done with the server.
  std::atomic<bool> handing_over{false}, handed_over{false};
  Loopback slow_hand_over([&](grpc::ByteBuffer, call_socket::Completion) {
    handing_over = true;
    std::this_thread::sleep_for(200ms);
    handed_over = true;
  });
  std::thread caller([&] { slow_hand_over.call(bytes_of("x"), 0ms, [](grpc::Status, grpc::ByteBuffer) {}); });
  while (!handing_over) std::this_thread::sleep_for(1ms);
  slow_hand_over.close(grpc::Status(grpc::StatusCode::CANCELLED, "RPC is shutting down"));
  EXPECT_TRUE(handed_over) << "close() returned while a caller was still in the server";
  caller.join();
}

}  // namespace
}  // namespace distgrad::rpc
