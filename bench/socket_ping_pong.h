// The floor of a same-host round trip between two processes: a raw ping-pong of a fixed-size
// message over a Unix stream socket or over loopback TCP (TCP_NODELAY), with blocking reads and
// writes and nothing else (no framing, no threads handing work over). bench/rpc_bench's latency
// mode times it between rank 0 and worker1 beside the calls of the same size.
//
//   worker1: const std::string address = start_echo(SocketKind::kTcp, 4);   // "127.0.0.1:PORT"
//   rank 0:  std::vector<double> seconds = time_ping_pong(SocketKind::kTcp, address, 4, 100, 1000);
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace bench {

enum class SocketKind { kUnix, kTcp };

namespace detail {

// Reads or writes exactly `bytes` (false when the peer closed or the socket failed).
inline bool transfer(int fd, char* data, size_t bytes, bool reading) {
  while (bytes > 0) {
    const ssize_t done = reading ? ::read(fd, data, bytes) : ::write(fd, data, bytes);
    if (done <= 0) return false;
    data += done;
    bytes -= static_cast<size_t>(done);
  }
  return true;
}

inline void set_no_delay(int fd) {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

// A socket address of `kind`: an abstract Unix name (its path bytes after the leading 0), or
// 127.0.0.1 with `port`.
inline socklen_t address_of(SocketKind kind, const std::string& name, int port, sockaddr_storage& storage) {
  std::memset(&storage, 0, sizeof storage);
  if (kind == SocketKind::kUnix) {
    auto* unix_address = reinterpret_cast<sockaddr_un*>(&storage);
    unix_address->sun_family = AF_UNIX;
    std::memcpy(unix_address->sun_path + 1, name.data(), name.size());
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  }
  auto* inet_address = reinterpret_cast<sockaddr_in*>(&storage);
  inet_address->sin_family = AF_INET;
  inet_address->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  inet_address->sin_port = htons(static_cast<uint16_t>(port));
  return sizeof(sockaddr_in);
}

}  // namespace detail

// Listens on a fresh address of `kind` and, on a detached thread, echoes each `bytes`-byte message
// of the first connection until the peer closes it. Returns the address for time_ping_pong.
inline std::string start_echo(SocketKind kind, size_t bytes) {
  const int listener = ::socket(kind == SocketKind::kUnix ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
  DISTGRAD_CHECK(listener >= 0, "socket ping-pong: socket() failed: ", std::strerror(errno));
  const std::string name =
      "distgrad-ping-pong-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}());
  sockaddr_storage storage;
  const socklen_t length = detail::address_of(kind, name, 0, storage);
  DISTGRAD_CHECK(::bind(listener, reinterpret_cast<sockaddr*>(&storage), length) == 0 && ::listen(listener, 1) == 0,
                 "socket ping-pong: cannot listen: ", std::strerror(errno));
  std::string address = name;
  if (kind == SocketKind::kTcp) {
    socklen_t bound_length = sizeof storage;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&storage), &bound_length);
    address = std::to_string(ntohs(reinterpret_cast<sockaddr_in*>(&storage)->sin_port));
  }
  std::thread([listener, kind, bytes] {
    const int connection = ::accept(listener, nullptr, nullptr);
    ::close(listener);
    if (connection < 0) return;
    if (kind == SocketKind::kTcp) detail::set_no_delay(connection);
    std::vector<char> message(bytes);
    while (detail::transfer(connection, message.data(), bytes, true) &&
           detail::transfer(connection, message.data(), bytes, false)) {
    }
    ::close(connection);
  }).detach();
  return address;
}

// Connects to the echo at `address` (start_echo's) and times `warm_up + repetitions` round trips
// of a `bytes`-byte message; returns the last `repetitions`, in seconds.
inline std::vector<double> time_ping_pong(SocketKind kind, const std::string& address, size_t bytes, int warm_up,
                                          int repetitions) {
  const int fd = ::socket(kind == SocketKind::kUnix ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
  DISTGRAD_CHECK(fd >= 0, "socket ping-pong: socket() failed: ", std::strerror(errno));
  sockaddr_storage storage;
  const socklen_t length =
      detail::address_of(kind, address, kind == SocketKind::kTcp ? std::stoi(address) : 0, storage);
  DISTGRAD_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&storage), length) == 0,
                 "socket ping-pong: cannot connect to ", address, ": ", std::strerror(errno));
  if (kind == SocketKind::kTcp) detail::set_no_delay(fd);
  std::vector<char> message(bytes, 1);
  std::vector<double> samples;
  for (int i = 0; i < warm_up + repetitions; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const bool ok =
        detail::transfer(fd, message.data(), bytes, false) && detail::transfer(fd, message.data(), bytes, true);
    const auto end = std::chrono::steady_clock::now();
    DISTGRAD_CHECK(ok, "socket ping-pong: the echo at ", address, " closed the connection");
    if (i >= warm_up) samples.push_back(std::chrono::duration<double>(end - start).count());
  }
  ::close(fd);
  return samples;
}

}  // namespace bench
