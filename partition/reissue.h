// Reissuing the partitions of a map-reduce call whose worker was lost: the policy
// RemoteCallOptions::reissue_lost_partitions of remote_*_call and parallelize*
// (partition/remote_call.h, docs/fault-tolerance.md).
//
// Note [Reissued partitions]
// Meta-learning's map-reduce calls are independent per partition: a partition's result depends
// on its arguments, not on the worker that computes it. Under the policy, a partition whose call
// fails because its worker is gone (UNAVAILABLE: it exited or cannot be reached) or did not
// answer in time (DEADLINE_EXCEEDED) is sent again, with the same arguments, to the next live
// worker after it by rank, round the world (rank 0 included), until one answers or every worker
// has been tried; the call's future completes then, with the results in partition order as
// ever. A worker that failed as unreachable is recorded lost (rpc::mark_worker_lost), and
// partitioners leave it out for the rest of the job; one that timed out is not (it may be slow,
// not gone). Any other error (the function threw, an argument did not decode) fails the call as
// without the policy: it would fail on any worker.
//
// Inside a distributed autograd context the new call takes the failed call's place in the
// context's order (ContextScope::repeating, Note [Call order]), with the caller's grad mode, so
// the reduction and the sums of the backward pass are those of a run without the failure, bit
// for bit. The failed call's SendBackward stays in the context, unused: no gradient comes for it.
// The reissue runs on the thread that completed the failed call (a continuation), which only
// encodes and sends. A call whose context was released meanwhile (the caller gave up on it) is
// not reissued: the new call would leave a context on its callee that nothing releases.
//
// Not covered: a lost worker's own nested calls (their state stays on the workers it called
// until the context is released), and a worker lost during the backward pass (the pass fails
// naming it; the driver may rerun the iteration, without it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "dist_autograd/context.h"
#include "rpc/future.h"
#include "rpc/rpc.h"

namespace distgrad::partition_detail {

// Where a partition's call is made: what a reissue needs to make it again in its place.
struct CallSite {
  dist_autograd::ContextPtr context;  // null outside a distributed autograd context
  dist_autograd::CallPath call;       // the place of the call in the context's order
  bool grad_enabled = true;
};

// The site of the next call this thread makes.
CallSite upcoming_call_site();

// Whether a call at `site` may still be made again: not once its distributed autograd context was
// released (the caller gave up on the call, and a new call would leave a context on its callee
// that nothing releases).
bool still_wanted(const CallSite& site);

// Whether a call on `worker`, sent at membership epoch `sent_at_epoch`, that failed with `error`
// failed because the worker is lost (UNAVAILABLE: then recorded lost, unless it rejoined since)
// or late (DEADLINE_EXCEEDED).
bool lost_or_late(const std::exception_ptr& error, int worker, int64_t sent_at_epoch);

// The live worker to send the partition to next, after `worker` by rank round the world, neither
// lost nor in `tried` (to which it is added); nullopt when none is left. Says on stderr where the
// partition goes and why (`error`).
std::optional<int> next_live_worker(const std::exception_ptr& error, int worker, std::vector<int>& tried);

// Sends the partition to `worker` with `send(rank)` (a future of its result) and completes
// `promise` with the first answer, reissuing as Note [Reissued partitions] says.
template <typename Result, typename Send>
void send_until_answered(Send send, CallSite site, int worker, std::vector<int> tried, rpc::Promise<Result> promise) {
  const int64_t epoch = rpc::membership_epoch();
  send(worker).then(
      [send, site, worker, epoch, tried = std::move(tried), promise](const rpc::Future<Result>& done) mutable {
        const std::exception_ptr error = done.error();
        if (error == nullptr) {
          if constexpr (std::is_void_v<Result>) {
            promise.set_value();
          } else {
            promise.set_value(done.get());
          }
          return;
        }
        const bool reissuable = lost_or_late(error, worker, epoch) && still_wanted(site);
        const std::optional<int> next = reissuable ? next_live_worker(error, worker, tried) : std::nullopt;
        if (!next) {
          promise.set_error(error);
          return;
        }
        const autograd::GradModeGuard grad_mode(site.grad_enabled);
        const dist_autograd::ContextScope in_place_of_the_failed_call =
            dist_autograd::ContextScope::repeating(site.context, site.call);
        send_until_answered(std::move(send), std::move(site), *next, std::move(tried), std::move(promise));
      });
}

// The future of a partition's result, reissued while its workers are lost.
template <typename Result, typename Send>
rpc::Future<Result> reissued_while_lost(Send send, int worker) {
  rpc::Promise<Result> promise;
  rpc::Future<Result> result = promise.future();
  send_until_answered(std::move(send), upcoming_call_site(), worker, {worker}, std::move(promise));
  return result;
}

}  // namespace distgrad::partition_detail
