// Agent: one process's RPC runtime (a gRPC server, channels to every peer, the executor, the
// rendezvous Store) behind the user API of rpc/rpc.h.
//
// start() runs the rendezvous: the Store is hosted by rank 0 at MASTER_ADDR:MASTER_PORT
// (unless the launcher hosts it: DISTGRAD_USE_AGENT_STORE=1), the worker's gRPC server listens
// on a free port, publishes its address in the Store and waits for everyone else's. Calls are
// frames (rpc/frame.h) sent to the peer's Worker service; the callee runs the registered
// function on its executor and replies with the result or a status (rpc/errors.h).
//
// Note [Calls before init_rpc returns]
// A peer that finished its rendezvous may call this worker while this worker's own start() is
// still collecting the addresses. Such requests are received but wait until open_calls() (which
// init_rpc calls once the agent is the process's running one), so that a function that itself
// calls another worker always finds RPC running; they fail with UNAVAILABLE if the agent stops
// first or init_timeout passes.
//
// Note [Job token]
// Every request (Worker and Store) carries the job's token (DISTGRAD_TOKEN) as gRPC metadata,
// and servers refuse requests without it with UNAUTHENTICATED (compared in constant time). The
// token is never written to the Store. Without a token, servers listen on loopback only, and a
// non-loopback MASTER_ADDR is refused unless DISTGRAD_INSECURE=1 says the network is trusted.
// With DISTGRAD_TLS_CERT and DISTGRAD_TLS_KEY (and DISTGRAD_TLS_CA to verify peers) every
// connection is TLS.
//
// Extension points for distributed autograd: CallHooks run on the caller before a request
// leaves and when its reply arrives, and on the callee when a request arrives and before its
// reply leaves; the autograd ids travel in the frame headers.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rpc/future.h"
#include "rpc/options.h"
#include "rpc/registry.h"
#include "rpc/store.h"
#include "rpc/world.h"

namespace distgrad::rpc {

// Distributed autograd's ids for one message (0 when unused).
struct AutogradIds {
  uint64_t context_id = 0;
  uint64_t message_id = 0;
};

struct CallHooks {
  // Caller: before a request to `to` leaves; may set the ids.
  std::function<void(int to, const std::vector<Tensor>& tensors, AutogradIds& ids)> before_request;
  // Callee: a request from `from` arrived (its tensors decoded; `requires_grad` says which of the
  // sender's did). The returned object is kept alive while the function runs and its reply is
  // prepared (for thread-local state such as the current autograd context).
  std::function<std::shared_ptr<void>(int from, std::vector<Tensor>& tensors, const std::vector<bool>& requires_grad,
                                      const AutogradIds& ids)>
      on_request;
  // Callee: before the reply to `to` leaves; may set the ids.
  std::function<void(int to, const std::vector<Tensor>& tensors, AutogradIds& ids)> before_reply;
  // Caller: the reply from `from` arrived (as on_request).
  std::function<void(int from, std::vector<Tensor>& tensors, const std::vector<bool>& requires_grad,
                     const AutogradIds& ids)>
      on_reply;
};

// The hooks every agent of this process uses (the distributed autograd layer installs its own
// when linked in); applies to the running agent too.
void install_call_hooks(CallHooks hooks);

// What this process sent, by path: calls over distgrad's sockets (RpcOptions::socket_calls) and
// over gRPC, tensors and their bytes through shared memory (RpcOptions::shared_memory) and in the
// messages, and the shared-memory segments it keeps for its peers.
struct TransportStats {
  uint64_t socket_calls = 0, grpc_calls = 0;
  uint64_t shared_memory_tensors = 0, shared_memory_bytes = 0;
  uint64_t network_tensors = 0, network_bytes = 0;
  size_t shared_memory_segments = 0, shared_memory_segment_bytes = 0;
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

  const WorldInfo& world() const;
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

  StoreClient& store();
  TransportStats transport_stats() const;
  // Replaces this agent's hooks (install_call_hooks sets them for every agent).
  void set_hooks(CallHooks hooks);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace distgrad::rpc
