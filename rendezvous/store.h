// The rendezvous Store: a key-value store served over gRPC (PyTorch's TCPStore), hosted by
// rank 0 or by the launcher at MASTER_ADDR:MASTER_PORT, through which workers publish their
// addresses, wait for each other, count arrivals and exchange small blobs (NCCL unique ids).
//
//   rendezvous::StoreServer server("127.0.0.1", 0, token);                 // port 0: a free port
//   rendezvous::StoreClient store(server.address(), token);
//   store.set("worker3/address", "10.0.0.7:41233");
//   std::string peer = store.get("worker5/address");                 // waits until it is set
//   store.wait({"rank/0", "rank/1"}, std::chrono::seconds(30));     // throws naming the missing
//   int64_t arrived = store.add("barrier/0", 1);
//
// Timeouts: every client operation is bounded by the client's timeout (60 s by default) unless
// the call gives its own; a timeout of 0 means no limit (as everywhere in distgrad). The server
// never waits longer than a request asks, and a server that shuts down wakes every waiter.
//
// Note [Store token]
// Every request carries the job token as gRPC metadata under "distgrad-token"; a server with a
// non-empty token compares it in constant time and answers UNAUTHENTICATED when it is missing or
// wrong, before it reads the request's message (Note [Store token before the message] in
// store.cc). The token is never a key or a value. A server without a token only binds loopback
// addresses unless DISTGRAD_INSECURE=1 is set (docs/rpc.md, "Store").
//
// Errors are distgrad::Error: "the store at HOST:PORT refused the job token (check
// DISTGRAD_TOKEN)", "the store at HOST:PORT is unreachable (...)", "timed out after 500 ms at
// the store at HOST:PORT waiting for keys "a", "b"", and the server's own refusals (a counter
// that is not an integer, ...). Public headers do not include gRPC: both classes hide it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/net_util.h"  // pick_free_port, for those who start a StoreServer

namespace distgrad::rendezvous {

// Hosts the Store service. Thread-safe; stops serving when destroyed or shut down.
class StoreServer {
 public:
  // Binds host:port (port 0 picks a free port) and starts serving. Requests must carry `token`
  // unless it is empty; an empty token is refused for a non-loopback host unless the
  // environment has DISTGRAD_INSECURE=1. Requests of any size are accepted unless the
  // environment's DISTGRAD_MAX_MESSAGE_BYTES sets a limit (larger ones fail RESOURCE_EXHAUSTED). Throws distgrad::Error
  // naming the address when it cannot bind (a port in use included).
  StoreServer(const std::string& host, int port, std::string token);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // "host:port" (IPv6 hosts in brackets), ready for StoreClient.
  std::string address() const;
  // Gets and Waits waiting for keys now.
  size_t num_waiting() const;
  // Wakes every waiting request (they fail with UNAVAILABLE) and stops serving. Idempotent.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A connection to a Store. Thread-safe: one client may serve many threads.
class StoreClient {
 public:
  // `timeout` bounds every operation, waits included, unless the call gives its own (0 = no
  // limit). Connecting is lazy: an unreachable store is reported by the first operation, or
  // waited for with wait_until_reachable().
  StoreClient(std::string address, std::string token, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~StoreClient();
  StoreClient(StoreClient&&) noexcept;
  StoreClient& operator=(StoreClient&&) noexcept;

  const std::string& address() const;
  std::chrono::milliseconds timeout() const;

  void set(const std::string& key, const std::string& value);
  // The value of `key`, waiting until it is set; throws naming the key on timeout.
  std::string get(const std::string& key);
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // Returns once every key is set; throws naming the keys still missing on timeout.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // The keys still missing after `timeout` (empty when all were set in time).
  std::vector<std::string> wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Atomically adds `amount` to the integer at `key` (0 when absent) and returns the new value;
  // throws when the value there is not a decimal integer or the sum overflows.
  int64_t add(const std::string& key, int64_t amount);
  // Atomically sets `key` to `desired` if its value is `expected`, or if it is absent and
  // `expected` is empty. Returns the value after the call (empty when the key is still absent),
  // so the swap happened exactly when the result equals `desired`.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  // Removes `key`; false when it was absent.
  bool delete_key(const std::string& key);
  int64_t num_keys();
  // Blocks until the server answers (retrying while it is not up yet), at most `timeout`
  // (0 = no limit); throws "unreachable" after that, or at once when the token is refused.
  void wait_until_reachable(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace distgrad::rendezvous
