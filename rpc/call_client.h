// CallClient: the calling side of an agent (internal to rpc/). It keeps a gRPC channel to each
// peer and, where the peer offers one, a call socket (Note [Socket calls] in rpc/call_socket.h);
// encodes requests with the interceptors' bytes and the caller's device maps, decodes replies,
// and tracks every call in flight, so that a graceful shutdown can wait for them and a stop can
// cancel them (no completion outlives the agent).
//
// Note [Calls in a trace]
// When the process records a trace (trace/trace.h), a call leaves on the caller an asynchronous
// span (category "rpc.call", named after the function) from its issue to its reply decoded, with
// the callee, the frames' bytes and whether it failed as arguments, and "encode request" /
// "decode reply" spans (and, for a blocking call, "wait for reply") on the threads that did them.
// On the callee it leaves an asynchronous "queue" span (category "rpc.queue") from the request's
// arrival to the start of its serving, and an "rpc.serve" span around decoding, running and
// encoding, with the caller, the bytes and whether it failed (rpc/call_server.cc). The request's
// flow arrow leaves the caller's encode span for the callee's serve span (its id travels as
// CallHeader.trace_flow), the reply's leaves the callee's encode span for the caller's decode span
// (id + 1, as ReplyHeader.trace_flow).
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "rendezvous/credentials.h"
#include "rendezvous/world.h"
#include "rpc/agent.h"
#include "rpc/call_socket.h"
#include "rpc/errors.h"
#include "rpc/interceptor_chain.h"
#include "rpc/tensor_paths.h"

namespace distgrad::rpc {

// Where a peer takes calls.
struct PeerAddress {
  std::string grpc;                     // HOST:PORT
  std::string socket;                   // "unix:NAME" or "tcp:HOST:PORT"; empty: calls to it use gRPC
  bool socket_takes_any_frame = false;  // Unix sockets take every call; TCP only small frames
};

class CallClient {
 public:
  struct Setup {
    rendezvous::WorldInfo world;
    std::vector<std::string> names;  // every worker's, by rank
    std::vector<PeerAddress> peers;  // by rank
    std::string token;
    const rendezvous::TransportCredentials& credentials;
    std::map<std::string, DeviceMap> device_maps;  // RpcOptions::device_maps
    size_t socket_frame_limit;
    bool socket_own_reads;       // RpcOptions::socket_own_reads
    uint64_t max_message_bytes;  // RpcOptions::max_message_bytes, for replies
    TensorPaths& paths;
    const InterceptorChain& interceptors;
    // This worker's own server, which its calls to itself are handed to (Note [Calls to oneself] in
    // rpc/loopback.h); null: they go over the Unix socket like any other.
    call_socket::Server::Handler serve_own_calls = nullptr;
  };

  explicit CallClient(Setup setup);
  ~CallClient();
  CallClient(const CallClient&) = delete;
  CallClient& operator=(const CallClient&) = delete;

  Future<Encoded> call_async(int to, OutgoingCall call, std::chrono::milliseconds timeout);
  // The blocking path (no thread hop).
  Encoded call_sync(int to, OutgoingCall call, std::chrono::milliseconds timeout);
  // Whether `rank` still answers: the status of a call of the ping function over gRPC.
  grpc::Status ping(int rank, std::chrono::milliseconds timeout);
  // Calls to `rank` go to `address` from now on (the worker rejoined the world: a new process).
  // A call already made to the old address ends as it would have; the old channel and socket
  // stay until close(), so that a caller still holding them is safe.
  void replace_peer(int rank, PeerAddress address);

  // Waits until no call is in flight (each has its own deadline).
  void wait_for_calls();
  // Fails every call in flight (closing the sockets, cancelling gRPC's calls); returns whether
  // they all completed within `timeout`.
  bool cancel_calls(std::chrono::milliseconds timeout);
  // Closes the channels; later calls fail.
  void close();

  // Calls made over the sockets and over gRPC.
  void add_to(TransportStats& stats) const;

 private:
  struct Peer;
  struct AsyncCall;

  Peer& peer(int rank);
  void prepare_context(grpc::ClientContext& context, std::chrono::milliseconds timeout) const;
  // `trace_id`: the call's id in the trace (Note [Calls in a trace]), 0 when it is not traced.
  grpc::ByteBuffer encode_request(int to, OutgoingCall& call, uint64_t trace_id);
  Encoded decode_reply(int from, const std::string& function, const grpc::ByteBuffer& response, uint64_t trace_id);
  RemoteError call_error(int to, const std::string& function, const grpc::Status& status) const;
  // The channel for a call of `request` to `rank`: this worker's Loopback for itself, else its
  // socket; null when it goes over gRPC. Connecting (on the first call) takes at most the call's
  // `timeout` (and 10 s), so that a peer that does not answer fails the call at its deadline.
  call_socket::Channel* socket_for(int rank, const grpc::ByteBuffer& request, std::chrono::milliseconds timeout);
  // Whether calls to `rank` go through the Loopback.
  bool in_process(int rank) const { return rank == setup_.world.rank && setup_.serve_own_calls != nullptr; }
  // Counts a call to `rank` made through its channel.
  void count_channel_call(int rank);
  Future<Encoded> call_over_socket(call_socket::Channel& socket, int to, const std::string& function,
                                   const grpc::ByteBuffer& request, std::chrono::milliseconds timeout,
                                   uint64_t trace_id);
  void call_started(const void* call, grpc::ClientContext* context);
  void call_finished(const void* call);

  const Setup setup_;  // its `peers` are the addresses at the start; addresses_ the current ones
  std::atomic<uint64_t> socket_calls_{0}, grpc_calls_{0}, in_process_calls_{0};
  std::mutex peers_mutex_;                                            // guards addresses_, peers_ and retired_peers_
  std::vector<PeerAddress> addresses_ ABSL_GUARDED_BY(peers_mutex_);  // by rank
  std::vector<std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(peers_mutex_);
  std::vector<std::unique_ptr<Peer>> retired_peers_ ABSL_GUARDED_BY(peers_mutex_);  // replaced, kept until close()
  bool closed_ ABSL_GUARDED_BY(peers_mutex_) = false;
  // The calls in flight, keyed by each call's state: the gRPC context to cancel, or null for
  // socket calls (closing the sockets fails those). Recursive: gRPC may run a cancelled call's
  // completion (which calls call_finished) inline, inside TryCancel.
  std::recursive_mutex calls_mutex_;
  std::condition_variable_any calls_finished_;  // notified under calls_mutex_
  std::unordered_map<const void*, grpc::ClientContext*> calls_in_flight_ ABSL_GUARDED_BY(calls_mutex_);
};

}  // namespace distgrad::rpc
