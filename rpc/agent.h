// Agent: one process's RPC runtime (a gRPC server and a call socket, channels to every peer, the
// executor, the rendezvous Store) behind the user API of rpc/rpc.h.
//
// start() runs the rendezvous: the Store is hosted by rank 0 at MASTER_ADDR:MASTER_PORT
// (unless the launcher hosts it: DISTGRAD_USE_AGENT_STORE=1), the worker's servers listen on
// free ports, it publishes how to reach them in the Store and waits for everyone else's. Calls
// are frames (rpc/frame.h) sent to the peer's Worker service or call socket; the callee runs the
// registered function on its executor and replies with the result or a status (rpc/errors.h).
//
// The agent is the lifecycle (start, barrier, graceful shutdown, stop) over parts with one job
// each, internal to rpc/: WorkerDirectory (its rendezvous, rpc/worker_directory.h), CallServer
// (serving calls, rpc/call_server.h), CallClient (making them, rpc/call_client.h), TensorPaths
// (which way tensors travel, rpc/tensor_paths.h) and the InterceptorChain they share.
//
// Note [Calls before init_rpc returns]
// A peer that finished its rendezvous may call this worker while this worker's own start() is
// still collecting the addresses. Such requests are received but wait until open_calls() (which
// init_rpc calls once the agent is the process's running one), so that a function that itself
// calls another worker always finds RPC running; they fail with UNAVAILABLE if the agent stops
// first or init_timeout passes.
//
// The job token and TLS: Note [Job token] in rendezvous/credentials.h.
//
// Interceptors (rpc/interceptor.h, RpcOptions::interceptors) take part in every call and carry
// bytes of their own in its frames; distributed autograd is one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/store.h"
#include "rendezvous/world.h"
#include "rpc/future.h"
#include "rpc/options.h"
#include "rpc/registry.h"

namespace distgrad::rpc {

// What this process sent, by path: calls over distgrad's sockets (RpcOptions::socket_calls) and
// over gRPC, tensors and their bytes copied into shared-memory segments (RpcOptions::shared_memory),
// tensors in shared memory sent by reference without a copy (Tensor::share_memory_()), tensors in
// the messages, and the shared-memory segments it keeps for its peers.
struct TransportStats {
  uint64_t socket_calls = 0, grpc_calls = 0;
  uint64_t in_process_calls = 0;  // to itself, without a socket (Note [Calls to oneself] in rpc/loopback.h)
  uint64_t shared_memory_tensors = 0, shared_memory_bytes = 0;
  uint64_t referenced_tensors = 0, referenced_bytes = 0;
  uint64_t network_tensors = 0, network_bytes = 0;
  size_t shared_memory_segments = 0, shared_memory_segment_bytes = 0;
};

// A change of the world's membership as this process saw it (Note [Membership] in rpc/rpc.h).
struct MembershipChange {
  enum class Kind { kLost, kRejoined };
  Kind kind;
  int rank;
  int64_t epoch;  // this process's membership_epoch() after the change
};

// A call about to be made.
struct OutgoingCall {
  std::string function;
  uint32_t num_arguments = 0;
  Encoded arguments;
};

class Agent {
 public:
  explicit Agent(RpcOptions options);
  ~Agent();  // stops at once if shutdown() was not called
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // The rendezvous (see above); throws naming the workers that did not show up in time.
  void start();
  // Lets the requests that arrived during start(), and later ones, run (Note [Calls before
  // init_rpc returns]).
  void open_calls();

  const rendezvous::WorldInfo& world() const;
  const RpcOptions& options() const;
  // "worker{rank}", zero-padded to the world's size.
  const std::string& worker_name(int rank) const;

  Future<Encoded> call_async(int to, OutgoingCall call, std::chrono::milliseconds timeout);
  // The blocking path (no thread hop): for rpc_sync.
  Encoded call_sync(int to, OutgoingCall call, std::chrono::milliseconds timeout);

  // Returns once every worker reached the same barrier; throws naming the missing ones.
  void barrier(std::chrono::milliseconds timeout);
  // Graceful: waits for every worker to arrive, then for every call in flight to be answered,
  // then stops. Otherwise stops at once (calls in flight fail).
  void shutdown(bool graceful);

  rendezvous::StoreClient& store();
  TransportStats transport_stats() const;
  // Workers this process found lost (rpc::mark_worker_lost in rpc/rpc.h), in rank order. A mark
  // `seen_at_epoch` (the membership epoch when the failed call was sent) is ignored when `rank`
  // rejoined after it: the failure was its earlier life's.
  void mark_lost(int rank, std::optional<int64_t> seen_at_epoch = std::nullopt);
  std::vector<int> lost_workers() const;
  int64_t membership_epoch() const;
  // `callback` runs on every later change, on the thread that saw it (it must not block).
  void on_membership_change(std::function<void(const MembershipChange&)> callback);

  // Note [Rejoining workers] (rpc/agent.cc). Whether this process rejoined a running world
  // (DISTGRAD_REJOIN=1), and its life: 0 at the world's start, k after the k-th rejoin of its rank.
  bool rejoined() const;
  int64_t incarnation() const;
  // On the others: worker `rank` rejoined in life `incarnation`; returns this process's lost workers.
  std::vector<int> take_back(int rank, int64_t incarnation);
  // On the rejoined worker once the others took it back: its rank is no longer recorded lost.
  void finish_rejoin();
  // Whether the agent runs the interceptor named `name` (RpcOptions::interceptors).
  bool runs_interceptor(std::string_view name) const;

 private:
  // Writes this process's lost workers to the Store (Note [Waiting without the lost]).
  void record_lost();

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace distgrad::rpc
