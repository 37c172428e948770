// Map-reduce calls: a registered function run as several RPCs, its results folded into one
// (TorchOpt's remote_async_call / remote_sync_call / parallelize).
//
// The partitioner (partition/partitioner.h) maps the call's arguments to the calls to make —
// or, given a worker (a rank or a name), the whole call runs there unsplit; each call is an
// rpc_async of the function; the reducer (partition/reducer.h) folds the results, in partition
// order. Without a reducer the results come back as a std::vector (empty for an empty batch;
// with a reducer an empty batch is an error at the call). A failed call fails the whole call
// with its RemoteError (naming the worker), unless RemoteCallOptions::reissue_lost_partitions
// sends a lost worker's partitions to live ones (partition/reissue.h). Inside an
// autograd::Context the splits, the calls and the reduction are all differentiable.
//
//   auto fut = dg::remote_async_call(fn, dg::args(params, batch), dg::batch_partitioner, dg::mean_reducer);
//   auto r   = dg::remote_sync_call(fn, dg::args(x), 1);                       // on worker 1, unsplit
//   auto all = dg::remote_sync_call(fn, dg::args(x), dg::batch_partitioner);   // std::vector<R>
//   auto slow = dg::remote_sync_call(fn, dg::args(x), dg::batch_partitioner, {.timeout = 5min});
//
// The optional tail after the reducer, or after the partitioner without one, is a
// RemoteCallOptions (TorchOpt's keyword `timeout`).
//
// parallelize(fn, partitioner, reducer) returns a callable with fn's own parameter list that
// makes the call: without a partitioner it uses batch_partitioner and mean_reducer; with a
// partitioner and no reducer it returns the unreduced list. parallelize_async returns futures.
// RemoteCallOptions may follow the partitioner or the reducer, as in the calls.
//
//   auto meta_loss = dg::parallelize(adapt_and_eval, dg::dim_partitioner(0, {.exclusive = true,
//                                    .keepdim = false}), dg::mean_reducer);
//   dg::Tensor loss = meta_loss(params, tasks, inner_steps);
#pragma once

#include <chrono>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "partition/partitioner.h"
#include "partition/reducer.h"
#include "partition/reissue.h"
#include "rpc/rpc.h"

namespace distgrad {

// "No reducer": a partitioned call returns its results as a std::vector.
struct NoReducer {};

// The optional tail of a map-reduce call: dg::remote_sync_call(fn, args, partitioner, reducer,
// {.timeout = 5min}), or without a reducer dg::remote_sync_call(fn, args, partitioner, {...}).
struct RemoteCallOptions {
  // The deadline of each call; negative: the agent's default (RpcOptions::timeout).
  std::chrono::milliseconds timeout{-1};
  // A partition whose worker is lost (exited, unreachable) or late (past the deadline) is sent
  // again to a live worker, and the call completes as it would have without the failure (Note
  // [Reissued partitions] in partition/reissue.h, docs/fault-tolerance.md). Off: such a call fails.
  bool reissue_lost_partitions = false;
};

// A reducer is anything but the options (which then come after the partitioner).
template <typename T>
concept NotRemoteCallOptions = !std::is_same_v<std::decay_t<T>, RemoteCallOptions>;

namespace partition_detail {

// The calls `partitioner` makes of `arguments`: a worker given by rank or name runs it unsplit;
// otherwise the partitioner is called with the arguments as a tuple or one by one.
template <typename Arguments, typename Partitioner>
std::vector<std::pair<int, Arguments>> calls_of(const Partitioner& partitioner, const Arguments& arguments) {
  if constexpr (std::is_constructible_v<rpc::WorkerRef, const Partitioner&>) {
    return {{rpc::WorkerRef(partitioner).rank(), arguments}};
  } else if constexpr (std::is_invocable_v<const Partitioner&, const Arguments&>) {
    return partitioner(arguments);
  } else {
    static_assert(std::is_invocable_v<decltype(std::apply<const Partitioner&, const Arguments&>), const Partitioner&,
                                      const Arguments&>,
                  "a partitioner is a worker (rank or name), a DimPartitioner, or a callable from the call's "
                  "arguments to std::vector<std::pair<int, std::tuple<...>>>");
    return std::apply(partitioner, arguments);
  }
}

// The call of one partition on `to`.
template <typename R, typename... Params, typename Typed>
auto send_partition(R (*function)(Params...), std::chrono::milliseconds deadline, int to, const Typed& arguments) {
  return std::apply(
      [&](const auto&... values) { return rpc::rpc_async_with_timeout(to, deadline, function, values...); }, arguments);
}

}  // namespace partition_detail

template <typename R, typename... Params, typename Arguments, typename Partitioner = DimPartitioner,
          NotRemoteCallOptions Reducer = NoReducer>
auto remote_async_call(R (*function)(Params...), const Arguments& arguments,
                       const Partitioner& partitioner = batch_partitioner, const Reducer& reducer = {},
                       const RemoteCallOptions& options = {}) {
  using Typed = std::tuple<std::decay_t<Params>...>;
  using Result = std::decay_t<R>;
  static_assert(std::tuple_size_v<Arguments> == sizeof...(Params),
                "remote call: the arguments (dg::args(...)) do not match the function's parameter count");
  const Typed typed = std::make_from_tuple<Typed>(arguments);
  const std::chrono::milliseconds deadline = options.timeout.count() < 0 ? rpc::default_timeout() : options.timeout;
  constexpr bool kReduced = !std::is_same_v<Reducer, NoReducer>;
  const std::vector<std::pair<int, Typed>> calls = partition_detail::calls_of(partitioner, typed);
  // No calls (an empty batch): without a reducer the result is an empty std::vector, as TorchOpt
  // returns an empty list; with one there is nothing to fold, an error here at the call, as the
  // partitioner's own errors are (not at get()).
  DISTGRAD_CHECK(!calls.empty() || !kReduced, "remote call of ",
                 rpc::detail::registered_name(reinterpret_cast<rpc::FunctionAddress>(function)),
                 ": the partitioner made no calls (an empty batch?), so the reducer has nothing to reduce (without a "
                 "reducer the call returns an empty list)");
  std::vector<rpc::Future<Result>> futures;
  futures.reserve(calls.size());
  for (const auto& [worker, call_arguments] : calls) {
    if (!options.reissue_lost_partitions) {
      futures.push_back(partition_detail::send_partition(function, deadline, worker, call_arguments));
      continue;
    }
    futures.push_back(partition_detail::reissued_while_lost<Result>(
        [function, deadline, call_arguments](int to) {
          return partition_detail::send_partition(function, deadline, to, call_arguments);
        },
        worker));
  }
  auto results =
      rpc::collect_all(std::move(futures)).then([](const rpc::Future<std::vector<rpc::Future<Result>>>& done) {
        return rpc::wait_all(done.get());
      });
  if constexpr (!kReduced) {
    return results;
  } else {
    return results.then([reducer](const auto& done) { return reducer(done.get()); });
  }
}

// Without a reducer, with options.
template <typename R, typename... Params, typename Arguments, typename Partitioner>
auto remote_async_call(R (*function)(Params...), const Arguments& arguments, const Partitioner& partitioner,
                       const RemoteCallOptions& options) {
  return remote_async_call(function, arguments, partitioner, NoReducer{}, options);
}

template <typename R, typename... Params, typename Arguments, typename Partitioner = DimPartitioner,
          NotRemoteCallOptions Reducer = NoReducer>
auto remote_sync_call(R (*function)(Params...), const Arguments& arguments,
                      const Partitioner& partitioner = batch_partitioner, const Reducer& reducer = {},
                      const RemoteCallOptions& options = {}) {
  return remote_async_call(function, arguments, partitioner, reducer, options).get();
}
template <typename R, typename... Params, typename Arguments, typename Partitioner>
auto remote_sync_call(R (*function)(Params...), const Arguments& arguments, const Partitioner& partitioner,
                      const RemoteCallOptions& options) {
  return remote_async_call(function, arguments, partitioner, NoReducer{}, options).get();
}

template <typename R, typename... Params, typename Partitioner, NotRemoteCallOptions Reducer>
auto parallelize_async(R (*function)(Params...), Partitioner partitioner, Reducer reducer,
                       RemoteCallOptions options = {}) {
  return [function, partitioner = std::move(partitioner), reducer = std::move(reducer), options](Params... arguments) {
    return remote_async_call(function, std::tuple<std::decay_t<Params>...>(arguments...), partitioner, reducer,
                             options);
  };
}
template <typename R, typename... Params, typename Partitioner>
auto parallelize_async(R (*function)(Params...), Partitioner partitioner, RemoteCallOptions options = {}) {
  return parallelize_async(function, std::move(partitioner), NoReducer{}, options);
}
template <typename R, typename... Params>
auto parallelize_async(R (*function)(Params...)) {
  return parallelize_async(function, batch_partitioner, mean_reducer);
}

template <typename R, typename... Params, typename Partitioner, NotRemoteCallOptions Reducer>
auto parallelize_sync(R (*function)(Params...), Partitioner partitioner, Reducer reducer,
                      RemoteCallOptions options = {}) {
  return [call = parallelize_async(function, std::move(partitioner), std::move(reducer), options)](
             Params... arguments) { return call(arguments...).get(); };
}
template <typename R, typename... Params, typename Partitioner>
auto parallelize_sync(R (*function)(Params...), Partitioner partitioner, RemoteCallOptions options = {}) {
  return parallelize_sync(function, std::move(partitioner), NoReducer{}, options);
}
template <typename R, typename... Params>
auto parallelize_sync(R (*function)(Params...)) {
  return parallelize_sync(function, batch_partitioner, mean_reducer);
}

// parallelize is parallelize_sync.
template <typename R, typename... Params, typename Partitioner, NotRemoteCallOptions Reducer>
auto parallelize(R (*function)(Params...), Partitioner partitioner, Reducer reducer, RemoteCallOptions options = {}) {
  return parallelize_sync(function, std::move(partitioner), std::move(reducer), options);
}
template <typename R, typename... Params, typename Partitioner>
auto parallelize(R (*function)(Params...), Partitioner partitioner, RemoteCallOptions options = {}) {
  return parallelize_sync(function, std::move(partitioner), options);
}
template <typename R, typename... Params>
auto parallelize(R (*function)(Params...)) {
  return parallelize_sync(function);
}

}  // namespace distgrad
