// Remote references (torch.distributed.rpc's RRef and rpc.remote): values that live on a worker.
//
// rpc::remote(worker, fn, args...) runs a registered function on `worker`, its owner, and
// returns at once an RRef<T> to the result, which stays there. rpc::remote_object<T>(worker,
// args...) constructs an object of a registered class there (rpc/remote_class.h); its methods
// are then called on the owner through the RRef. An RRef travels as an argument (to its owner
// or any other worker) or in a result, alone or inside any codec type, and the value lives as
// long as some RRef to it does, anywhere (Note [RRef lifetime]).
//
//   dg::Tensor make_table(int64_t rows) { return dg::randn({rows, 16}); }
//   DISTGRAD_REMOTE(make_table);
//
//   dg::rpc::RRef<dg::Tensor> table = dg::rpc::remote("worker1", make_table, 1000);
//   dg::Tensor copy = table.to_here();                      // fetched from worker1
//   dg::rpc::rpc_sync("worker2", use_table, table);         // worker2 gets the RRef, not the tensor
//
//   dg::rpc::RRef<Shard> shard = dg::rpc::remote_object<Shard>("worker1", path, 3);
//   Batch batch = shard.rpc_sync(&Shard::sample, 32);       // runs on worker1
//   dg::rpc::Future<int64_t> size = shard.rpc_async(&Shard::size);
//   dg::rpc::RRef<Batch> kept = shard.remote(&Shard::sample, 32);   // the result stays there too
//
// Calls through one RRef (its copies included) reach the owner in the order they were made: each
// is sent once the one before it was answered. Calls through different RRefs, or from different
// workers, may run on the object at once: a class whose methods several callers use guards its
// own state. to_here is not ordered with the calls.
//
// Errors of the function or constructor that makes a value come back from to_here and from every
// call on the value (and are logged by the owner if nobody ever asked); a dead owner fails them
// with UNAVAILABLE naming it. Inside a distributed autograd context, to_here and method calls are
// calls like any other: their tensors record the send and receive of distributed autograd, so
// gradients reach the owner's values (a remote module's parameters) and stay in the context
// (dist_optim/distributed_optimizer.h steps them).
//
// Note [RRef lifetime]
// PyTorch's protocol, reference counting by forks, with the sender registering each fork:
// - A value has an id (the worker that asked for it and a counter there) and its owner keeps a
//   set of forks, each held by one worker. The RRef that remote() returns is the first fork; its
//   id is the value's own, and the owner counts it from the first message that mentions the
//   value, so no later message can find the value gone while its creator still holds it.
// - Sending an RRef in a request to a worker other than its owner, or in any reply, registers a
//   new fork held by the receiver before the message leaves (at the owner: one round trip, or
//   none when the sender is the owner). If the request fails, the sender releases that fork. A
//   request to the owner itself carries no fork: the sender keeps its own until the reply, and the
//   owner adds a fork of its own when it decodes the RRef.
// - Every RRef (with its copies, in one process) is one fork. When the last copy goes, the fork
//   is released: at the owner directly, elsewhere by a message to the owner (the creator's only
//   after the owner acknowledged the creation). The owner frees the value when no fork is left.
// - The owner checks every RpcOptions::holder_check_interval that the workers holding its forks
//   are alive (their RPC threads answer a ping) and releases the forks of one that exited.
// What is not covered: a reply carrying an RRef that its caller abandoned (a call that timed out)
// leaves that fork registered until the caller's worker exits.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rpc/codec.h"
#include "rpc/future.h"
#include "rpc/owned_value.h"
#include "rpc/remote_class.h"
#include "rpc/rpc.h"

namespace distgrad::rpc {

// An id unique in the job: the rank that made it and a counter there.
struct GloballyUniqueId {
  int32_t created_on = -1;
  int64_t local_id = -1;

  bool valid() const { return created_on >= 0; }
  auto operator<=>(const GloballyUniqueId&) const = default;
  // "2:17"
  std::string str() const { return std::to_string(created_on) + ":" + std::to_string(local_id); }
};
DISTGRAD_CODEC(GloballyUniqueId, created_on, local_id);
using RRefId = GloballyUniqueId;
using ForkId = GloballyUniqueId;

// What RRefs this process holds (torch's _rref_context_get_debug_info()), for tests and leaks.
struct RRefDebugInfo {
  size_t num_owned_values = 0;  // values this worker owns
  size_t num_forks = 0;         // the forks of those values, held here and elsewhere
  size_t num_user_rrefs = 0;    // RRefs in this process to values owned elsewhere
};
RRefDebugInfo get_rref_debug_info();

namespace detail {

class RRefContext;

// The state shared by the copies of one RRef in a process: one fork of the value. Its
// destruction releases the fork (Note [RRef lifetime]). Implemented in rpc/rref_context.cc.
class RRefState {
 public:
  RRefState(std::shared_ptr<RRefContext> context, RRefId id, ForkId fork, int owner, std::string type_name,
            Future<void> created);
  ~RRefState();
  RRefState(const RRefState&) = delete;
  RRefState& operator=(const RRefState&) = delete;

  const RRefId& id() const { return id_; }
  const ForkId& fork() const { return fork_; }
  int owner() const { return owner_; }
  const std::string& type_name() const { return type_name_; }
  bool is_owner() const;
  // Whether the owner acknowledged the creation (always, for RRefs that were not created here).
  bool confirmed_by_owner() const { return created_.is_ready() && created_.error() == nullptr; }
  // The creation's acknowledgement (ready at once for RRefs that were not created here).
  const Future<void>& created() const { return created_; }

  // On the owner: the value, once made (waits up to the default timeout); elsewhere an error
  // naming the owner. Throws the error of the call that made it.
  void* local_object(const char* what);
  // Sends `call` to the owner once the calls sent earlier through this state were answered.
  Future<Encoded> send_in_order(OutgoingCall call, std::chrono::milliseconds timeout);

 private:
  const std::shared_ptr<RRefContext> context_;
  const RRefId id_;
  const ForkId fork_;
  const int owner_;
  const std::string type_name_;
  const Future<void> created_;
  std::shared_ptr<void> local_object_;  // cached by local_object(); the fork keeps it alive
  std::mutex mutex_;                    // guards last_call_ and local_object_
  Future<void> last_call_;              // completes when the last call sent through this state is answered
};

// What a new value is made by on its owner.
enum class Producer : uint8_t { kFunction = 0, kConstructor = 1, kMethod = 2 };

// Asks `owner` to make a value and returns the creator's state at once. `target` is the object
// whose method makes it (Producer::kMethod), whose earlier calls it follows.
std::shared_ptr<RRefState> create_remote(int owner, Producer producer, const std::string& name,
                                         const std::shared_ptr<RRefState>& target, std::string type_name,
                                         Encoded arguments, uint32_t num_arguments);
// Makes `value` a value owned here, with the returned state its first fork.
std::shared_ptr<RRefState> own_here(OwnedValue value, const char* what);
// The copy of `rref`'s value (its owner's answer to to_here; the value itself on the owner).
Encoded fetch(const std::shared_ptr<RRefState>& rref, std::chrono::milliseconds timeout);
// Calls `method` on `rref`'s object on its owner (rpc_async through the RRef).
Future<Encoded> call_method(const std::shared_ptr<RRefState>& rref, const std::string& method, Encoded arguments,
                            uint32_t num_arguments, std::chrono::milliseconds timeout);
// Codec<RRef<T>>'s halves, for any T.
void encode_rref(Encoder& out, const std::shared_ptr<RRefState>& rref);
std::shared_ptr<RRefState> decode_rref(Decoder& in, const std::string& type_name);
// Throws naming what was asked of an RRef that refers to nothing (default-constructed).
void check_valid(const std::shared_ptr<RRefState>& rref, const char* what);

}  // namespace detail

template <typename T>
class RRef {
 public:
  RRef() = default;  // refers to nothing
  // An RRef to `value`, owned by this worker (torch's RRef(value)): a parameter server hands
  // out RRefs to its own tensors this way. Requires RPC running.
  explicit RRef(T value)
      : state_(detail::own_here(OwnedValue::of(std::make_shared<T>(std::move(value))), "RRef(value)")) {}

  // The value's id, its owner's rank and name, and whether this process is the owner.
  const RRefId& id() const { return state("id")->id(); }
  int owner() const { return state("owner")->owner(); }
  std::string owner_name() const { return get_worker_name(owner()); }
  bool is_owner() const { return state("is_owner")->is_owner(); }
  // Whether the owner knows of this RRef (torch's confirmed_by_owner): false only while the
  // creation that this process asked for is on its way.
  bool confirmed_by_owner() const { return state("confirmed_by_owner")->confirmed_by_owner(); }

  // A copy of the value, fetched from the owner (on the owner: a copy of the value itself).
  // Throws the error of the call that made the value, or RemoteError naming the owner.
  T to_here(std::chrono::milliseconds timeout) const {
    static_assert(HasCodec<T> && !RemoteClass<T>,
                  "RRef<T>::to_here: T has no codec (a remote object stays on its owner; call its methods)");
    if (is_owner()) return local_value();
    return detail::decode_result<T>("to_here", owner_name(), detail::fetch(state_, timeout));
  }
  T to_here() const { return to_here(default_timeout()); }

  // The value itself; only on the owner (waits for it to be made).
  T& local_value() const { return *static_cast<T*>(state("local_value")->local_object("local_value")); }

  // Calls `method` with `args` on the value, on the owner (a method registered with
  // DISTGRAD_REMOTE_METHOD): rpc_sync waits for the result, rpc_async returns its future and
  // remote keeps it there as another RRef.
  template <typename M, typename... Args>
  auto rpc_async(M method, Args&&... args) const {
    using Traits = detail::MethodTraits<M>;
    static_assert(std::is_same_v<typename Traits::Class, T>, "RRef<T>: the method is not one of T's");
    using R = detail::ResultOf<typename Traits::Result>;
    const std::string& name = detail::registered_method_name<T>(method);
    auto [arguments, count] = encode_for<Traits>(std::forward<Args>(args)...);
    return detail::call_method(state("rpc_async"), name, std::move(arguments), count, default_timeout())
        .then([name, owner = owner_name()](const Future<Encoded>& reply) {
          return detail::decode_result<R>(name, owner, reply.get());
        });
  }
  template <typename M, typename... Args>
  auto rpc_sync(M method, Args&&... args) const {
    return rpc_async(method, std::forward<Args>(args)...).get();
  }
  template <typename M, typename... Args>
  auto remote(M method, Args&&... args) const {
    using Traits = detail::MethodTraits<M>;
    static_assert(std::is_same_v<typename Traits::Class, T>, "RRef<T>: the method is not one of T's");
    using R = detail::ResultOf<typename Traits::Result>;
    static_assert(!std::is_void_v<R>, "RRef<T>::remote: the method returns void; there is no value to refer to");
    auto [arguments, count] = encode_for<Traits>(std::forward<Args>(args)...);
    return RRef<R>(detail::create_remote(owner(), detail::Producer::kMethod, detail::registered_method_name<T>(method),
                                         state("remote"), owned_type_name<R>(), std::move(arguments), count));
  }

  // For codecs and the functions above.
  explicit RRef(std::shared_ptr<detail::RRefState> state) : state_(std::move(state)) {}
  const std::shared_ptr<detail::RRefState>& state() const { return state_; }

 private:
  const std::shared_ptr<detail::RRefState>& state(const char* what) const {
    detail::check_valid(state_, what);
    return state_;
  }
  template <typename Traits, typename... Args>
  std::pair<Encoded, uint32_t> encode_for(Args&&... args) const {
    return std::apply(
        [&]<typename... Params>(std::type_identity<Params>...) {
          return std::pair<Encoded, uint32_t>(detail::encode_arguments<Params...>(owner(), std::forward<Args>(args)...),
                                              sizeof...(Params));
        },
        typename Traits::ParamTags{});
  }

  std::shared_ptr<detail::RRefState> state_;
};

template <typename T>
struct Codec<RRef<T>> {
  static std::string name() { return "RRef<" + owned_type_name<T>() + ">"; }
  static void encode(Encoder& out, const RRef<T>& rref) { detail::encode_rref(out, rref.state()); }
  static RRef<T> decode(Decoder& in) { return RRef<T>(detail::decode_rref(in, owned_type_name<T>())); }
};

// Runs `function(args...)` on `worker` and returns at once an RRef to its result, which stays
// there (torch.distributed.rpc.remote).
template <typename R, typename... Params, typename... Args>
RRef<detail::ResultOf<R>> remote(const WorkerRef& worker, R (*function)(Params...), Args&&... args) {
  static_assert(!std::is_void_v<R>, "rpc::remote: the function returns void; there is no value to refer to");
  const int owner = worker.rank();
  const std::string& name = detail::registered_name(reinterpret_cast<FunctionAddress>(function));
  return RRef<detail::ResultOf<R>>(detail::create_remote(
      owner, detail::Producer::kFunction, name, nullptr, owned_type_name<detail::ResultOf<R>>(),
      detail::encode_arguments<Params...>(owner, std::forward<Args>(args)...), sizeof...(Params)));
}

// Constructs a T (registered with DISTGRAD_REMOTE_CLASS) from `args` on `worker` and returns at
// once an RRef to it.
template <RemoteClass T, typename... Args>
RRef<T> remote_object(const WorkerRef& worker, Args&&... args) {
  const int owner = worker.rank();
  return std::apply(
      [&]<typename... Params>(std::type_identity<Params>...) {
        return RRef<T>(detail::create_remote(
            owner, detail::Producer::kConstructor, owned_type_name<T>(), nullptr, owned_type_name<T>(),
            detail::encode_arguments<Params...>(owner, std::forward<Args>(args)...), sizeof...(Params)));
      },
      typename detail::ConstructorOf<T>::ParamTags{});
}

}  // namespace distgrad::rpc
