// libFuzzer target: a call socket's server (rpc/call_socket.h) reading what a connection sends,
// the token message first (Note [Connections before the token]), then request messages.
//
// Each input goes down a fresh connection to one server that echoes requests; when its first
// byte is odd, a valid token message goes first, so that the fuzzer also reaches the request
// messages behind the handshake. The connection is then closed for writing. The server must
// close it at once (a hang past 5 s is a bug), and must have let go of it, its descriptor and its
// thread, within 5 s; a crash or a sanitizer report is a bug.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "rpc/call_socket.h"
#include "tests/rpc/raw_call_socket.h"

namespace {

using namespace std::chrono_literals;
using distgrad::rpc::call_socket::Completion;
using distgrad::rpc::call_socket::Server;
using distgrad::rpc::call_socket::ServerLimits;

constexpr char kToken[] = "fuzzing-token";

Server& server() {
  static Server* server = new Server(
      kToken, [](grpc::ByteBuffer request, Completion respond) { respond(grpc::Status::OK, std::move(request)); }, "",
      ServerLimits{.handshake_timeout = 1s, .max_request_bytes = 1 << 20});
  return *server;
}

// The token message (tests/rpc/raw_call_socket.h).
std::string token_message() { return distgrad::rpc::testing::hello_header(sizeof kToken - 1) + kToken; }

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "handshake_fuzzer: %s\n", what);
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& echo = server();
  const int fd = distgrad::rpc::testing::connect_raw(echo.name());
  if (fd < 0) bug("cannot connect");
  std::string sent = size > 0 && (data[0] & 1) ? token_message() : "";
  if (size > 0) sent.append(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The server may close before it has read everything (a refused token): a failed send is fine.
  for (size_t offset = 0; offset < sent.size();) {
    const ssize_t wrote = ::send(fd, sent.data() + offset, sent.size() - offset, MSG_NOSIGNAL);
    if (wrote <= 0) break;
    offset += static_cast<size_t>(wrote);
  }
  ::shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  char discard[4096];
  while (true) {
    pollfd readable{fd, POLLIN, 0};
    if (::poll(&readable, 1, 100) > 0 && ::recv(fd, discard, sizeof discard, 0) <= 0) break;
    if (std::chrono::steady_clock::now() > deadline) bug("the server kept a connection open past 5 s after its end");
  }
  ::close(fd);
  while (echo.num_connections() > 0) {
    if (std::chrono::steady_clock::now() > deadline + 5s) bug("the server held a finished connection for 5 s");
    std::this_thread::sleep_for(1ms);
  }
  return 0;
}
