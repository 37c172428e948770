#include "rendezvous/net_util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "absl/strings/numbers.h"
#include "core/error.h"

namespace distgrad::rendezvous {
namespace {

std::string_view strip_brackets(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return host;
}

std::string errno_message(int error) { return std::generic_category().message(error); }

// Binds `port` (0: any) on `host` and closes the socket again; returns the port bound, or 0 with
// `failure` saying why none was. `caller` names the function in the error of a host that does not
// resolve.
int bind_and_close(const std::string& host, int port, std::string& failure, const char* caller) {
  std::string name(strip_brackets(host));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  int resolved = ::getaddrinfo(name.c_str(), std::to_string(port).c_str(), &hints, &addresses);
  DISTGRAD_CHECK(resolved == 0, caller, ": cannot resolve host \"", host, "\": ", ::gai_strerror(resolved));
  failure = "no address";
  int bound_port = 0;
  for (addrinfo* address = addresses; address != nullptr && bound_port == 0; address = address->ai_next) {
    int fd = ::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol);
    if (fd < 0) {
      failure = "socket: " + errno_message(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    if (::bind(fd, address->ai_addr, address->ai_addrlen) != 0) {
      failure = "bind: " + errno_message(errno);
    } else if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      failure = "getsockname: " + errno_message(errno);
    } else {
      bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  return bound_port;
}

}  // namespace

int pick_free_port(const std::string& host) {
  std::string failure;
  const int port = bind_and_close(host, 0, failure, "pick_free_port");
  DISTGRAD_CHECK(port != 0, "pick_free_port: cannot bind a port on \"", host, "\" (", failure, ")");
  return port;
}

bool port_is_free(const std::string& host, int port) {
  std::string failure;
  return bind_and_close(host, port, failure, "port_is_free") != 0;
}

bool is_loopback_host(std::string_view host) {
  std::string name(strip_brackets(host));
  if (name == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

std::string join_host_port(std::string_view host, int port) {
  bool ipv6 = host.find(':') != std::string_view::npos && host.front() != '[';
  return detail::str_cat(ipv6 ? "[" : "", host, ipv6 ? "]" : "", ":", port);
}

std::string local_address_towards(const std::string& host, int port) {
  if (is_loopback_host(host)) return "127.0.0.1";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  DISTGRAD_CHECK(fd >= 0, "local_address_towards: cannot open a socket: ", errno_message(errno));
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(static_cast<uint16_t>(port));
  std::string address = "127.0.0.1";
  if (::inet_pton(AF_INET, host.c_str(), &target.sin_addr) == 1 &&
      ::connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof target) == 0) {
    sockaddr_in local{};
    socklen_t length = sizeof local;
    char buffer[INET_ADDRSTRLEN];
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, buffer, sizeof buffer) != nullptr) {
      address = buffer;
    }
  }
  ::close(fd);
  return address;
}

HostPort split_host_port(std::string_view address) {
  const size_t colon = address.rfind(':');
  HostPort parsed;
  DISTGRAD_CHECK(colon != std::string_view::npos &&
                     absl::SimpleAtoi(std::string(address.substr(colon + 1)), &parsed.port) && parsed.port > 0 &&
                     parsed.port <= 65535,
                 "the address ", address, " does not end in a port (host:port, port 1-65535)");
  std::string_view host = address.substr(0, colon);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  parsed.host = std::string(host);
  return parsed;
}

}  // namespace distgrad::rendezvous
