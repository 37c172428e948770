// The RPC API: call registered functions on the workers of a job, and stop.
//
// Every process of a job runs the same binary; init_rpc() (dist_autograd/init_rpc.h, which adds
// distributed autograd) or start_agent() joins it to the others (world info from the
// environment: rendezvous/world.h; rendezvous: rpc/agent.h). rpc_sync / rpc_async call a
// function registered with DISTGRAD_REMOTE on a worker given by rank or name, with arguments
// checked against the function's parameters at compile time; the result (or the remote
// exception, as a RemoteError) comes back. auto_init_rpc (dist_autograd/init_rpc.h) wraps the
// usual program: init, an optional per-worker initialisation, a main that rank filters restrict
// to some ranks, and a graceful shutdown during which idle workers keep serving until everyone is
// done.
//
//   dg::Tensor my_add(dg::Tensor a, dg::Tensor b) { return a + b; }
//   DISTGRAD_REMOTE(my_add);
//
//   int main() {
//     return dg::auto_init_rpc([] { dg::manual_seed(dg::get_rank()); },
//                              dg::rank_zero_only([] {
//                                dg::Tensor c = dg::rpc::rpc_sync("worker1", my_add, a, b);
//                                auto f = dg::rpc::rpc_async(1, my_add, a, b);   // Future<Tensor>
//                              }));
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>

#include "rendezvous/world.h"
#include "rpc/agent.h"
#include "rpc/codec.h"
#include "rpc/errors.h"
#include "rpc/future.h"
#include "rpc/options.h"
#include "rpc/registry.h"

namespace distgrad::rpc {

// Starts this process's agent with exactly the interceptors of `options` and waits for every
// worker (see rpc/agent.h). Once per process. Programs call init_rpc (dist_autograd/init_rpc.h),
// which adds distributed autograd's interceptor; this is RPC without it.
void start_agent(const RpcOptions& options);
// Graceful (the default): waits until every worker called shutdown and every call in flight is
// answered; otherwise stops at once. A no-op when RPC is not running.
void shutdown(bool graceful = true);
bool is_initialized();
// The running agent; throws when init_rpc has not been called.
Agent& agent();

// World info (available before init_rpc too).
int get_rank();
int get_world_size();
int get_local_rank();
int get_local_world_size();
// This worker's name, or the name of `rank`.
std::string get_worker_name();
std::string get_worker_name(int rank);
// The rank of a worker name ("worker03" -> 3).
int get_worker_id(std::string_view name);

// Returns once every worker reached the same barrier; throws naming the workers that did not
// within `timeout` (default: RpcOptions::init_timeout), unlike TorchOpt, which only logs.
void barrier();
void barrier(std::chrono::milliseconds timeout);

// What this process has sent through shared memory and over the network (rpc/agent.h).
TransportStats transport_stats();

// Workers found lost (docs/fault-tolerance.md): a partition's call to them failed as unreachable
// (UNAVAILABLE) under RemoteCallOptions::reissue_lost_partitions, or the program said so.
// Partitioners leave them out for the rest of the job; calls to them are still made when asked.
void mark_worker_lost(int rank);
// As a failed call's verdict: ignored when `rank` rejoined after `seen_at_epoch` (the
// membership_epoch() when the call was sent), since the failure was its earlier life's.
void mark_worker_lost(int rank, int64_t seen_at_epoch);
bool is_worker_lost(int rank);
std::vector<int> lost_workers();  // in rank order; none while RPC is not running

// Note [Membership]
// Each process keeps its own view of the world's membership: the workers it found lost (above)
// and those that came back (Note [Rejoining workers] in rpc/agent.cc: a worker restarted by
// `distgrad-run --max-rejoins` rejoins the running world and every other worker takes it back).
// Each change it sees bumps membership_epoch() and runs the callbacks given to
// on_membership_change, on the thread that saw it (the failed call's, or an RPC thread for a
// rejoin): they must not block. Partitioners read the view at every call.
int64_t membership_epoch();       // 0 at init_rpc
std::vector<int> live_workers();  // every rank not lost, in rank order
void on_membership_change(std::function<void(const MembershipChange&)> callback);
// Whether this process rejoined a running world, and its life (0 at the world's start, k after
// its rank's k-th rejoin); false and 0 while RPC is not running.
bool rejoined_world();
int64_t incarnation();

// The default deadline of calls (RpcOptions::timeout until changed); 0 = none.
void set_default_timeout(std::chrono::milliseconds timeout);
std::chrono::milliseconds default_timeout();

// A worker given by rank or by name (either spelling of rendezvous::find_worker_id: "worker05" or
// "worker5" in a world of 16). The name is resolved when the rank is asked for.
class WorkerRef {
 public:
  WorkerRef(int rank) : rank_(rank) {}                 // NOLINT(google-explicit-constructor)
  WorkerRef(std::string_view name) : name_(name) {}    // NOLINT(google-explicit-constructor)
  WorkerRef(const char* name) : name_(name) {}         // NOLINT(google-explicit-constructor)
  WorkerRef(const std::string& name) : name_(name) {}  // NOLINT(google-explicit-constructor)
  // The rank; throws naming the rank or the name when it is not a worker of this world.
  int rank() const;
  // The rank, or std::nullopt when the rank or the name is not a worker of this world.
  std::optional<int> find_rank() const;
  // The worker as given, for messages: 7, or "worker7" in quotes.
  std::string str() const;

 private:
  int rank_ = -1;
  std::string name_;
};

namespace detail {

// The registered name of `function`; throws when it was not registered.
const std::string& registered_name(FunctionAddress function);

template <typename R>
using ResultOf = std::decay_t<R>;

template <typename R>
ResultOf<R> decode_result(const std::string& function, const std::string& worker, const Encoded& reply) {
  Decoder in(reply.payload, reply.tensors);
  try {
    if constexpr (std::is_void_v<R>) {
      if (in.remaining() != 0)
        throw CodecError("expected no result, found " + std::to_string(in.remaining()) + " bytes");
    } else {
      ResultOf<R> value = Codec<ResultOf<R>>::decode(in);
      if (in.remaining() != 0) throw CodecError(std::to_string(in.remaining()) + " bytes follow the result");
      return value;
    }
  } catch (const CodecError& error) {
    throw RemoteError(StatusCode::kInternal, worker, function,
                      std::string("the result does not decode as ") + (std::is_void_v<R> ? "void" : "its type") + ": " +
                          error.what());
  }
}

// Encodes `args` as the parameters `Params` (of a function, a method or a constructor) for a
// call to `to`.
template <typename... Params, typename... Args>
Encoded encode_arguments(int to, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "rpc: wrong number of arguments for the function");
  static_assert((std::is_convertible_v<Args&&, std::decay_t<Params>> && ...),
                "rpc: an argument does not convert to the function's parameter type");
  Encoder out(CallTarget{to, false});
  (Codec<std::decay_t<Params>>::encode(out, static_cast<std::decay_t<Params>>(std::forward<Args>(args))), ...);
  return out.finish();
}

template <typename... Params, typename... Args>
OutgoingCall make_call(int to, FunctionAddress function, Args&&... args) {
  return OutgoingCall{registered_name(function), sizeof...(Params),
                      encode_arguments<Params...>(to, std::forward<Args>(args)...)};
}

// Sends `call` to `to` through the running agent; when it fails, its arguments' attachments
// are told (rpc/codec.h, CallAttachment), after which they are dropped.
Future<Encoded> send_async(int to, OutgoingCall call, std::chrono::milliseconds timeout);
Encoded send_sync(int to, OutgoingCall call, std::chrono::milliseconds timeout);

}  // namespace detail

// Calls `function(args...)` on `worker` and returns a future of its result. `timeout`
// overrides the default deadline (0 = none).
template <typename R, typename... Params, typename... Args>
Future<detail::ResultOf<R>> rpc_async_with_timeout(const WorkerRef& worker, std::chrono::milliseconds timeout,
                                                   R (*function)(Params...), Args&&... args) {
  const int to = worker.rank();
  OutgoingCall call =
      detail::make_call<Params...>(to, reinterpret_cast<FunctionAddress>(function), std::forward<Args>(args)...);
  std::string name = call.function;
  std::string worker_name = agent().worker_name(to);
  return detail::send_async(to, std::move(call), timeout).then([name, worker_name](const Future<Encoded>& reply) {
    return detail::decode_result<R>(name, worker_name, reply.get());
  });
}

template <typename R, typename... Params, typename... Args>
Future<detail::ResultOf<R>> rpc_async(const WorkerRef& worker, R (*function)(Params...), Args&&... args) {
  return rpc_async_with_timeout(worker, default_timeout(), function, std::forward<Args>(args)...);
}

// Calls `function(args...)` on `worker` and waits for the result (rethrowing a RemoteError).
template <typename R, typename... Params, typename... Args>
detail::ResultOf<R> rpc_sync_with_timeout(const WorkerRef& worker, std::chrono::milliseconds timeout,
                                          R (*function)(Params...), Args&&... args) {
  const int to = worker.rank();
  OutgoingCall call =
      detail::make_call<Params...>(to, reinterpret_cast<FunctionAddress>(function), std::forward<Args>(args)...);
  std::string name = call.function;
  const Encoded reply = detail::send_sync(to, std::move(call), timeout);
  return detail::decode_result<R>(name, agent().worker_name(to), reply);
}

template <typename R, typename... Params, typename... Args>
detail::ResultOf<R> rpc_sync(const WorkerRef& worker, R (*function)(Params...), Args&&... args) {
  return rpc_sync_with_timeout(worker, default_timeout(), function, std::forward<Args>(args)...);
}

// Rank filters: a callable that runs `fn` with its arguments on the selected ranks only and
// otherwise does nothing; non-void results come back as std::optional (empty where skipped).
template <typename F>
auto on_ranks(std::set<int> ranks, F fn) {
  return [ranks = std::move(ranks), fn = std::move(fn)](auto&&... args) {
    using R = std::invoke_result_t<F, decltype(args)...>;
    const bool selected = ranks.count(get_rank()) > 0;
    if constexpr (std::is_void_v<R>) {
      if (selected) fn(std::forward<decltype(args)>(args)...);
    } else {
      return selected ? std::optional<R>(fn(std::forward<decltype(args)>(args)...)) : std::nullopt;
    }
  };
}
template <typename F>
auto on_rank(int rank, F fn) {
  return on_ranks({rank}, std::move(fn));
}
// Runs on every rank except those given.
template <typename F>
auto not_on_ranks(std::set<int> ranks, F fn) {
  std::set<int> others;
  for (int rank = 0; rank < get_world_size(); ++rank) {
    if (!ranks.count(rank)) others.insert(rank);
  }
  return on_ranks(std::move(others), std::move(fn));
}
template <typename F>
auto not_on_rank(int rank, F fn) {
  return not_on_ranks({rank}, std::move(fn));
}
template <typename F>
auto rank_zero_only(F fn) {
  return on_rank(0, std::move(fn));
}
template <typename F>
auto rank_non_zero_only(F fn) {
  return not_on_rank(0, std::move(fn));
}

}  // namespace distgrad::rpc

namespace distgrad {
// The user-facing names of API.md at the top level: dg::get_rank, dg::rank_zero_only, ...
using rpc::barrier;
using rpc::get_local_rank;
using rpc::get_local_world_size;
using rpc::get_rank;
using rpc::get_worker_id;
using rpc::get_worker_name;
using rpc::get_world_size;
using rpc::not_on_rank;
using rpc::not_on_ranks;
using rpc::on_rank;
using rpc::on_ranks;
using rpc::rank_non_zero_only;
using rpc::rank_zero_only;
}  // namespace distgrad
