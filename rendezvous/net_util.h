// Small network helpers shared by the rendezvous Store, the worker servers and the launchers:
// free ports, loopback checks, the local address towards a peer and "host:port" strings.
//
//   int port = rendezvous::pick_free_port();                         // e.g. 41233
//   std::string address = rendezvous::join_host_port("::1", port);   // "[::1]:41233"
#pragma once

#include <string>
#include <string_view>

namespace distgrad::rendezvous {

// A TCP port that was free on `host` a moment ago: binds port 0, reads the port the kernel
// chose, and closes the socket. Another process may take it before the caller binds it, so
// prefer binding port 0 directly where the API allows (StoreServer does). Throws
// distgrad::Error naming the host when it does not resolve or nothing can be bound.
int pick_free_port(const std::string& host = "127.0.0.1");

// Whether `port` on `host` could be bound a moment ago (nothing listens there). Throws
// distgrad::Error naming the host when it does not resolve.
bool port_is_free(const std::string& host, int port);

// True for "localhost", 127.0.0.0/8, ::1 and ::ffff:127.x.x.x (with or without brackets).
// Other host names are not resolved and count as not loopback.
bool is_loopback_host(std::string_view host);

// The local address this machine uses to reach `host`:`port` (the interface peers there can
// reach us on): "127.0.0.1" for a loopback host, and also when `host` is not an IPv4 address or
// no route leads there. Sends nothing (a UDP socket is connected, then asked for its address).
std::string local_address_towards(const std::string& host, int port);

// "host:port", with an IPv6 address in brackets: ("::1", 80) -> "[::1]:80".
std::string join_host_port(std::string_view host, int port);

// The host and the port of "host:port" ("[::1]:80" -> {"::1", 80}). Throws distgrad::Error naming
// the address when it does not end in a port (1-65535).
struct HostPort {
  std::string host;
  int port = 0;
};
HostPort split_host_port(std::string_view address);

}  // namespace distgrad::rendezvous
