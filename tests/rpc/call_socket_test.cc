// The call socket's server against connections that never present the token, or present it
// slowly, in one process (Note [Connections before the token], rpc/call_socket.h): what they
// cost the server is bounded and given back, and a real client still gets its calls through. And
// the client's blocking calls that read their own replies (Note [Reading one's own reply]).
#include "rpc/call_socket.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/core/test_util.h"
#include "tests/rpc/frame_text.h"
#include "tests/rpc/raw_call_socket.h"

namespace distgrad::rpc::call_socket {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr char kToken[] = "the job token";

// Entries of a /proc/self directory: open descriptors ("fd") or threads ("task").
size_t count_entries(const char* directory) {
  size_t count = 0;
  if (DIR* entries = ::opendir(directory)) {
    while (const dirent* entry = ::readdir(entries)) count += entry->d_name[0] != '.';
    ::closedir(entries);
  }
  return count;
}
size_t open_descriptors() { return count_entries("/proc/self/fd") - 1; }  // less opendir's own
size_t threads() { return count_entries("/proc/self/task"); }

// Polls `condition` until it holds or `timeout` passes; returns whether it held.
template <typename F>
bool eventually(F&& condition, std::chrono::milliseconds timeout = 5s) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// A plain connection to the server's Unix socket (no token sent); -1 when none could be made.
int connect_raw(const Server& server) { return testing::connect_raw(server.name()); }

using testing::bytes_of;
using testing::hello_header;
using testing::text_of;

void send_all(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

Server echo_server(std::chrono::milliseconds handshake_timeout = 10s) {
  return Server(
      kToken, [](grpc::ByteBuffer request, Completion respond) { respond(grpc::Status::OK, std::move(request)); }, "",
      ServerLimits{.handshake_timeout = handshake_timeout});
}

// A call through a real client: the server still serves.
void expect_a_call_gets_through(const Server& server) {
  Client client("unix:" + server.name(), kToken, 5s);
  std::promise<grpc::Status> done;
  client.call(grpc::ByteBuffer(), 5s, [&](grpc::Status status, grpc::ByteBuffer) { done.set_value(status); });
  EXPECT_TRUE(done.get_future().get().ok());
}

TEST(CallSocketServer, ConnectionsThatEndGiveBackTheirDescriptorsAndThreads) {
  Server server = echo_server();
  const size_t descriptors = open_descriptors(), baseline_threads = threads();
  for (int i = 0; i < 600; ++i) {
    const int fd = connect_raw(server);
    ASSERT_GE(fd, 0);
    if (i % 3 == 1) send_all(fd, hello_header(5) + "wrong");                 // refused
    if (i % 3 == 2) send_all(fd, hello_header(sizeof kToken - 1) + kToken);  // accepted, then gone
    ::close(fd);                                                             // i % 3 == 0: nothing at all
  }
  EXPECT_TRUE(eventually([&] { return server.num_connections() == 0; })) << server.num_connections() << " left";
  EXPECT_TRUE(eventually([&] { return open_descriptors() <= descriptors; }))
      << open_descriptors() << " descriptors open, " << descriptors << " before";
  EXPECT_TRUE(eventually([&] { return threads() <= baseline_threads; }))
      << threads() << " threads, " << baseline_threads << " before";
  expect_a_call_gets_through(server);
}

TEST(CallSocketServer, ATokenSentDropByDropIsCutOffAtTheHandshakeDeadline) {
  Server server = echo_server(/*handshake_timeout=*/300ms);
  const int fd = connect_raw(server);
  ASSERT_GE(fd, 0);
  send_all(fd, hello_header(100) + "0123456789");  // 10 of the 100 bytes announced
  const Clock::time_point start = Clock::now();
  bool cut_off = false;
  while (!cut_off && Clock::now() - start < 5s) {
    std::this_thread::sleep_for(50ms);
    cut_off = ::send(fd, "x", 1, MSG_NOSIGNAL) < 0;  // a byte now and then keeps each read alive
    char byte;
    cut_off = cut_off || ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(cut_off) << "the server still held the connection after " << seconds << " s";
  EXPECT_LT(seconds, 2.0);
  ::close(fd);
  EXPECT_TRUE(eventually([&] { return server.num_connections() == 0; }));
}

TEST(CallSocketServer, ConnectionsThatSayNothingAreCappedAndTheServerStillServes) {
  Server server = echo_server();
  const size_t baseline_threads = threads();
  std::vector<int> silent;
  for (int i = 0; i < 3 * static_cast<int>(Server::kMaxHandshakes); ++i) {
    const int fd = connect_raw(server);
    if (fd >= 0) silent.push_back(fd);
  }
  std::this_thread::sleep_for(200ms);  // let the acceptor take what it will
  EXPECT_LE(server.num_connections(), Server::kMaxHandshakes);
  EXPECT_LE(threads(), baseline_threads + Server::kMaxHandshakes);
  for (int fd : silent) ::close(fd);
  EXPECT_TRUE(eventually([&] { return server.num_connections() == 0; }));
  expect_a_call_gets_through(server);
}

// Out of descriptors, the acceptor cannot take the connection waiting in its queue: it must wait,
// not retry at once forever (which kept a core busy).
TEST(CallSocketServer, WithoutDescriptorsTheAcceptorBacksOffInsteadOfSpinning) {
  Server server = echo_server();
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  rlimit low = before;
  low.rlim_cur = open_descriptors() + 16;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> clients;
  for (int i = 0; i < 32; ++i) {  // each takes two descriptors, the client's and the server's
    const int fd = connect_raw(server);
    if (fd < 0) break;
    clients.push_back(fd);
  }
  std::this_thread::sleep_for(100ms);
  const auto cpu_seconds = [] {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  };
  const double cpu_before = cpu_seconds();
  std::this_thread::sleep_for(500ms);
  const double busy = cpu_seconds() - cpu_before;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &before), 0);
  for (int fd : clients) ::close(fd);
  EXPECT_LT(busy, 0.15) << "the process used " << busy << " s of CPU in 0.5 s with the descriptors exhausted ("
                        << clients.size() << " connections)";
  EXPECT_TRUE(eventually([&] { return server.num_connections() == 0; }));
  expect_a_call_gets_through(server);
}

// A call of `bytes` bytes through `client`: its status and the reply's size.
std::pair<grpc::Status, size_t> call_with(Client& client, size_t bytes) {
  grpc::Slice slice(std::string(bytes, 'x'));
  std::promise<std::pair<grpc::Status, size_t>> done;
  client.call(grpc::ByteBuffer(&slice, 1), 5s, [&](grpc::Status status, grpc::ByteBuffer reply) {
    done.set_value({status, reply.Length()});
  });
  return done.get_future().get();
}

TEST(CallSocketServer, ARequestOverTheLimitIsRefusedAndTheConnectionServesOn) {
  Server server(
      kToken, [](grpc::ByteBuffer request, Completion respond) { respond(grpc::Status::OK, std::move(request)); }, "",
      ServerLimits{.max_request_bytes = 1000});
  Client client("unix:" + server.name(), kToken, 5s);
  const auto [refused, refused_reply] = call_with(client, 300'000);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.error_message(), "the request is 300000 bytes, more than the 1000 bytes its receiver accepts");
  // Read past, so the connection is still in step: a request at the limit is served on it.
  const auto [served, reply_bytes] = call_with(client, 1000);
  EXPECT_TRUE(served.ok()) << served.error_message();
  EXPECT_EQ(reply_bytes, 1000u);
  EXPECT_TRUE(client.is_open());
}

TEST(CallSocketClient, AReplyOverItsLimitFailsItsCallAndTheConnectionServesOn) {
  Server server = echo_server();
  Client client("unix:" + server.name(), kToken, 5s, /*max_reply_bytes=*/1000);
  const auto [refused, refused_reply] = call_with(client, 300'000);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.error_message(), "the reply is 300000 bytes, more than the 1000 bytes its receiver accepts");
  const auto [served, reply_bytes] = call_with(client, 10);
  EXPECT_TRUE(served.ok()) << served.error_message();
  EXPECT_EQ(reply_bytes, 10u);
}

// An echo server that answers "slow..." requests after 200 ms, on a thread of its own.
std::unique_ptr<Server> echo_server_with_slow_requests() {
  return std::make_unique<Server>(
      kToken,
      [](grpc::ByteBuffer request, Completion respond) {
        if (text_of(request).rfind("slow", 0) != 0) return respond(grpc::Status::OK, std::move(request));
        std::thread([request = std::move(request), respond = std::move(respond)]() mutable {
          std::this_thread::sleep_for(200ms);
          respond(grpc::Status::OK, std::move(request));
        }).detach();
      },
      "");
}

// Blocking calls from four threads at once, beside calls with a completion (some answered
// late), on one connection: every call gets its own reply, whoever reads it.
TEST(CallSocketClient, BlockingCallsReadTheirOwnRepliesBesideCallsWithACompletion) {
  std::unique_ptr<Server> server = echo_server_with_slow_requests();
  Client client("unix:" + server->name(), kToken, 5s);
  std::vector<std::promise<std::pair<grpc::Status, std::string>>> async_replies(20);
  for (size_t i = 0; i < async_replies.size(); ++i) {
    const std::string request = (i % 5 == 0 ? "slow " : "async ") + std::to_string(i);
    client.call(bytes_of(request), 5s, [&, i](grpc::Status status, grpc::ByteBuffer reply) {
      async_replies[i].set_value({status, text_of(reply)});
    });
  }
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int thread = 0; thread < 4; ++thread) {
    callers.emplace_back([&, thread] {
      for (int call = 0; call < 200; ++call) {
        const std::string request = "sync " + std::to_string(thread) + "/" + std::to_string(call);
        grpc::ByteBuffer reply;
        const grpc::Status status = client.call_sync(bytes_of(request), 5s, &reply);
        if (!status.ok() || text_of(reply) != request) ++wrong;
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(wrong.load(), 0);
  for (size_t i = 0; i < async_replies.size(); ++i) {
    const auto [status, reply] = async_replies[i].get_future().get();
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(reply, (i % 5 == 0 ? "slow " : "async ") + std::to_string(i));
  }
}

TEST(CallSocketClient, ABlockingCallFailsAtItsDeadlineAndTheConnectionServesOn) {
  std::unique_ptr<Server> server = echo_server_with_slow_requests();
  Client client("unix:" + server->name(), kToken, 5s);
  grpc::ByteBuffer reply;
  const auto start = Clock::now();
  const grpc::Status late = client.call_sync(bytes_of("slow"), 50ms, &reply);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(Clock::now() - start, 190ms);
  std::this_thread::sleep_for(250ms);  // the late reply arrives and is dropped
  EXPECT_TRUE(client.call_sync(bytes_of("on time"), 5s, &reply).ok());
  EXPECT_EQ(text_of(reply), "on time");
}

TEST(CallSocketClient, ABlockingCallEndsWhenTheConnectionClosesOrTheServerGoes) {
  std::unique_ptr<Server> server = echo_server_with_slow_requests();
  Client client("unix:" + server->name(), kToken, 5s);
  grpc::ByteBuffer reply;
  std::thread closer([&] {
    std::this_thread::sleep_for(50ms);
    client.close(grpc::Status(grpc::StatusCode::CANCELLED, "the caller stopped"));
  });
  const grpc::Status cancelled = client.call_sync(bytes_of("slow"), 5s, &reply);
  closer.join();
  EXPECT_EQ(cancelled.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(client.call_sync(bytes_of("after"), 5s, &reply).error_code(), grpc::StatusCode::CANCELLED);

  Client other("unix:" + server->name(), kToken, 5s);
  std::thread stopper([&] {
    std::this_thread::sleep_for(50ms);
    server->stop();
  });
  const grpc::Status gone = other.call_sync(bytes_of("slow"), 5s, &reply);
  stopper.join();
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::UNAVAILABLE) << gone.error_message();
  EXPECT_FALSE(other.is_open());
}

}  // namespace
}  // namespace distgrad::rpc::call_socket
