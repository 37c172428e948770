// A call socket's wire without call_socket::Client, for the tests and the fuzzer that send a
// worker's socket what a real client never would: a bare connection, and the header of a token
// message as rpc/call_socket.cc lays it out (its MessageHeader: id, kind 1 = hello, status, byte
// count).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace distgrad::rpc::testing {

// Connects to the abstract Unix-domain socket `name`; -1 when it cannot.
inline int connect_raw(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The header of a token message announcing `bytes` bytes of token.
inline std::string hello_header(uint64_t bytes) {
  struct {
    uint64_t id = 0;
    uint32_t kind = 1;
    uint32_t status = 0;
    uint64_t bytes = 0;
  } header;
  header.bytes = bytes;
  return std::string(reinterpret_cast<const char*>(&header), sizeof header);
}

}  // namespace distgrad::rpc::testing
