// Calls over a socket of our own instead of gRPC (internal to rpc/; docs/rpc.md, "Socket calls"):
// a Unix-domain socket to a worker on this host, TCP to one on another.
//
// Note [Socket calls]
// A gRPC unary call costs 100-150 us on this machine, mostly thread hand-offs inside gRPC. A caller
// instead sends the same frames (rpc/frame.h) over one connection per peer, each in a message with
// a call id, and replies come back on it in any order. The callee reads requests on one thread per
// connection and runs them on its executor, whose thread writes the reply; the caller's reader
// thread completes the call. That is two wake-ups each way. A blocking call (call_sync) instead
// reads the socket itself while nobody else does (Note [Reading one's own reply]): one wake-up on
// the caller's side.
//
// Note [Reading one's own reply]
// Whoever reads the connection holds its read role (reading_): the reader thread while calls with
// a completion (call()) are in flight, a couple of milliseconds after (so that a stream of them
// does not wake it for each) unless a blocking caller waits, or when the connection closes; else
// a blocking caller. A
// blocking caller sends its request, then takes the role if it is free, or waits until its reply
// arrives or the role frees. The holder reads one message at a time: a reply for a blocking call
// goes into that call's slot (waking its caller), one for call() runs its completion on the
// holder's thread; the holder also fails the calls whose deadline passed. Taking the role after the
// send (not before) means a caller blocked writing a large request never holds it. An idle
// connection is not polled at all; a closed one is found by the next call. RpcOptions::
// socket_own_reads (DISTGRAD_SOCKET_OWN_READS) off sends blocking calls through call() instead.
//
// Between workers on one host (equal host identities: transport/shared_memory.h) the connection is an
// abstract Unix-domain socket (no file, gone with the process), which takes connections only from
// processes of the server's user (SO_PEERCRED), and every call uses it. Between hosts it is TCP
// (TCP_NODELAY, keepalive probes that notice a dead host within about 25 s), for small frames only:
// large ones keep to gRPC so that they do not hold up small calls behind them. The first message on
// a connection must carry the job token. A connection that closes fails every call in flight on it
// with UNAVAILABLE; deadlines are kept by the caller's reader; a caller that cannot connect, or whose
// connection closed, uses gRPC.
//
// Note [Connections before the token]
// Anyone who can reach a worker's TCP port (every interface, in a multi-node job) can connect, so
// nothing a connection does before its token is accepted may cost the worker more than a bounded
// amount: the token message must arrive whole within the handshake timeout (not just begin) and is
// at most 4 KiB; at most kMaxHandshakes connections may be in their handshake at once (more are
// closed as they are accepted); a connection's descriptor and reader thread are released as soon
// as it ends, refused or closed by its peer, not when the server stops; and an accept that fails
// for want of descriptors or memory backs off instead of spinning on the connection still queued.
//
//   call_socket::Server server(token, handler, "0.0.0.0");   // a Unix socket, and TCP on that host
//   call_socket::Client client("unix:" + server.name(), token, 10s);   // or "tcp:HOST:PORT"
//   client.call(request, 60s, [](grpc::Status status, grpc::ByteBuffer reply) { ... });
#pragma once

#include <absl/base/thread_annotations.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace distgrad::rpc::call_socket {

// Completes a call: the status and, when it is OK, the reply frame. Called once.
using Completion = std::function<void(grpc::Status status, grpc::ByteBuffer reply)>;

// What a server's connections may cost it.
struct ServerLimits {
  // A connection must present the token within this (Note [Connections before the token]).
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  // The largest request it keeps (0: no limit); a larger one is read past in small pieces, never
  // held whole, and answered RESOURCE_EXHAUSTED (RpcOptions::max_message_bytes).
  uint64_t max_request_bytes = 0;
};

class Server {
 public:
  // Serves one request frame; `respond` may run later, on any thread.
  using Handler = std::function<void(grpc::ByteBuffer request, Completion respond)>;

  // Connections in their handshake at once (Note [Connections before the token]).
  static constexpr size_t kMaxHandshakes = 64;

  // Listens at once on a fresh abstract Unix-domain socket, and on a free TCP port of `tcp_host`
  // unless it is empty; throws distgrad::Error when it cannot.
  Server(std::string token, Handler handler, const std::string& tcp_host, ServerLimits limits = {});
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The Unix socket's name and the TCP port (0: none), for clients (published at rendezvous).
  const std::string& name() const { return name_; }
  int tcp_port() const { return tcp_port_; }
  // Connections open now (each with its reader thread), handshaking or authenticated.
  size_t num_connections() const;
  // Stops accepting, closes every connection and joins the threads. Responses still pending are
  // dropped. Idempotent.
  void stop();

 private:
  struct Connection;
  void accept_connections();
  // Sleeps after a failed accept; false when stop() woke it.
  bool back_off();
  // The reader of a connection: its handshake, then its requests, until it ends.
  void serve(const std::shared_ptr<Connection>& connection);
  // Checks the token; false when the connection ends here.
  bool handshake(Connection& connection);
  // Hands each request to the handler until the connection ends.
  void read_requests(const std::shared_ptr<Connection>& connection);

  const std::string token_;
  const Handler handler_;
  const ServerLimits limits_;
  std::string name_;
  int listen_fd_ = -1, tcp_listen_fd_ = -1, tcp_port_ = 0;
  int wake_fds_[2] = {-1, -1};  // a pipe: stop() writes to wake the acceptor
  std::thread acceptor_;
  mutable std::mutex connections_mutex_;  // guards the fields below
  std::condition_variable readers_done_;  // signalled when the last reader ends
  // The open connections; each has a reader thread (detached: it leaves the set when it ends).
  std::set<std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(connections_mutex_);
  size_t handshakes_ ABSL_GUARDED_BY(connections_mutex_) = 0;  // connections yet to present the token
  bool stopping_ ABSL_GUARDED_BY(connections_mutex_) = false;
};

// What a call goes through when not over gRPC: a socket's Client, or the Loopback of a worker's
// calls to itself (rpc/loopback.h).
class Channel {
 public:
  virtual ~Channel() = default;
  // Sends a request; `done` runs once with the reply or the status: DEADLINE_EXCEEDED after
  // `timeout` (0: none), UNAVAILABLE or the close()'s status when the channel closes first.
  virtual void call(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout, Completion done) = 0;
  // The same call, waiting for the reply on this thread.
  virtual grpc::Status call_sync(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout,
                                 grpc::ByteBuffer* reply) = 0;
  // False once the channel closed.
  virtual bool is_open() const = 0;
  // Closes the channel; calls in flight complete with `why`. Idempotent.
  virtual void close(const grpc::Status& why) = 0;
};

class Client : public Channel {
 public:
  // Connects to `address` ("unix:NAME" or "tcp:HOST:PORT") and presents `token`; throws
  // distgrad::Error naming what failed (no such socket, refused, no answer within `timeout`).
  // A reply of more than `max_reply_bytes` (0: no limit) is read past, not kept, and fails its
  // call with RESOURCE_EXHAUSTED.
  Client(const std::string& address, const std::string& token, std::chrono::milliseconds timeout,
         uint64_t max_reply_bytes = 0);
  ~Client() override;  // close(): calls in flight complete with CANCELLED
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Channel::call; `done` runs on the thread reading the connection (Note [Reading one's own
  // reply]; inline when the connection is closed).
  void call(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout, Completion done) override;
  // Channel::call_sync; this thread reads the reply itself when it can.
  grpc::Status call_sync(const grpc::ByteBuffer& request, std::chrono::milliseconds timeout,
                         grpc::ByteBuffer* reply) override;
  // False once the connection closed (the server went away, or close()).
  bool is_open() const override;
  void close(const grpc::Status& why) override;

 private:
  using Clock = std::chrono::steady_clock;
  // Where the reply of a blocking call goes.
  struct Slot {
    bool done = false;
    grpc::Status status;
    grpc::ByteBuffer reply;
  };
  struct Pending {
    Completion done;  // a call(); null for a blocking call
    Clock::time_point deadline;
    Slot* slot = nullptr;  // a blocking call's
  };
  // The reader thread: reads while calls with a completion are pending (Note [Reading one's own
  // reply]), until the connection ends.
  void read_replies();
  // With the read role: fails the calls past their deadline, then waits up to the next deadline
  // (at most kDeadlineCheck, and `wake_by`) for one message and completes its call. False once the
  // connection ended (every call then failed).
  bool read_one(Clock::time_point wake_by);
  // Registers a call; nullopt when the connection is closed (then `closed` says why).
  std::optional<uint64_t> add_pending(std::chrono::milliseconds timeout, Pending pending, grpc::Status* closed);
  // Sends request `id`; closes the connection when that fails.
  void send_request(uint64_t id, const grpc::ByteBuffer& request);
  // Takes every call out of pending_ and completes it with `status`.
  void fail_all(const grpc::Status& status);
  // Completes the call `id` with `status` if it is still pending.
  void complete(uint64_t id, const grpc::Status& status, grpc::ByteBuffer reply);

  int fd_ = -1;
  uint64_t max_reply_bytes_ = 0;
  std::thread reader_;
  std::mutex write_mutex_;            // one message at a time on the socket
  mutable std::mutex pending_mutex_;  // guards everything below
  std::map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(pending_mutex_);
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines_ ABSL_GUARDED_BY(pending_mutex_);
  uint64_t next_id_ ABSL_GUARDED_BY(pending_mutex_) = 1;
  bool open_ ABSL_GUARDED_BY(pending_mutex_) = true;
  grpc::Status closed_because_ ABSL_GUARDED_BY(pending_mutex_);
  bool reading_ ABSL_GUARDED_BY(pending_mutex_) = false;         // someone holds the read role
  size_t with_completion_ ABSL_GUARDED_BY(pending_mutex_) = 0;   // pending calls of call()
  size_t blocking_waiting_ ABSL_GUARDED_BY(pending_mutex_) = 0;  // blocking callers waiting for the role
  // Notified when the role frees, a blocking call's slot fills, a call() is added, or it closes.
  std::condition_variable changed_;
};

}  // namespace distgrad::rpc::call_socket
