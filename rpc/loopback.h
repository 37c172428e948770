// Loopback: a worker's calls to itself without a socket (internal to rpc/; docs/rpc.md, "Fast
// paths").
//
// Note [Calls to oneself]
// A worker calls itself often: a world of one rank runs every partition of a parallelized call
// on itself, and distributed autograd sends itself the gradients of those calls. Over the Unix
// socket each such call costs two system calls each way and the wake-up of the server's reader
// thread. The Loopback instead hands the request frame to the agent's own server handler (which
// queues it on the executor, as for a request read from a socket) on the caller's thread, and the
// reply frame to the call's completion on the executor thread that served it. The frames are the
// same ones a socket carries, so interceptors, tracing, device maps and shared memory behave as
// they do on the socket. Their bytes are copied once each way into a buffer of their own: a frame's
// tensors point into the sender's tensors, and a callee must get its own arguments (and a caller
// its own results), as from a socket.
//
// Deadlines: a blocking call waits for its reply until its deadline; the deadlines of call()s are
// kept by a timer thread, started by the first call() that has one, which sleeps until the
// earliest. close() fails every call in flight with its status and returns once no caller is
// still handing a request to the server (so the agent may stop its executor after closing); a
// reply that comes after its call ended (past its deadline, closed) is dropped. RpcOptions::loopback
// (DISTGRAD_LOOPBACK) off sends calls to oneself over the Unix socket again.
//
//   Loopback loopback([&](grpc::ByteBuffer request, call_socket::Completion respond) { ... });
//   loopback.call(request, 60s, [](grpc::Status status, grpc::ByteBuffer reply) { ... });
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <memory>

#include "rpc/call_socket.h"

namespace distgrad::rpc {

class Loopback : public call_socket::Channel {
 public:
  // Serves every call through `serve` (a call_socket::Server's handler).
  explicit Loopback(call_socket::Server::Handler serve);
  ~Loopback() override;  // close(): calls in flight complete with CANCELLED
  Loopback(const Loopback&) = delete;
  Loopback& operator=(const Loopback&) = delete;

  // Channel::call; `done` runs on the thread that served the call (or the timer's, or inline when
  // closed).
  void call(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout, call_socket::Completion done) override;
  grpc::Status call_sync(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout,
                         grpc::ByteBuffer* reply) override;
  bool is_open() const override;
  void close(const grpc::Status& why) override;

 private:
  struct Calls;  // the calls in flight, shared with the replies still to come
  const call_socket::Server::Handler serve_;
  const std::shared_ptr<Calls> calls_;
};

}  // namespace distgrad::rpc
