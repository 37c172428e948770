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
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "rpc/call_socket.h"

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

// The token message: call_socket.cc's header (id, kind 1, status, byte count), then the token.
std::string token_message() {
  struct {
    uint64_t id = 0;
    uint32_t kind = 1;
    uint32_t status = 0;
    uint64_t bytes = sizeof kToken - 1;
  } header;
  return std::string(reinterpret_cast<const char*>(&header), sizeof header) + kToken;
}

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "handshake_fuzzer: %s\n", what);
  __builtin_trap();
}

int connect_to(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) bug("cannot connect");
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& echo = server();
  const int fd = connect_to(echo.name());
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
