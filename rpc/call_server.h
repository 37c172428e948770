// CallServer: the serving side of an agent (internal to rpc/). Its gRPC Worker service and its
// call socket (Note [Socket calls] in rpc/call_socket.h) check the job token before they read a
// request's message (gRPC: from the call's metadata, Note [Token before the message]; the
// socket: at the connection's handshake), then hand every request to the executor, which decodes
// the frame, runs the registered function between the interceptors' on_request and before_reply,
// and encodes the reply; failures go back as a status (rpc/errors.h). Requests wait at a gate
// until the agent opens it (Note [Calls before init_rpc returns] in rpc/agent.h).
//
// Note [Token before the message]
// A unary gRPC method reads its whole request before the handler runs, so a call with a wrong
// token could make a worker hold a message of any size before it is refused. The Worker service's
// one method is therefore served as a generic call (the wire is the same unary call): its reactor
// looks at the token in the client's metadata and finishes the call UNAUTHENTICATED before it
// starts reading, so what the caller sent beyond gRPC's flow-control window never arrives.
//
//   CallServer server({...});
//   const int port = server.start("127.0.0.1");   // listening; requests wait
//   server.open_calls();                          // requests run
//   server.stop_listening(); ...; server.wait();  // at shutdown, around the executor's end
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "rendezvous/credentials.h"
#include "rendezvous/world.h"
#include "rpc/call_socket.h"
#include "rpc/executor.h"
#include "rpc/interceptor_chain.h"
#include "rpc/tensor_paths.h"

namespace distgrad::trace {
class Span;
}  // namespace distgrad::trace

namespace distgrad::rpc {
namespace wire {
class CallHeader;
}  // namespace wire

class CallServer {
 public:
  struct Setup {
    rendezvous::WorldInfo world;
    std::string name;  // this worker's, for messages
    std::string token;
    const rendezvous::TransportCredentials& credentials;
    std::chrono::milliseconds init_timeout;  // the longest a request waits at the gate
    bool socket_calls;
    uint64_t max_message_bytes;  // RpcOptions::max_message_bytes
    Executor& executor;          // runs every request; outlives the server's use of it (see stop_listening)
    TensorPaths& paths;
    const InterceptorChain& interceptors;
  };

  explicit CallServer(Setup setup);
  ~CallServer();
  CallServer(const CallServer&) = delete;
  CallServer& operator=(const CallServer&) = delete;

  // Listens on `bind_host` (gRPC, and the call socket unless RpcOptions::socket_calls is off);
  // returns the gRPC port. Throws naming the host when it cannot.
  int start(const std::string& bind_host);
  // What the call socket's server does with a request frame (queues it on the executor, which
  // serves it and responds); also the server of a worker's calls to itself (rpc/loopback.h).
  call_socket::Server::Handler frame_handler();
  // The call socket's Unix name and TCP port, for the rendezvous entry (empty and 0 when none).
  std::string socket_name() const;
  int socket_tcp_port() const;

  // Lets waiting and later requests run.
  void open_calls();
  // Closes the gate (waiting requests are refused), stops taking connections and calls, and
  // gives gRPC's calls a second to finish. The executor may then be stopped, and wait() called.
  void stop_listening();
  // Waits until gRPC has finished with every call.
  void wait();

 private:
  class CallReactor;
  class WorkerService;

  // Waits until requests may run; false when the gate closed or init_timeout passed first.
  bool wait_until_calls_open();
  void set_gate(bool open);
  // The answer to requests that arrive when init_rpc did not finish.
  grpc::Status not_serving() const;
  // Runs the call a request frame asks for, from either transport; `arrived_ns`: when the request
  // arrived on the trace clock, 0 when this process does not record (Note [Calls in a trace]).
  grpc::Status serve(const grpc::ByteBuffer& request, grpc::ByteBuffer* response, int64_t arrived_ns);
  // serve's work inside its trace span: decodes `request` into `header`, runs, encodes.
  grpc::Status run_call(const grpc::ByteBuffer& request, wire::CallHeader& header, grpc::ByteBuffer* response,
                        trace::Span& span);

  const Setup setup_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<call_socket::Server> socket_server_;  // null when socket calls are off
  std::mutex gate_mutex_;
  std::condition_variable gate_changed_;  // notified under gate_mutex_
  bool calls_open_ ABSL_GUARDED_BY(gate_mutex_) = false;
  bool calls_closed_ ABSL_GUARDED_BY(gate_mutex_) = false;
};

}  // namespace distgrad::rpc
