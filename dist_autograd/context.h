// Distributed autograd contexts: the state one forward and backward pass leaves on a worker.
//
// A DistAutogradContext is created by the driver (autograd::Context, dist_autograd/
// dist_autograd.h) and joined by every worker a call inside it reaches, under the same id. It
// holds the SendBackward and RecvBackward nodes of the calls (keyed by message id), the
// gradients accumulated for this worker's leaves, the workers it exchanged messages with (so a
// release reaches all of them) and the backward pass running in it (dist_autograd/
// backward_pass.h), which its RecvBackward nodes reach through it. One mutex guards all of it.
//
// Ids are `worker_id << 48 | incarnation << 40 | counter`, unique across the job without
// coordination (the incarnation counts a worker's rejoins: rpc::incarnation()). The current
// context of a thread is set by ContextScope (the driver's autograd::Context, the handler of a
// call made inside a context), with the place of the thread's calls in the context's order
// (Note [Call order], dist_autograd/call_order.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "autograd/node.h"
#include "dist_autograd/backward_pass.h"
#include "dist_autograd/call_order.h"

namespace distgrad::dist_autograd {

class SendBackward;
class RecvBackward;

// A leaf tensor and the gradient accumulated for it.
struct LeafGradient {
  Tensor leaf;
  Tensor grad;
};

class DistAutogradContext {
 public:
  explicit DistAutogradContext(int64_t id) : id_(id) {}

  int64_t id() const { return id_; }

  void add_send(int64_t message_id, std::shared_ptr<SendBackward> send);
  void add_recv(int64_t message_id, std::shared_ptr<RecvBackward> recv);
  // The send function of a message; throws naming the context and the message when unknown.
  std::shared_ptr<SendBackward> send(int64_t message_id) const;
  std::vector<std::shared_ptr<autograd::Node>> send_functions() const;
  size_t num_recv_functions() const;

  void add_worker(int rank);
  std::set<int> workers() const;

  // Adds `grad`, computed by the run `run` of the current pass, to the gradient of `leaf` in
  // this context. A pass's gradients are kept per run and added up in RunOrder when the pass
  // ends (Note [Call order]).
  void accumulate(const Tensor& leaf, const Tensor& grad, const RunOrder& run);
  // Every pass's gradients (the current one's so far included).
  std::vector<LeafGradient> gradients() const;

  // The driver: starts backward pass `pass_id` here; end_pass returns the gradients that pass
  // brought this worker's leaves (the driver adds exactly those into .grad). Throws when a pass
  // of this context is already running.
  std::shared_ptr<BackwardPass> begin_pass(int64_t pass_id, PassOptions options);
  std::vector<LeafGradient> end_pass();
  // A worker that pass `pass_id`'s gradients reached: the pass, begun here on first contact
  // (which ends the previous one here).
  std::shared_ptr<BackwardPass> join_pass(int64_t pass_id, PassOptions options);
  // The pass running in this context (the last one begun or joined), or null.
  std::shared_ptr<BackwardPass> pass() const;

  // Records that the graph of pass `pass_id` was released here; false when it already was.
  bool mark_pass_released(int64_t pass_id);

 private:
  using LeafGradients = std::unordered_map<const void*, LeafGradient>;  // keyed by the leaf's autograd state
  static void add_to(LeafGradients& gradients, const Tensor& leaf, const Tensor& grad);
  // The current pass's gradients, each run's added up in RunOrder.
  LeafGradients pass_sum() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Ends the current pass here: adds its gradients into gradients_; returns them.
  LeafGradients fold_pass() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int64_t id_;
  mutable std::mutex mutex_;  // guards everything below
  std::map<int64_t, std::shared_ptr<SendBackward>> sends_ ABSL_GUARDED_BY(mutex_);
  std::map<int64_t, std::shared_ptr<RecvBackward>> recvs_ ABSL_GUARDED_BY(mutex_);
  std::set<int> workers_ ABSL_GUARDED_BY(mutex_);
  LeafGradients gradients_ ABSL_GUARDED_BY(mutex_);                      // of the passes that ended
  std::map<RunOrder, LeafGradients> pass_runs_ ABSL_GUARDED_BY(mutex_);  // of the current pass, per run
  std::shared_ptr<BackwardPass> pass_ ABSL_GUARDED_BY(mutex_);
  bool driving_pass_ ABSL_GUARDED_BY(mutex_) = false;  // begin_pass ran, end_pass has not
  std::set<int64_t> released_passes_ ABSL_GUARDED_BY(mutex_);
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

// The contexts of this process.
class ContextContainer {
 public:
  static ContextContainer& instance();

  // A new context with a fresh id (the driver's).
  ContextPtr create();
  // The context `id`, joined (created) on first contact; for one released here, a context of the
  // caller's own that is not kept (Note [Late calls of released contexts]).
  ContextPtr get_or_create(int64_t id);
  // The context `id`, or null when it is not (or no longer) here.
  ContextPtr find(int64_t id) const;
  // Removes the context and remembers its id as released, also when it was not here; returns it
  // (null when it was not here).
  ContextPtr release(int64_t id);
  // Every context here, in no particular order.
  std::vector<ContextPtr> contexts() const;

  int64_t next_message_id();

 private:
  int64_t worker_prefix() const;

  // How many released ids a process remembers (Note [Late calls of released contexts]).
  static constexpr size_t kRememberedReleases = 16384;

  mutable std::mutex mutex_;  // guards contexts_, released_ and release_order_
  std::unordered_map<int64_t, ContextPtr> contexts_ ABSL_GUARDED_BY(mutex_);
  std::unordered_set<int64_t> released_ ABSL_GUARDED_BY(mutex_);
  std::deque<int64_t> release_order_ ABSL_GUARDED_BY(mutex_);  // released_, oldest first
  // Counters start at 1: the ids of worker 0 would otherwise begin with 0, which the wire
  // uses for "no context".
  std::atomic<int64_t> next_context_{1};
  std::atomic<int64_t> next_message_{1};
};

// The current context of this thread, or null.
ContextPtr current_context();
// The CallPath of the call this thread serves in its current context ({} on the driver).
const CallPath& current_call();
// The CallPath of the next call this thread makes in its current context (Note [Call order]).
CallPath next_call();
// The same, without taking it: the path the next call will take.
CallPath upcoming_call();

// Makes `context` (possibly null) this thread's current context for the scope; `call` is the
// call the thread serves in it ({}: the driver's context itself). Scopes nest: the previous
// context and its count of calls come back at the end.
class ContextScope {
 public:
  explicit ContextScope(ContextPtr context, CallPath call = {});
  // The scope of a call made again in place of one that failed (partition/reissue.h): `context`
  // current, and the next call this thread makes takes `call`'s place in the context's order, so
  // its messages and their sums keep the failed call's (Note [Call order]).
  static ContextScope repeating(ContextPtr context, const CallPath& call);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  // A thread's current context, the call it serves and the calls it has made in it.
  struct ThreadState {
    ContextPtr context;
    CallPath call;
    uint32_t calls_made = 0;
  };

 private:
  explicit ContextScope(ThreadState state);

  ThreadState previous_;
};

}  // namespace distgrad::dist_autograd
